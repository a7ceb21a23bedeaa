"""What a GPU run quotes beside its numbers: the SM clock (NVML) and the same-session bf16 GEMM
ceiling. Both work on any device argument so they are exercised on CPU too."""

from __future__ import annotations

import shutil
import statistics
import subprocess
import time

import torch

from assay_bench.gemm import sync


def sm_clock_mhz(index: int = 0) -> dict[str, object]:
    """The current and maximum SM clock of GPU ``index``: NVML via pynvml when importable,
    else ``nvidia-smi``; ``{"source": None}`` when neither answers (e.g. no GPU)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        return {
            "source": "nvml",
            "sm_mhz": int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
            "sm_max_mhz": int(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)),
        }
    except Exception:  # no pynvml or no driver: fall through to nvidia-smi
        pass
    if shutil.which("nvidia-smi"):
        proc = subprocess.run(
            [
                "nvidia-smi",
                f"--id={index}",
                "--query-gpu=clocks.sm,clocks.max.sm",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
        parts = [p.strip() for p in proc.stdout.strip().split(",")]
        if proc.returncode == 0 and len(parts) == 2 and all(p.isdigit() for p in parts):
            return {"source": "nvidia-smi", "sm_mhz": int(parts[0]), "sm_max_mhz": int(parts[1])}
    return {"source": None}


def gemm_ceiling_tflops(
    device: str | torch.device,
    *,
    size: int = 8192,
    dtype: torch.dtype = torch.bfloat16,
    repeats: int = 10,
) -> float:
    """Median TFLOP/s of a square ``size`` matmul in ``dtype`` on ``device`` after two warm-up
    calls: the ceiling a training step's GEMM throughput is quoted against, same session."""
    dev = torch.device(device)
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=gen).to(dev, dtype)
    b = torch.randn(size, size, generator=gen).to(dev, dtype)
    out = torch.empty(size, size, device=dev, dtype=dtype)
    times = []
    for k in range(repeats + 2):
        sync(dev)
        started = time.perf_counter()
        torch.mm(a, b, out=out)
        sync(dev)
        if k >= 2:
            times.append(time.perf_counter() - started)
    return 2 * size**3 / statistics.median(times) / 1e12
