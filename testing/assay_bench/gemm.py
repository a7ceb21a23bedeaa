"""fp32 GEMM timing: the same-session ceiling, and a replay of the GEMMs one step performed.

The replay takes the matmul kernels a profiled step ran (op and operand shapes, from
``torch.profiler`` with ``record_shapes``) and times the same calls alone, on fresh contiguous
operands, without the profiler: the seconds a step cannot go below while it does these GEMMs
at this machine's speed. It is the denominator of the Amdahl bound in assay_bench.report.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import torch

KERNELS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
POOL_BYTES = 64 << 20  # operand copies per replayed shape: twice a 32 MiB L3


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def gflops(flops: float, seconds: float) -> float:
    return flops / seconds / 1e9


def gemm_seconds(m: int, k: int, n: int, device: str | torch.device = "cpu") -> Callable[[], float]:
    """A timer for one fp32 ``[m, k] @ [k, n]`` into a preallocated output (seconds per call)."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(m, k, generator=gen).to(device)
    b = torch.randn(k, n, generator=gen).to(device)
    out = torch.empty(m, n, device=device)
    dev = torch.device(device)

    def timed() -> float:
        sync(dev)
        started = time.perf_counter()
        torch.mm(a, b, out=out)
        sync(dev)
        return time.perf_counter() - started

    return timed


def gemm_rate(
    m: int, k: int, n: int, repeats: int = 5, device: str | torch.device = "cpu"
) -> float:
    """Median GFLOP/s of ``repeats`` fp32 matmuls of that shape, after two untimed ones."""
    timer = gemm_seconds(m, k, n, device)
    timer(), timer()
    return gflops(2 * m * k * n, statistics.median(timer() for _ in range(repeats)))


def gemm_calls(events: Iterable[Any]) -> list[dict[str, Any]]:
    """[{op, shapes, count}] of the GEMM kernels among profiler events (``input_shapes``
    recorded); scalar arguments (alpha, beta) are dropped from ``shapes``."""
    calls: Counter[tuple[str, tuple[tuple[int, ...], ...]]] = Counter()
    for event in events:
        if event.name in KERNELS:
            shapes = tuple(tuple(s) for s in event.input_shapes if len(s) > 0)
            calls[(event.name, shapes)] += 1
    return [
        {"op": op, "shapes": [list(s) for s in shapes], "count": n}
        for (op, shapes), n in calls.items()
    ]


def call_flops(op: str, shapes: list[list[int]]) -> int:
    """2 x multiply-adds of one call: the last two shapes are the operands."""
    a, b = shapes[-2], shapes[-1]
    batch = a[0] if op in ("aten::bmm", "aten::baddbmm") else 1
    return 2 * batch * a[-2] * a[-1] * b[-1]


def replay_seconds(calls: list[dict[str, Any]], repeats: int = 3) -> float:
    """Median over ``repeats`` of the summed time of every call, each shape timed in a loop of
    its count after one untimed call (fp32, CPU, contiguous operands). Each shape cycles
    through enough operand copies to fill :data:`POOL_BYTES`, so weights are not served from
    cache more than a real step serves them (where every layer has its own)."""
    gen = torch.Generator().manual_seed(0)
    prepared = []
    for call in calls:
        op, shapes, count = call["op"], call["shapes"], call["count"]
        operands = [torch.randn(*shape, generator=gen) for shape in shapes]
        size = sum(t.numel() * t.element_size() for t in operands)
        copies = max(1, min(count, -(-POOL_BYTES // size)))
        pool = [operands] + [[t.clone() for t in operands] for _ in range(copies - 1)]
        prepared.append((_KERNEL[op], pool, count))
    totals = []
    for _ in range(repeats):
        total = 0.0
        for kernel, pool, count in prepared:
            kernel(*pool[-1])
            started = time.perf_counter()
            for i in range(count):
                kernel(*pool[i % len(pool)])
            total += time.perf_counter() - started
        totals.append(total)
    return statistics.median(totals)


_KERNEL = {
    "aten::mm": torch.mm,
    "aten::addmm": torch.addmm,
    "aten::bmm": torch.bmm,
    "aten::baddbmm": torch.baddbmm,
}
