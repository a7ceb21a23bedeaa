"""Where a training step's time goes: torch.profiler events summed into a few categories.

Each event's *self* CPU time goes to the category of its own name, or, when its name names
none, to the category of its nearest ancestor that does (an ``aten::empty`` inside a
bitsandbytes dequantize is dequantization). Events without parents (``key_averages()`` rows)
are judged by name alone. ``other`` is the step's wall time minus every categorised second:
it holds the uncategorised ops and the Python and profiler overhead between them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

CATEGORIES = ("matmul", "attention", "cross_entropy", "nf4_dequant", "optimizer", "other")

MATMUL_OPS = frozenset(
    {
        "aten::mm",
        "aten::addmm",
        "aten::addmm_",
        "aten::bmm",
        "aten::baddbmm",
        "aten::matmul",
        "aten::linear",
        "aten::_addmm_activation",
        "aten::mkldnn_linear",
    }
)
# Substrings of lower-cased names without underscores, checked in this order.
PATTERNS = (
    ("nf4_dequant", ("bitsandbytes::", "dequantize4bit", "dequantizeblockwise")),
    ("attention", ("scaleddotproduct", "flashattention")),
    ("cross_entropy", ("logsoftmax", "nllloss", "crossentropy", "chunkedce", "bench.loss")),
    ("optimizer", ("optimizer.", "adamw", "fusedadam")),
    ("matmul", ("mmbackward", "addmmbackward", "bmmbackward")),
)


def category_of(name: str) -> str | None:
    """The category a profiler event name names, or None (to be inherited from a parent)."""
    if name in MATMUL_OPS:
        return "matmul"
    folded = name.lower().replace("_", "")
    for category, needles in PATTERNS:
        if any(n in folded for n in needles):
            return category
    return None


def _name(event: Any) -> str:
    name = getattr(event, "name", None)
    return name if isinstance(name, str) else event.key


def categorise(events: Iterable[Any], wall_s: float) -> dict[str, float]:
    """Seconds per category over ``events`` (FunctionEvent-like: ``name`` or ``key``,
    ``self_cpu_time_total`` in microseconds, optional ``cpu_parent``) of a step of
    ``wall_s`` seconds. ``other`` = wall - the rest, never below zero."""
    seconds = dict.fromkeys(CATEGORIES, 0.0)
    known: dict[int, str | None] = {}

    def resolve(event: Any) -> str | None:
        chain = []
        found = None
        while event is not None:
            key = id(event)
            if key in known:
                found = known[key]
                break
            chain.append(key)
            found = category_of(_name(event))
            if found is not None:
                break
            event = getattr(event, "cpu_parent", None)
        for key in chain:
            known[key] = found
        return found

    for event in events:
        category = resolve(event)
        if category is not None:
            seconds[category] += event.self_cpu_time_total / 1e6
    seconds["other"] = max(0.0, wall_s - sum(seconds.values()))
    return seconds


def summary(seconds: dict[str, float], wall_s: float) -> dict[str, Any]:
    """JSON-ready: the step's wall time and, per category, seconds and fraction of it."""
    return {
        "step_s": wall_s,
        "categories": {
            name: {"s": s, "fraction": s / wall_s if wall_s > 0 else 0.0}
            for name, s in seconds.items()
        },
    }


def profile_step(step: Callable[[], object]) -> dict[str, Any]:
    """Run ``step`` once under torch.profiler (CPU activity, shapes recorded) and summarise it
    by category. ``attention_ops`` names the aten attention kernels that ran (the numerical
    path); ``top_ops`` the costliest ops by self CPU time; ``gemm_calls`` lists the GEMM kernels
    by shape and ``gemm_flops`` sums their FLOPs."""
    from torch.profiler import ProfilerActivity, profile

    from assay_bench.gemm import call_flops, gemm_calls

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        started = time.perf_counter()
        step()
        wall = time.perf_counter() - started
    events = prof.events()
    out = summary(categorise(events, wall), wall)
    attention = {e.name for e in events if category_of(e.name) == "attention"}
    out["attention_ops"] = sorted(n for n in attention if n.startswith("aten::"))
    out["top_ops"] = top_ops(prof.key_averages(), wall)
    calls = gemm_calls(events)
    out["gemm_calls"] = calls
    out["gemm_flops"] = sum(call_flops(c["op"], c["shapes"]) * c["count"] for c in calls)
    return out


def top_ops(averages: Iterable[Any], wall_s: float, count: int = 15) -> list[dict[str, Any]]:
    """The ``count`` ops with the most self CPU time (``key_averages()`` rows: ``key``,
    ``self_cpu_time_total`` in microseconds, ``count``), with their share of ``wall_s``."""
    rows = sorted(averages, key=lambda row: row.self_cpu_time_total, reverse=True)[:count]
    return [
        {
            "name": row.key,
            "s": row.self_cpu_time_total / 1e6,
            "fraction": row.self_cpu_time_total / 1e6 / wall_s if wall_s > 0 else 0.0,
            "calls": row.count,
        }
        for row in rows
    ]


def amdahl_bound(step_s: float, matmul_s: float) -> float:
    """The most any implementation doing the same matmuls at the same speed can gain over a
    step of ``step_s`` seconds that spends ``matmul_s`` in matmuls: ``step_s / matmul_s``."""
    if matmul_s <= 0:
        raise ValueError(f"matmul time must be positive, got {matmul_s}")
    return step_s / matmul_s
