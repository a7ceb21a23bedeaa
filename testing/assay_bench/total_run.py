"""The wall time of a whole short run: one subject trains ``steps`` optimizer steps in a fresh
interpreter, compilation included, next to its steady-state step.

A compiled subject pays its compile time in the first steps (and again for any new shape);
the steady state hides that, so a reader needs both numbers. The caller gives the child a fresh
``TORCHINDUCTOR_CACHE_DIR`` (``in_subprocess`` does), so no kernel compiled earlier, by this
session or another, is reused. Nothing here judges the numbers.

usage: python -m assay_bench.total_run SUBJECT SEQ MODEL [--steps 100]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from assay_bench.child import json_child


def measure(name: str, seq: int, model: Path, steps: int) -> dict[str, Any]:
    """In this process: build ``name`` (timed apart), then ``steps`` optimizer steps on one
    random batch of ``seq`` tokens; their total wall time and the step times."""
    import torch

    from assay_bench.step import train_step
    from assay_bench.subjects import build_subjects

    started = time.perf_counter()
    subject = build_subjects([name], model)[name]
    build_s = time.perf_counter() - started
    ids = torch.randint(
        0, subject.config.vocab_size, (1, seq), generator=torch.Generator().manual_seed(0)
    )
    seconds, losses = [], []
    started = time.perf_counter()
    for _ in range(steps):
        took, loss = train_step(subject, ids)
        seconds.append(took)
        losses.append(loss)
    total_s = time.perf_counter() - started
    steady = statistics.median(seconds[steps // 2 :])
    return {
        "subject": name,
        "seq": seq,
        "steps": steps,
        "build_s": build_s,
        "total_s": total_s,
        "first_steps_s": seconds[:3],
        "steady_step_s": steady,
        "over_steady_s": total_s - steady * steps,
        "first_loss": losses[0],
        "last_loss": losses[-1],
    }


def in_subprocess(name: str, seq: int, model: Path, steps: int = 100) -> dict[str, Any]:
    """:func:`measure` in a fresh interpreter with an empty inductor cache of its own."""
    with tempfile.TemporaryDirectory(prefix="inductor-") as cache:
        return json_child(
            "assay_bench.total_run",
            [name, str(seq), str(model), "--steps", str(steps)],
            what=f"{steps}-step run of {name}",
            timeout=3600,
            env={"TORCHINDUCTOR_CACHE_DIR": cache},
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("subject")
    parser.add_argument("seq", type=int)
    parser.add_argument("model", type=Path)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error(f"--steps: at least 2, got {args.steps}")
    print(json.dumps(measure(args.subject, args.seq, args.model, args.steps)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
