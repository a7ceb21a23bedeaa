"""Peak resident memory of a training step, one subject per process.

Each subject runs alone in a fresh ``python -m assay_bench.rss`` process, so no other
subject's model, allocator cache or peak is counted. The child builds the subject, hands
freed heap back to the kernel, reads its resident set (the loaded model), resets the kernel's
high-water mark (``/proc/self/clear_refs``, Linux) and runs two optimizer steps (the first
allocates AdamW's state); the peak above the loaded model is the high-water mark minus that
resident set. A third step, after those, is measured at the tensor level (the profiler's
allocation events, allocator excluded), so a reader can tell tensors from freed heap that the
allocator keeps. Nothing here judges the numbers.

usage: python -m assay_bench.rss SUBJECT SEQ MODEL [--assay-loss ce|chunked_ce]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from assay.memory.measure import process_peak, status_kib, tensor_peak
from assay_bench.child import json_child


def release_freed_memory() -> None:
    """Collect garbage and hand glibc's free heap back to the kernel (a no-op elsewhere), so
    a loader's leftovers are not counted as the loaded model nor reused unseen by the step."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
        ctypes.CDLL(None).malloc_trim(0)


def step_peak(step: Callable[[], object], repeats: int = 2) -> tuple[int, int]:
    """(resident bytes before, the high-water mark's growth over ``repeats`` calls of
    ``step``): the mark is reset at the resident set first (assay.memory.measure.process_peak),
    so earlier peaks do not count."""
    release_freed_memory()
    loaded = status_kib("VmRSS") * 1024
    _, peak = process_peak(lambda: [step() for _ in range(repeats)])
    return loaded, peak.peak_bytes


def measure(name: str, seq: int, model: Path, assay_loss: str = "chunked_ce") -> dict[str, Any]:
    """In this process: the resident bytes of the loaded subject, the peak of two optimizer
    steps (the first allocates AdamW's state) and then the tensor-level peak of a third, at
    torch's default thread count."""
    import torch

    from assay_bench.step import train_step
    from assay_bench.subjects import build_subjects

    subject = build_subjects([name], model, assay_loss=assay_loss)[name]
    ids = torch.randint(
        0, subject.config.vocab_size, (1, seq), generator=torch.Generator().manual_seed(0)
    )
    loaded, step = step_peak(lambda: train_step(subject, ids))
    _, tensors = tensor_peak(lambda: train_step(subject, ids))
    return {
        "subject": name,
        "seq": seq,
        "loss": subject.loss,
        "loaded_bytes": loaded,
        "peak_bytes": loaded + step,
        "step_peak_bytes": step,
        "tensor_step_peak_bytes": tensors.peak_bytes,
    }


def in_subprocess(
    name: str,
    seq: int,
    model: Path,
    assay_loss: str = "chunked_ce",
    timeout: float = 900,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """:func:`measure` in a fresh interpreter (``env`` added to this one's environment);
    RuntimeError with its stderr if it fails."""
    return json_child(
        "assay_bench.rss",
        [name, str(seq), str(model), "--assay-loss", assay_loss],
        what=f"peak-RSS child for {name}",
        timeout=timeout,
        env=env,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("subject")
    parser.add_argument("seq", type=int)
    parser.add_argument("model", type=Path)
    parser.add_argument("--assay-loss", choices=("ce", "chunked_ce"), default="chunked_ce")
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.subject, args.seq, args.model, args.assay_loss)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
