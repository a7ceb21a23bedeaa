"""Tensor-level peak memory of a callable, from torch.profiler allocation events.

torch keeps no CPU allocator peak and tracemalloc cannot see tensors, so we record the
allocations with ``torch.profiler.profile(profile_memory=True)``, walk the Allocation events
(signed sizes: frees are negative) in time order and keep the running maximum of their sum.
The number is the peak of tensor bytes allocated while the callable ran, above what was
already allocated when it started; allocator caching and fragmentation are not included.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch.profiler import ProfilerActivity, profile


@dataclass(frozen=True)
class PeakMeasurement:
    """Peak and net (still allocated at the end) bytes, and how many events were seen."""

    peak_bytes: int
    net_bytes: int
    events: int


def _allocation_events(prof: profile) -> list[tuple[int, int]]:
    """(time ns, signed bytes) of every allocation and free the profiler recorded."""
    from torch._C._profiler import _EventType

    found: list[tuple[int, int]] = []
    # torch types both as optional: they are set once the profiler has run
    stack = list(prof.profiler.kineto_results.experimental_event_tree())  # type: ignore[union-attr]
    while stack:
        node = stack.pop()
        if node.tag == _EventType.Allocation:
            found.append((node.start_time_ns, int(node.extra_fields.alloc_size)))
        stack.extend(node.children)
    return found


def measure_peak(fn: Callable[[], Any], *, cuda: bool = False) -> tuple[Any, PeakMeasurement]:
    """Run ``fn()`` under the profiler; return its result and the tensor-level peak.

    With ``cuda`` the CUDA activity is recorded too and device allocations count (CPU and
    device bytes are summed; on a GPU prefer torch.cuda.max_memory_allocated per device).
    """
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities, profile_memory=True, record_shapes=False) as prof:
        result = fn()
    events = sorted(_allocation_events(prof))
    running = peak = 0
    for _time, size in events:
        running += size
        peak = max(peak, running)
    return result, PeakMeasurement(peak_bytes=peak, net_bytes=running, events=len(events))
