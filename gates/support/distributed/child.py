"""Child processes for gate-distributed (not a gate module).

usage:
  python -m torch.distributed.run --nproc-per-node 2 distributed/child.py ranks SPEC OUT
  python distributed/child.py single SPEC OUT

``ranks`` runs every world-size-2 measurement in one process group: one DDP update and its
broken variants, DDP over a streamed model, FSDP2 (bytes held per rank, one update), and a
real ``assay train`` run under torchrun that stops at step 2 and resumes to step 4. ``single``
runs the world-size-1 side: the single-process reference update, FSDP2 in a group of one,
and resumes of the world-size-2 checkpoint in a plain process (the claim and its controls).
Tensors go to OUT as safetensors, numbers to OUT/<mode>-rank<r>.json; the gate compares them.
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import os
import shutil
import socket
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

from assay.cli import main as assay_main
from assay.distributed.context import DistContext, init
from assay.distributed.state import gather
from assay.distributed.trainer import DistributedTrainer
from assay.distributed.wrap import full_base_bytes, local_base_bytes
from assay.qualify.plugin.child_imports import report_at_exit
from assay.settings.loader import load_train_config
from assay.train.data.dataset import Batch, Cursor
from assay.train.loop import Trainer
from assay.train.run.folder import RUN_MARKER
from assay_testing import defects


class LocalNormalisation(DistributedTrainer):
    """Broken on purpose: each rank divides by its OWN scored tokens, then DDP averages."""

    def _step_counts(self, micro: list[Batch]) -> tuple[int, int]:
        return Trainer._step_counts(self, micro)


class NoWorldScale(DistributedTrainer):
    """Broken on purpose: the loss is not scaled by the world size, so the mean is 1/W off."""

    def _backward(self, share: torch.Tensor) -> None:
        share.backward()


class SkipsGradientReduce(DistributedTrainer):
    """Broken on purpose: gradients are never all-reduced, so each rank keeps its own."""

    def _gradient_sync(self, last: bool) -> contextlib.AbstractContextManager[object]:
        return super()._gradient_sync(False)


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def one_update(trainer: Trainer) -> dict[str, torch.Tensor]:
    """One optimizer step; returns the trainables before (``init/<name>``) and after
    (``param/<name>``) and the reduced gradients the optimizer stepped on (``grad/<name>``),
    all full (gathered), plus the logged step loss."""
    grads: dict[str, torch.Tensor] = {}
    step = trainer.optimizer.step

    def snapshot_then_step(*args, **kwargs):
        for name, p in trainer.params.items():
            if p.grad is not None:
                grads[f"grad/{name}"] = _full(p.grad).detach().cpu().clone()
        return step(*args, **kwargs)

    before, _ = gather(trainer.params, trainer.optimizer)
    initial = {f"init/{n}": p.detach().cpu().clone() for n, p in before.items()}
    trainer.optimizer.step = snapshot_then_step
    record = trainer.train_step()
    params, _ = gather(trainer.params, trainer.optimizer)
    out = {f"param/{n}": p.detach().cpu().clone() for n, p in params.items()}
    out.update(grads)
    out.update(initial)
    out["loss"] = torch.tensor([record.loss], dtype=torch.float64)
    return out


def cli_train(*args: str) -> dict:
    """``assay train ... --json`` in this process; the summary (rank 0) or {}."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = assay_main(["train", *args, "--json", "--no-progress"])
    if code != 0:
        raise SystemExit(f"assay train {args} exited {code}")
    text = buffer.getvalue().strip()
    return json.loads(text) if text else {}


def ranks(spec: dict, out: Path, context: DistContext) -> dict:
    results: dict = {"rank": context.rank, "world_size": context.world_size}
    rank = context.rank
    update = load_train_config(spec["update_ddp"])
    runs = {
        "ddp": (DistributedTrainer, update, {}),
        "ddp_skip": (SkipsGradientReduce, update, {}),
        "ddp_local_norm": (LocalNormalisation, update, {}),
        "ddp_no_scale": (NoWorldScale, update, {}),
        "stream": (DistributedTrainer, load_train_config(spec["update_stream"]), {}),
        "stream_skip": (SkipsGradientReduce, load_train_config(spec["update_stream"]), {}),
        "fsdp": (DistributedTrainer, load_train_config(spec["update_fsdp"]), {}),
        "fsdp_skip": (SkipsGradientReduce, load_train_config(spec["update_fsdp"]), {}),
    }
    for name, (cls, config, kwargs) in runs.items():
        trainer = cls(config, context, progress=False, **kwargs)
        results[f"{name}.local_base_bytes"] = local_base_bytes(trainer.base)
        results[f"{name}.full_base_bytes"] = full_base_bytes(trainer.base)
        save_file(one_update(trainer), str(out / f"{name}-rank{rank}.safetensors"))
        results[f"{name}.local_base_bytes_after_step"] = local_base_bytes(trainer.base)
        del trainer
    # Control for the byte probe: FSDP over the decoder layers only (embeddings left whole).
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from assay.train.build import build_model

    _, base = build_model(load_train_config(spec["update_fsdp"]), context.device)
    mesh = init_device_mesh(torch.device(context.device).type, (context.world_size,))
    for layer in base.layers:
        fully_shard(layer, mesh=mesh)
    results["layers_only.local_base_bytes"] = local_base_bytes(base)
    del base
    # The real command line under torchrun: stop at 2 (checkpoint), resume to 4 at ws 2.
    options = ("--strategy", "fsdp", "--device", spec["device"])
    first = cli_train(spec["resume_ws2"], *options, "--stop-at", "2")
    second = cli_train(spec["resume_ws2"], *options, "--resume", spec["ws2_dir"])
    if context.is_main:
        results["resume.ws2_first"] = first["losses"]
        results["resume.ws2_continuation"] = second["losses"]
        results["resume.summary_world_size"] = second["world_size"]
    return results


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _copy_checkpoint(source: Path, run_dir: Path, step: int) -> Path:
    """A run folder holding ``source``'s checkpoint at ``step``, marked as a run like the one it
    came from (``assay train --resume`` resumes only a folder carrying the run marker)."""
    name = f"step-{step:06d}"
    shutil.copytree(source / name, run_dir / name)
    shutil.copy2(source / RUN_MARKER, run_dir / RUN_MARKER)
    (run_dir / "latest").write_text(f"{name}\n")
    return run_dir


def single(spec: dict, out: Path, device: str) -> dict:
    results: dict = {"rank": 0, "world_size": 1}
    reference = Trainer(load_train_config(spec["update_ddp"]), device=device, progress=False)
    results["reference.full_base_bytes"] = full_base_bytes(reference.base)
    save_file(one_update(reference), str(out / "reference.safetensors"))
    # World size 2's checkpoint at step 2, resumed by a plain `assay train --resume`.
    ws2_dir, stop = Path(spec["ws2_dir"]), 2
    resumed = _copy_checkpoint(ws2_dir, Path(spec["ws1_dir"]), stop)
    summary = cli_train(spec["resume_ws1"], "--resume", str(resumed), "--device", device)
    results["resume.ws1_continuation"] = summary["losses"]
    results["resume.ws1_summary_world_size"] = summary.get("world_size", 1)
    for control in ("fresh_optimizer", "per_rank_cursor"):
        run_dir = _copy_checkpoint(ws2_dir, Path(spec[f"{control}_dir"]), stop)
        trainer = Trainer(
            load_train_config(spec[f"{control}_config"]), device=device, progress=False
        )
        fresh = control == "fresh_optimizer"  # the control resumes with a fresh optimizer
        lost = "train.checkpoint.directory.optimizer_not_restored"
        with defects.inject(lost) if fresh else contextlib.nullcontext():
            trainer.resume(run_dir)
        if control == "per_rank_cursor":
            # The defect a per-rank data position makes: one rank's rows, not the step's.
            cursor = trainer.batches.cursor
            halved = Cursor(cursor.epoch, cursor.position // 2, cursor.seed, cursor.shuffle)
            trainer.batches = trainer._batches(halved)
        results[f"resume.{control}"] = trainer.train()["losses"]
    # FSDP2 in a process group of one: the probe must report the whole base.
    os.environ.update(
        RANK="0",
        WORLD_SIZE="1",
        LOCAL_RANK="0",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(_free_port()),
    )
    context = init(device)
    try:
        trainer = DistributedTrainer(
            load_train_config(spec["update_fsdp"]), context, progress=False
        )
        results["fsdp_ws1.local_base_bytes"] = local_base_bytes(trainer.base)
        results["fsdp_ws1.full_base_bytes"] = full_base_bytes(trainer.base)
        save_file(one_update(trainer), str(out / "fsdp_ws1.safetensors"))
    finally:
        context.close()
    return results


def main() -> None:
    report_at_exit()  # a gate's child: the gate counts the code it ran here
    mode, spec_path, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    spec = json.loads(spec_path.read_text())
    out.mkdir(parents=True, exist_ok=True)
    if mode == "ranks":
        context = init(spec["device"], spec["backend"])
        try:
            results = ranks(spec, out, context)
            gc.collect()  # the wrappers ranks() built hold the group: free them before leaving it
            context.finish()
        finally:
            context.close()
    elif mode == "single":
        results = single(spec, out, spec["device"])
    else:
        raise SystemExit(f"unknown mode {mode!r}: expected ranks or single")
    name = f"{mode}-rank{results['rank']}.json"
    (out / name).write_text(json.dumps(results, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
