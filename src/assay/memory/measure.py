"""Honest peak-memory measurement; every result says what it measured (its ``scope``).

Scopes:

- ``cpu-tensor``: tensor bytes seen by ``torch.profiler(profile_memory=True)``. Allocation
  events (signed: frees are negative) are walked in time order and the running maximum above
  the bytes already allocated at the start is the peak. Allocator caching and fragmentation
  are not included.
- ``cpu-process``: VmHWM of a fresh subprocess after ``clear_refs`` (5 resets the high-water
  mark), minus VmRSS just before the step. Includes the allocator, libraries and threads.
- ``cuda-allocated`` / ``cuda-reserved``: ``torch.cuda.max_memory_allocated`` /
  ``max_memory_reserved`` after a reset and a synchronize; ``nvml-process`` adds the NVML
  device-used view (context included), polled because NVML keeps no peak.

"Device peak" of a training step (the memory model's target, the definition gate-stream uses):
the static bytes of the tensors the run keeps on the compute side (weights, packed stores,
adapters, optimizer state, stream slots, each storage counted once) plus the step peak of one
optimizer step (zero_grad, forward, loss, backward, AdamW) after a warm-up step.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

SCOPES = ("cpu-tensor", "cpu-process", "cuda-allocated", "cuda-reserved", "nvml-process")


@dataclass(frozen=True)
class Peak:
    """A peak in bytes above the starting point, and what produced it."""

    scope: str
    peak_bytes: int
    net_bytes: int | None = None
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def tensor_peak(fn: Callable[[], Any]) -> tuple[Any, Peak]:
    """``fn()`` under the profiler; the CPU tensor-level peak (scope ``cpu-tensor``)."""
    from assay.memory.peak import measure_peak

    result, found = measure_peak(fn)
    detail = f"{found.events} allocation events"
    return result, Peak("cpu-tensor", found.peak_bytes, found.net_bytes, detail)


PROC_STATUS = Path("/proc/self/status")


def status_kib(field: str) -> int:
    """A kB field of this process's status (``VmRSS``, ``VmHWM``); OSError naming it if absent
    (process peaks need Linux's /proc)."""
    for line in PROC_STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise OSError(f"{PROC_STATUS} has no {field}")


def process_peak(fn: Callable[[], Any]) -> tuple[Any, Peak]:
    """``fn()`` with the process high-water mark reset first (scope ``cpu-process``).

    Meaningful only in a fresh subprocess that has already run one warm-up of ``fn``: the
    allocator then reuses memory it holds, and the number is growth beyond that.
    """
    Path("/proc/self/clear_refs").write_text("5")
    baseline = status_kib("VmRSS")
    result = fn()
    peak = status_kib("VmHWM")
    return result, Peak("cpu-process", (peak - baseline) * 1024, None, "VmHWM - VmRSS")


def cuda_peaks(fn: Callable[[], Any], device: int = 0) -> tuple[Any, list[Peak]]:
    """``fn()`` on CUDA: allocated and reserved peaks, plus polled NVML when pynvml works."""
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    start_alloc = torch.cuda.memory_allocated(device)
    start_reserved = torch.cuda.memory_reserved(device)
    poller = _NvmlPoller(device)
    poller.start()
    try:
        result = fn()
        torch.cuda.synchronize(device)
    finally:
        nvml = poller.stop()
    peaks = [
        Peak("cuda-allocated", torch.cuda.max_memory_allocated(device) - start_alloc),
        Peak("cuda-reserved", torch.cuda.max_memory_reserved(device) - start_reserved),
    ]
    if nvml is not None:
        peaks.append(Peak("nvml-process", nvml, None, "device used, polled every 1 ms"))
    return result, peaks


class _NvmlPoller:
    """Polls NVML's device-used bytes on a thread; NVML keeps no peak of its own."""

    best: int | None

    def __init__(self, device: int) -> None:
        self.device, self.best, self.done = device, None, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(self.device)
        except Exception:  # no pynvml or no driver: the NVML view is simply absent
            return
        try:
            while not self.done.is_set():
                used = int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
                self.best = used if self.best is None else max(self.best, used)
                self.done.wait(0.001)
        except Exception:  # the driver failed mid-run: keep the peak seen, print no traceback
            return

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> int | None:
        self.done.set()
        self.thread.join()
        return self.best


def storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind ``tensors`` (meta tensors own nothing)."""
    unique: dict[tuple[str, int], int] = {}
    for t in tensors:
        if t.device.type != "meta":
            unique[(str(t.device), t.untyped_storage().data_ptr())] = t.untyped_storage().nbytes()
    return sum(unique.values())


def measure_in_subprocess(
    plan: dict[str, Any], *, process: bool = False, timeout: float = 900
) -> dict[str, Any]:
    """Measure one plan's device peak in a fresh interpreter (``python -m assay.memory.measure``).

    Isolation keeps one row's allocator state and caches out of the next row's numbers.
    """
    proc = subprocess.run(
        [sys.executable, "-m", "assay.memory.measure"],
        input=json.dumps({"plan": plan, "process": process}),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"measurement child failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- one plan, measured (run in a fresh interpreter by measure_in_subprocess) ------------------


def build_plan_run(plan: dict[str, Any]) -> tuple[Callable[[], Any], int, dict[str, Any]]:
    """A seeded random decoder for ``plan`` (a ``predict.Plan`` as a dict), adapted, maybe
    stored and streamed, with AdamW: returns (one optimizer step, static bytes, facts).

    The step mirrors ``assay.train.objective.Objective.loss`` and the Trainer's step: hidden
    states, CE or chunked CE against the head weight with every token scored, summed and
    divided by the step's tokens, backward per micro-batch, then AdamW.
    """
    from assay.adapters import attach
    from assay.model import Decoder, ModelConfig
    from assay.settings.methods import method
    from assay.settings.storages import storage
    from assay.storage import apply_storage
    from assay.stream.layout import base_tensors
    from assay.train.losses import chunked_cross_entropy, cross_entropy
    from assay.train.objective import head_weight

    m = plan["model"]
    config = ModelConfig(
        architecture="llama",
        vocab_size=m["vocab_size"],
        hidden_size=m["hidden_size"],
        intermediate_size=m["intermediate_size"],
        num_layers=m["num_layers"],
        num_heads=m["num_heads"],
        num_kv_heads=m["num_kv_heads"],
        head_dim=m["head_dim"],
        tie_word_embeddings=m["tie_word_embeddings"],
        # absent from a plan written before the two were shape fields: a plain Llama layer
        attention_bias=m.get("attention_bias", False),
        qk_norm=m.get("qk_norm", False),
    )
    torch.manual_seed(0)
    base = Decoder(config)
    with torch.no_grad():
        for p in base.parameters():
            p.normal_(0.0, 0.02)
    base.requires_grad_(False)
    if not storage(plan["storage"]).keeps_parameters:
        for layer in base.layers:
            apply_storage(layer, plan["storage"])
    entry = method(plan["method"])
    if entry.trains_base:
        attach(base, plan["method"])
    else:
        options: dict[str, Any] = {"rank": plan["rank"], "alpha": 2 * plan["rank"]}
        if entry.svd_basis:
            options = {"u": plan["tiny_u"], "r": plan["rank"], "sharing": plan["tiny_sharing"]}
        attach(base, plan["method"], targets=list(plan["targets"]), **options)
    base.gradient_checkpointing = plan["gradient_checkpointing"]
    runner: Any = base
    host: set[int] = set()
    slot_bytes = 0
    if plan["stream_buffers"]:
        from assay.stream import StreamedModel

        runner = StreamedModel(
            base,
            tier="ram",
            buffers=plan["stream_buffers"],
            recompute=plan.get("stream_recompute", True),
        )
        host = {id(t) for layer in base.layers for t in base_tensors(layer).values()}
        slot_bytes = runner.pool.device_bytes
    params = [p for p in base.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-4)
    gen = torch.Generator().manual_seed(1)
    rows, seq = plan["micro_batch"], plan["seq_len"]
    batches = [
        # drawn on the CPU generator, then placed where the run is (CUDA under the VRAM harness)
        torch.randint(0, config.vocab_size, (rows, seq + 1), generator=gen, device="cpu").to(
            torch.get_default_device()
        )
        for _ in range(plan["grad_accum"])
    ]
    tokens = rows * seq * plan["grad_accum"]

    def micro_loss(ids: torch.Tensor) -> torch.Tensor:
        # Objective.loss: the hidden states die with this frame, before backward runs.
        inputs, labels = ids[:, :-1], ids[:, 1:]
        mask = torch.ones_like(labels, dtype=torch.bool)
        hidden = runner.hidden_states(inputs)
        if plan["loss"] == "chunked_ce":
            summed = chunked_cross_entropy(
                hidden, head_weight(base), labels, mask, plan["chunk_size"], reduction="sum"
            )
        else:
            summed = cross_entropy(hidden, head_weight(base), labels, mask, reduction="sum")
        return summed / tokens

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for ids in batches:
            loss = micro_loss(ids)
            loss.backward()
            total += float(loss)
        optimizer.step()
        return total

    step()  # warm-up: AdamW state exists from here on, as in every step after the first
    resident = [t for t in [*base.parameters(), *base.buffers()] if id(t) not in host]
    state = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
    static = storage_bytes([*resident, *state]) + slot_bytes
    facts = {"trainable_params": sum(p.numel() for p in params), "slot_bytes": slot_bytes}
    return step, static, facts


def measure_plan(plan: dict[str, Any], *, process: bool = False) -> dict[str, Any]:
    """Device peak of one plan on CPU: static bytes + the tensor-level peak of one step."""
    import gc

    torch.set_num_threads(1)  # the same kernels (and workspaces) whatever the box's cores
    step, static, facts = build_plan_run(plan)
    gc.collect()
    _, peak = tensor_peak(step)
    out: dict[str, Any] = {
        "scope": "cpu-tensor",
        "static_bytes": static,
        "step_peak_bytes": peak.peak_bytes,
        "device_peak_bytes": static + peak.peak_bytes,
        **facts,
    }
    if process:
        gc.collect()
        out["process"] = process_peak(step)[1].to_dict()
    return out


if __name__ == "__main__":
    request = json.loads(sys.stdin.read())
    print(json.dumps(measure_plan(request["plan"], process=request.get("process", False))))
