"""Streaming overhead: step time of streamed (RAM and warm disk tiers) against resident runs.

Usage: python harness/stream_throughput.py [--device cpu|cuda] [--seq 256] [--steps 5] [--json]

Runs LoRA r8 (attention) training steps on the real SmolLM2 in one process, interleaving the
subjects so that machine drift hits them alike, and reports median step time, tokens/s and
ratios. Streaming recomputes each layer in backward, so it is compared both with plain resident
training and with resident training under per-layer gradient checkpointing (the same
arithmetic). On CUDA it adds peak allocated bytes, the same-session fp32 GEMM ceiling and the
SM clock. Targets (issue: <= 1.15 RAM tier, <= 1.3 disk tier) are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import assay
from assay.adapters import attach
from assay.stream import StreamedModel
from assay_testing.real_model import smollm2_path


def build(kind: str, device: str, cache: Path):
    model = attach(assay.load(smollm2_path()), "lora", rank=8, alpha=16, targets="attention")
    if kind == "resident+checkpointing":
        model.gradient_checkpointing = True
    if kind.startswith("stream"):
        tier = kind.split("-")[1]
        return StreamedModel(model, tier=tier, buffers=2, device=device, cache_dir=cache)
    return model.to(device)


def step_time(model, ids: torch.Tensor, device: str) -> float:
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    started = time.perf_counter()
    logits = model(ids)
    loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
    loss.backward()
    sync()
    return time.perf_counter() - started


def gemm_ceiling(device: str, n: int = 2048, repeats: int = 5) -> float:
    """Same-session fp32 GEMM rate in GFLOP/s (median of ``repeats``)."""
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    times = []
    for _ in range(repeats + 1):
        if device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        a @ b
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    return 2 * n**3 / statistics.median(times[1:]) / 1e9


def sm_clock_mhz() -> int | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        return int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
    except Exception:  # pynvml absent or no NVIDIA driver: the clock is simply not reported
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    kinds = ["resident", "resident+checkpointing", "stream-ram", "stream-disk"]
    cache = Path(tempfile.mkdtemp(prefix="assay-stream-"))
    models = {kind: build(kind, args.device, cache) for kind in kinds}
    ids = torch.randint(0, 49152, (1, args.seq), generator=torch.Generator().manual_seed(0))
    ids = ids.to(args.device)
    samples: dict[str, list[float]] = {kind: [] for kind in kinds}
    for kind in kinds:  # warm-up (and the disk tier's page cache)
        step_time(models[kind], ids, args.device)
    for _ in range(args.steps):
        for kind in kinds:
            samples[kind].append(step_time(models[kind], ids, args.device))
    median = {k: statistics.median(v) for k, v in samples.items()}
    result = {
        "device": args.device,
        "threads": torch.get_num_threads(),
        "seq": args.seq,
        "steps": args.steps,
        "median_step_s": median,
        "tokens_per_s": {k: args.seq / v for k, v in median.items()},
        "ratio_ram_over_resident": median["stream-ram"] / median["resident"],
        "ratio_ram_over_checkpointed": median["stream-ram"] / median["resident+checkpointing"],
        "ratio_disk_over_resident": median["stream-disk"] / median["resident"],
        "ratio_disk_over_checkpointed": median["stream-disk"] / median["resident+checkpointing"],
        "gemm_ceiling_gflops": gemm_ceiling(args.device),
        "targets": {"ram_over_resident": 1.15, "disk_over_resident": 1.3},
    }
    if args.device == "cuda":
        result["sm_clock_mhz"] = sm_clock_mhz()
        result["gpu"] = torch.cuda.get_device_name()
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for kind in kinds:
        print(f"{kind:<24} {median[kind]:.3f} s/step  {result['tokens_per_s'][kind]:.0f} tok/s")
    for key in (
        "ram_over_resident",
        "ram_over_checkpointed",
        "disk_over_resident",
        "disk_over_checkpointed",
    ):
        print(f"{key:<28} {result['ratio_' + key]:.3f}")
    print(f"fp32 GEMM ceiling          {result['gemm_ceiling_gflops']:.1f} GFLOP/s")


if __name__ == "__main__":
    main()
