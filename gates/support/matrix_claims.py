"""The claims gate-matrix (every pair of axis values) and gate-axes (every value, CI's subset)
make over their cells (not a gate module): the same three claims at either strength.

- Single-process cells (streamed, checkpointed or resumed) end bitwise where their reference
  ends: every step's loss and every trainable tensor ``==``. Controls arm one defect each on a
  cell that holds the axis values the defect hides behind (``CONTROLS``).
- Distributed cells (DDP, FSDP2; 2 gloo ranks) stay within their precision's bound
  (``DISTRIBUTED_BOUNDS``) of their one-process reference: the ranks' sums add in another
  order, so equality is not the claim.
- The cells hold every required unit (value or pair); control: the same cells checked as if
  the registries' newest method had none.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from pathlib import Path

import matplotlib.pyplot as plt

from assay.adapters.registry import METHODS
from assay.qualify import Threshold
from assay_testing.matrix import AXES, Cell, cell_label, uncovered, witness
from support.matrix_runs import (
    Outcome,
    cell_name,
    largest_difference,
    reference_run,
    run_cell,
    tensors,
    unequal,
)

# Bounds on a distributed cell's largest difference from its one-process run, by precision.
# Pilot (2026-12-05, this machine, gate-axes and hand runs): float32 DDP/FSDP2 cells differ by
# at most 6.4e-07 (fp32 sums in another order); a bf16 DDP cell (LoRA, ce) by 1.5e-03, since
# each rank's partial weight-gradient sums are rounded to bf16 (2^-8 relative) before the
# all-reduce adds them. The goal is "the same training up to summation order": 1e-5 in
# float32, and in bf16 one step's learning rate (1e-2: an Adam step moves a weight by about lr,
# so a rounding that flips a near-zero gradient's sign moves it by that much), far below the
# change the control makes (a misnormalised loss moves it by about 6).
DISTRIBUTED_BOUNDS = {"float32": 1e-5, "bf16": 1e-2}
# Each control: a defect, and the axis values of the cell it is armed on (the values behind
# which it hides from one-micro-batch, float32, straight-through runs).
CONTROLS = (
    (
        "stream.engine.grads_assigned_not_accumulated",
        {"residency": "ram-recompute", "micro_batches": "2", "distributed": "single"},
    ),
    (
        "stream.engine.recompute_without_autocast",
        {"residency": "disk-recompute", "precision": "bf16", "distributed": "single"},
    ),
    (
        "train.loop.resume_one_lr_for_all_groups",
        {"method": "loraplus", "interruption": "resumed", "distributed": "single"},
    ),
)
DISTRIBUTED_CONTROL = ("distributed.trainer.tokens_not_summed", {"distributed": "ddp"})
CODE = (
    "assay.train.loop",
    "assay.stream.engine",
    "assay.cli.train",
    "assay_testing.matrix",
    "assay_testing.defects.stream",  # the defects its controls patch in
    "assay_testing.defects.train",
    "assay_testing.patching",
)


def _judged(gate, cells: list[dict[str, str]], space, references: dict[str, Outcome], measure):
    verdicts = []
    for index, cell in enumerate(cells):
        reference = reference_run(cell, space, references)
        outcome = run_cell(cell, space, f"cell-{index:02d}-{cell_name(cell)}")
        verdicts.append(measure(outcome, reference, cell))
        gate.note(f"cell {index}: {cell_label(cell)}: {verdicts[-1][1]}")
    return verdicts


def single_process_claim(gate, cells, space, references):
    """Every single-process cell against its reference, bitwise; returns those cells and a
    word for each."""
    chosen = [c for c in cells if c["distributed"] == "single"]

    def measure(outcome: Outcome, reference: Outcome, cell: Cell):
        bad = unequal(outcome, reference)
        return bad, f"{bad} of {tensors(reference)} losses and tensors unequal"

    verdicts = _judged(gate, chosen, space, references, measure)
    claim = gate.claim(
        "cells.single_process",
        f"{len(chosen)} single-process cells (streamed, recomputed, resumed in a new process): "
        "every step's loss and every trainable tensor torch.equal the resident, "
        "straight-through run of the same numerics",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="unequal losses and tensors",
        code=CODE,
    )
    claim.measure(sum(bad for bad, _ in verdicts))
    for fault, values in CONTROLS:
        cell = witness(values)
        bad = unequal(
            run_cell(cell, space, f"control-{fault}", fault), reference_run(cell, space, references)
        )
        claim.control(f"{fault} on cell {cell_label(cell)}", bad)
    words = ["equal" if bad == 0 else "unequal" for bad, _ in verdicts]
    return chosen, words


def distributed_claim(gate, cells, space, references):
    """Every distributed cell against its one-process reference, within the bound; returns
    those cells and a word for each."""
    chosen = [c for c in cells if c["distributed"] != "single"]

    def measure(outcome: Outcome, reference: Outcome, cell: Cell):
        gap = largest_difference(outcome, reference)
        bound = DISTRIBUTED_BOUNDS[cell["precision"]]
        return gap / bound, f"largest difference {gap:.3g} (bound {bound:g})"

    verdicts = _judged(gate, chosen, space, references, measure)
    claim = gate.claim(
        "cells.distributed",
        f"{len(chosen)} distributed cells (torchrun, 2 gloo ranks, DDP and FSDP2): every step's "
        "loss and every trainable element within its precision's bound (float32 1e-5, bf16 "
        "1e-2) of the one-process run of the same numerics (the ranks' sums add in another "
        "order)",
        kind="correctness",
        threshold=Threshold("<=", 1.0),
        unit="x its precision's bound (largest absolute difference)",
        code=(*CODE, "assay.distributed.trainer"),
    )
    claim.measure(max((ratio for ratio, _ in verdicts), default=0.0))
    fault, values = DISTRIBUTED_CONTROL
    cell = witness(values)
    ratio, _ = measure(
        run_cell(cell, space, f"control-{fault}", fault),
        reference_run(cell, space, references),
        cell,
    )
    claim.control(f"{fault} on cell {cell_label(cell)}", ratio)
    words = ["within" if ratio <= 1.0 else "outside" for ratio, _ in verdicts]
    return chosen, words


def coverage_claim(gate, cells, strength: int) -> None:
    word = "pair of values of two axes" if strength == 2 else "value of every axis"
    claim = gate.claim(
        "coverage.pairs" if strength == 2 else "coverage.values",
        f"{len(cells)} cells generated from the registries and setting rules hold every {word} "
        "that some valid run holds (axes: " + ", ".join(a.name for a in AXES) + ")",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="required units in no cell",
        code=("assay_testing.matrix", "assay.settings.loader", "assay.adapters.registry"),
    )
    claim.measure(len(uncovered(cells, strength)))
    newest = list(METHODS)[-1]
    before = [c for c in cells if c["method"] != newest]
    claim.control(
        f"the same cells less those of the newest method ({newest}), as a matrix written "
        "before it was registered",
        len(uncovered(before, strength)),
    )
    gate.note(
        "axes: " + "; ".join(f"{a.name}: {', '.join(a.values)}" for a in AXES) + ". Comparison "
        "axes (a cell is compared with the same cell at these values): residency resident, "
        "interruption straight, distributed single."
    )


def matrix_figure(cells: list[Cell], words: list[str], path: Path) -> Path:
    """The cells as a table, one row each, its verdict word in the last column."""
    rows = [[*(c[a.name] for a in AXES), w] for c, w in zip(cells, words, strict=True)]
    fig, ax = plt.subplots(figsize=(14, 0.6 + 0.24 * len(rows)))
    ax.axis("off")
    table = ax.table(
        cellText=rows,
        colLabels=[*(a.name for a in AXES), "verdict"],
        loc="upper center",
        cellLoc="left",
    )
    table.auto_set_font_size(False)
    table.set_fontsize(7)
    for (row, col), item in table.get_celld().items():
        if row > 0 and col == len(AXES):
            ok = rows[row - 1][-1] in ("equal", "within")
            item.set_facecolor("#c8e6c9" if ok else "#ffcdd2")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
