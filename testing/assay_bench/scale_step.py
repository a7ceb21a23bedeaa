"""One subject's load and training steps on a model folder, in its own process: load time and
peak, then the peak and time of its optimizer steps.

Subjects: ``resident`` (assay, the base in RAM), ``resident-ckpt`` (the same with activation
checkpointing: a layer's activations are recomputed in backward, as a streamed run does),
``stream-ram`` and ``stream-disk`` (assay, 2 buffers, the layers recomputed in backward) and
``peft`` (transformers + PEFT, resident, no checkpointing). Every subject trains LoRA r8/alpha
16 on the attention projections with AdamW on the same random ids; assay subjects are built by
``assay.train.build.build_runner``, the function ``assay train`` builds with, and take assay's
chunked CE; PEFT takes F.cross_entropy over full logits, as transformers does.

The load peak is the process high-water mark (VmHWM) once the subject is built. Then freed heap
is handed back, the mark is reset (``/proc/self/clear_refs``) and the steps run: the step peak
is the mark after them, the resident set of the loaded model included, as assay_bench.rss
reads it. The step time is the median over the steps (the first allocates AdamW's state, a few
MB for LoRA, so it is not set apart). Nothing here judges the numbers.

Two knobs exist for the scale gate's controls and rows: ``--copy-delay-per-layer S`` routes
the stream's copies through an engine that sleeps S x the layer's index before each copy (a
fetch whose cost grows with depth, injected from outside), and ``--drop-caches`` empties the
page cache after the load (root only; the result says whether it was allowed), so the steps
read a cold disk.

With ``--cuda`` the subject computes on the GPU (a streamed base stays in host RAM or on disk)
and the process is held to ``--vram-limit`` bytes of device memory: the result is the device
peaks and whether the device ran out of memory (``measure_vram``).

usage: python -m assay_bench.scale_step SUBJECT MODEL [--storage S] [--seq 256] [--steps 2]
       [--copy-delay-per-layer S] [--drop-caches] [--cuda [--vram-limit BYTES]]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from assay_bench.scale_train import ATTENTION, drop_page_cache

SUBJECTS = ("resident", "resident-ckpt", "stream-ram", "stream-disk", "peft")


def build(subject: str, model: Path, storage: str, device: str = "cpu"):
    """(model, optimizer, loss kind) of ``subject``, computing on ``device``."""
    import torch

    if subject == "peft":
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM

        dense = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
        lora = LoraConfig(r=8, lora_alpha=16, target_modules=ATTENTION, lora_dropout=0.0)
        peft = get_peft_model(dense, lora).to(device)
        params = [p for p in peft.parameters() if p.requires_grad]
        return peft, torch.optim.AdamW(params, lr=1e-4), "ce"
    from assay.settings import StreamConfig
    from assay.train.build import build_runner

    stream = None
    if subject.startswith("stream-"):
        stream = StreamConfig(tier=subject.removeprefix("stream-"), buffers=2, recompute=True)
    runner, base = build_runner(
        model,
        storage=storage,
        method="lora",
        seed=0,
        adapter_options={"rank": 8, "alpha": 16, "targets": ATTENTION},
        gradient_checkpointing=subject == "resident-ckpt",
        stream=stream,
        device=device,
    )
    params = [p for p in base.parameters() if p.requires_grad]
    return runner, torch.optim.AdamW(params, lr=1e-4), "chunked_ce"


class DelayByLayer:
    """A CPU copy engine that sleeps ``per_layer`` x the layer's index before each copy."""

    def __init__(self, per_layer: float) -> None:
        from assay.stream.pool import ThreadCopies

        self.per_layer, self.copies = per_layer, ThreadCopies()

    def submit(self, store, layer: int, buffer, done):
        def delayed() -> None:
            time.sleep(self.per_layer * layer)
            done()

        return self.copies.submit(store, layer, buffer, delayed)


def measure(
    subject: str,
    model: Path,
    *,
    storage: str,
    seq: int,
    steps: int,
    copy_delay: float = 0.0,
    drop_caches: bool = False,
) -> dict[str, Any]:
    """Load, then ``steps`` optimizer steps, timed and peak-measured (see the module doc)."""
    import torch

    from assay.memory.measure import status_kib
    from assay.model.loader import open_source
    from assay_bench.rss import release_freed_memory
    from assay_bench.step import step_loss

    config = open_source(model).config
    started = time.perf_counter()
    runner, optimizer, loss_kind = build(subject, model, storage)
    load_s = time.perf_counter() - started
    load_peak = status_kib("VmHWM") * 1024
    forward = (lambda ids: runner(input_ids=ids).logits) if subject == "peft" else None
    ids = torch.randint(0, config.vocab_size, (1, seq), generator=torch.Generator().manual_seed(0))
    if copy_delay:
        runner.pool.set_copy_engine(DelayByLayer(copy_delay))
    cold = drop_page_cache() if drop_caches else "not asked"
    release_freed_memory()
    loaded = status_kib("VmRSS") * 1024
    Path("/proc/self/clear_refs").write_text("5")
    times, losses = [], []
    for _ in range(steps):
        began = time.perf_counter()
        loss = step_loss(runner, ids, loss_kind, forward)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - began)
        losses.append(float(loss.detach()))
    return {
        "subject": subject,
        "storage": storage,
        "seq": seq,
        "layers": config.num_layers,
        "load_s": load_s,
        "load_peak_bytes": load_peak,
        "loaded_bytes": loaded,
        "step_peak_bytes": status_kib("VmHWM") * 1024,
        "step_s": times,
        "median_step_s": statistics.median(times),
        "losses": losses,
        "threads": torch.get_num_threads(),
        "copy_delay_per_layer_s": copy_delay,
        "page_cache_dropped": cold is None,
        "page_cache_note": cold,
    }


def measure_vram(
    subject: str, model: Path, *, storage: str, seq: int, steps: int, limit: int | None
) -> dict[str, Any]:
    """On CUDA, this process held to ``limit`` bytes of device memory
    (``torch.cuda.set_per_process_memory_fraction``): the load's and the steps' device peaks
    (the allocator's high-water marks, the mark reset after the load), the steps completed and
    whether the device ran out of memory (a run that does is reported, not raised)."""
    import torch

    from assay.model.loader import open_source
    from assay_bench.step import step_loss

    total = torch.cuda.get_device_properties(0).total_memory
    if limit is not None:
        torch.cuda.set_per_process_memory_fraction(min(1.0, limit / total))
    config = open_source(model).config
    out: dict[str, Any] = {
        "subject": subject,
        "storage": storage,
        "seq": seq,
        "device": "cuda",
        "layers": config.num_layers,
        "vram_limit_bytes": limit,
        "device_total_bytes": total,
        "steps_done": 0,
        "oom": None,
    }
    times: list[float] = []
    try:
        runner, optimizer, loss_kind = build(subject, model, storage, device="cuda")
        out["vram_load_peak_bytes"] = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        forward = (lambda ids: runner(input_ids=ids).logits) if subject == "peft" else None
        ids = torch.randint(
            0,
            config.vocab_size,
            (1, seq),
            device="cuda",
            generator=torch.Generator("cuda").manual_seed(0),
        )
        for _ in range(steps):
            torch.cuda.synchronize()
            began = time.perf_counter()
            loss = step_loss(runner, ids, loss_kind, forward)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - began)
            out["steps_done"] += 1
    except torch.OutOfMemoryError as error:
        out["oom"] = str(error).splitlines()[0][:300]
    out["vram_step_peak_bytes"] = torch.cuda.max_memory_allocated()
    out["step_s"] = times
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("subject", choices=SUBJECTS)
    parser.add_argument("model", type=Path, help="an HF safetensors folder")
    parser.add_argument("--storage", default="float32")
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--copy-delay-per-layer", type=float, default=0.0)
    parser.add_argument("--drop-caches", action="store_true")
    parser.add_argument("--cuda", action="store_true", help="compute on CUDA; measure VRAM")
    parser.add_argument(
        "--vram-limit",
        type=int,
        default=None,
        metavar="BYTES",
        help="with --cuda: the process's device-memory limit",
    )
    args = parser.parse_args(argv)
    if args.copy_delay_per_layer and not args.subject.startswith("stream-"):
        parser.error("--copy-delay-per-layer needs a stream-* subject")
    if args.vram_limit is not None and not args.cuda:
        parser.error("--vram-limit needs --cuda")
    if args.cuda:
        result = measure_vram(
            args.subject,
            args.model,
            storage=args.storage,
            seq=args.seq,
            steps=args.steps,
            limit=args.vram_limit,
        )
    else:
        result = measure(
            args.subject,
            args.model,
            storage=args.storage,
            seq=args.seq,
            steps=args.steps,
            copy_delay=args.copy_delay_per_layer,
            drop_caches=args.drop_caches,
        )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
