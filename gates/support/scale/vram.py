"""gate-scale on a GPU: the fit, peak and depth claims repeated for device memory.

The TinyLlama-1.1B shape (4.4 GB of fp32 weights) at 22 layers trains with the process held to
``VRAM_LIMIT`` of device memory (``torch.cuda.set_per_process_memory_fraction``), streamed
from the RAM tier (the base stays in host memory, two layers at a time on the device); the
peaks are the CUDA allocator's high-water marks (assay_bench.scale_step ``--cuda``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from assay.qualify import Threshold
from support.scale.runs import GIB, SHAPE, ratio_claim, step_run

VRAM_LIMIT = 1 * GIB
SHALLOW, DEEP = 4, 22
VRAM_CLAIMS = ("vram.fits.float32", "vram.peak.vs_peft", "vram.depth.step_peak_flat")
VRAM_CODE = ("assay.stream", "assay.train.build", "assay_bench.scale_step")
# (run, subject, depth, limited): each run alone in a fresh process
VRAM_RUNS = (
    ("stream-deep", "stream-ram", DEEP, True),
    ("stream-shallow", "stream-ram", SHALLOW, True),
    ("resident-limited", "resident", DEEP, True),
    ("resident-deep", "resident", DEEP, False),
    ("resident-shallow", "resident", SHALLOW, False),
    ("peft-deep", "peft", DEEP, False),
)


def vram_runs(cache: Path) -> dict[str, dict[str, Any]]:
    """Every VRAM_RUNS entry, two optimizer steps each, on the random models of SHAPE."""
    from assay_testing.scale_models import random_model

    models = {depth: random_model(SHAPE, depth) for depth in (SHALLOW, DEEP)}
    runs = {}
    for name, subject, depth, limited in VRAM_RUNS:
        extra = ("--cuda", "--vram-limit", str(VRAM_LIMIT)) if limited else ("--cuda",)
        runs[name] = step_run(subject, models[depth], cache=cache, extra=extra)
    return runs


def claim_vram(gate, runs: dict[str, dict[str, Any]]) -> None:
    """Claims 1 to 3 of the scale gate, for device memory."""
    peak = {name: run["vram_step_peak_bytes"] for name, run in runs.items()}
    weights = runs["resident-deep"].get("vram_load_peak_bytes", 0)
    fits = gate.claim(
        "vram.fits.float32",
        f"LoRA on the {SHAPE} shape at {DEEP} layers (fp32 weights, {weights / GIB:.1f} GiB on "
        f"the device when resident) trains two optimizer steps, streamed from the RAM tier, "
        f"with the process held to {VRAM_LIMIT / GIB:.2f} GiB of device memory",
        kind="memory",
        threshold=Threshold(">=", 2),
        unit="steps completed",
        code=VRAM_CODE,
    )
    fits.measure(runs["stream-deep"]["steps_done"])
    fits.ran_on("cuda")
    fits.control("the resident run under the same limit", runs["resident-limited"]["steps_done"])
    for claim_id, statement, bound, (num, den), (label, control) in (
        (
            "vram.peak.vs_peft",
            f"the streamed step's device peak at {DEEP} layers is <= 0.30x transformers + PEFT's "
            "resident fp32 step (no limit, same seq and rank)",
            0.30,
            ("stream-deep", "peft-deep"),
            ("assay resident", ("resident-deep", "peft-deep")),
        ),
        (
            "vram.depth.step_peak_flat",
            f"the streamed step's device peak at {DEEP} layers is <= 1.10x its peak at {SHALLOW}",
            1.10,
            ("stream-deep", "stream-shallow"),
            ("assay resident", ("resident-deep", "resident-shallow")),
        ),
    ):
        ratio_claim(
            gate,
            claim_id,
            statement,
            bound=bound,
            unit="x device peak",
            measured=peak[num] / peak[den],
            control=(label, peak[control[0]] / peak[control[1]]),
            code=VRAM_CODE,
            device="cuda",
        )
    gate.note(
        "VRAM runs (device peaks of the steps, load peaks, steps, out of memory): "
        + "; ".join(
            f"{name}: step {run['vram_step_peak_bytes'] / GIB:.2f} GiB, load "
            f"{run.get('vram_load_peak_bytes', 0) / GIB:.2f} GiB, {run['steps_done']} steps"
            + (f", out of memory: {run['oom']}" if run["oom"] else "")
            for name, run in runs.items()
        )
    )
