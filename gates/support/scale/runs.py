"""gate-scale's machinery: the random models, the `assay train` workspace, one subject per
child process, the line fit and the figure. Nothing here judges a number."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from assay_bench.child import json_child
from assay_bench.scale_train import SEQ

SHAPE = "tinyllama-1.1b"
DEPTHS = (4, 8, 16, 22)
GIB = 1 << 30


def models(cache: Path | None = None) -> dict[int, Path]:
    """The random TinyLlama-shaped models at every depth (written once, then reused)."""
    from assay_testing.scale_models import random_model

    return {depth: random_model(SHAPE, depth, cache=cache) for depth in DEPTHS}


def child(
    module: str, *args: str, env: dict[str, str] | None = None, timeout: float = 3600
) -> dict[str, Any]:
    """``python -m module args`` in a fresh process; its last stdout line as JSON."""
    return json_child(
        module, list(args), what=f"{module} {' '.join(args)}", timeout=timeout, env=env
    )


def step_run(
    subject: str,
    model: Path,
    *,
    cache: Path,
    storage: str = "float32",
    steps: int = 2,
    extra: tuple[str, ...] = (),
) -> dict[str, Any]:
    """One subject's load and steps (assay_bench.scale_step) with the stream cache ``cache``."""
    args = (subject, str(model), "--storage", storage, "--seq", str(SEQ), "--steps", str(steps))
    return child("assay_bench.scale_step", *args, *extra, env={"ASSAY_CACHE": str(cache)})


def ratio_claim(
    gate,
    claim_id: str,
    statement: str,
    *,
    bound: float,
    unit: str,
    measured: float,
    control: tuple[str, float],
    code,
    device: str,
) -> None:
    """One memory claim of gate-scale: a peak ratio at most ``bound``, measured on ``device``,
    with the ratio of a run that must miss it (``control``: label, value)."""
    from assay.qualify import Threshold

    claim = gate.claim(
        claim_id, statement, kind="memory", threshold=Threshold("<=", bound), unit=unit, code=code
    )
    claim.measure(round(measured, 4))
    claim.ran_on(device)
    claim.control(control[0], round(control[1], 4))


def line_fit(xs: list[float], ys: list[float]) -> dict[str, float]:
    """Least-squares line through (xs, ys): slope, intercept and R²."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    intercept = my - slope * mx
    total = sum((y - my) ** 2 for y in ys)
    residual = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys, strict=True))
    return {"slope": slope, "intercept": intercept, "r2": 1 - residual / total if total else 1.0}


def marginal_ratio(depths: list[int], seconds: list[float]) -> float:
    """Per-layer cost between the two deepest runs over that between the two shallowest: 1 for
    a line, above 1 when each added layer costs more than the one before."""
    first = (seconds[1] - seconds[0]) / (depths[1] - depths[0])
    last = (seconds[-1] - seconds[-2]) / (depths[-1] - depths[-2])
    return last / first


def plot(rows: dict[str, dict[int, dict[str, Any]]]) -> Path:
    """Peak RSS and step time against depth, one line per subject."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = {
        "resident-ckpt": "assay resident (checkpointed)",
        "stream-ram": "assay streamed, RAM",
        "stream-disk": "assay streamed, disk",
        "peft": "transformers + PEFT",
    }
    fig, (memory, time) = plt.subplots(1, 2, figsize=(9, 3.4), dpi=120)
    for subject, by_depth in rows.items():
        depths = sorted(by_depth)
        label = labels.get(subject, subject)
        memory.plot(
            depths, [by_depth[d]["step_peak_bytes"] / GIB for d in depths], "o-", label=label
        )
        time.plot(depths, [by_depth[d]["median_step_s"] for d in depths], "o-", label=label)
    memory.set_ylabel("peak RSS of the step (GiB)")
    time.set_ylabel("seconds per optimizer step")
    for axis in (memory, time):
        axis.set_xlabel("decoder layers (TinyLlama-1.1B width)")
        axis.set_xticks(list(DEPTHS))
        axis.grid(alpha=0.3)
    memory.legend(fontsize=7)
    fig.tight_layout()
    out = Path(tempfile.mkdtemp()) / "scale-depth.png"
    fig.savefig(out)
    plt.close(fig)
    return out
