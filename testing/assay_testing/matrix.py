"""The claim matrix: the axes a training run can vary along, read from the product's registries
and setting rules, and covering arrays over them.

A *cell* gives every axis one value. Which cells can run is decided by the product itself: a
cell is valid when ``assay.settings.loader.train_config_from_dict`` accepts the config it stands
for (the product refuses every combination it cannot train there, before loading anything), so
a new rule in the settings changes the matrix with no edit here. Three
axes are *comparisons*: a cell whose residency, interruption or distribution differs from the
reference value is compared with the cell that has the reference values there (resident,
straight through, one process) and the same numerics everywhere else. A cell with all three at
their reference would compare a run with itself, so no cell is chosen that way.

``covering(strength=2)`` covers every pair of axis values that some valid cell holds (pairwise
testing), ``covering(strength=1)`` every single value: the CI subset. Both are deterministic.
A new method, storage, loss, precision, architecture or distributed strategy enters both with
no edit to the gates.
"""

from __future__ import annotations

import functools
import itertools
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.errors import ConfigError
from assay.model.families import NAMES as FAMILY_NAMES
from assay.settings import rule
from assay.settings.choices import LOSSES, PRECISIONS, PREFERENCE_LOSSES
from assay.settings.loader import train_config_from_dict
from assay.settings.methods import METHODS
from assay.settings.storages import STORAGES

RESIDENCIES = (
    "resident",
    "resident-recompute",  # gradient_checkpointing: true
    "ram-recompute",
    "ram-keep",
    "disk-recompute",
    "disk-keep",
)


@dataclass(frozen=True)
class Axis:
    """One axis: its values, the first being the most permissive (what a completion tries
    first), and for a comparison axis the value its reference run takes."""

    name: str
    values: tuple[str, ...]
    reference: str | None = None


def _strategies() -> tuple[str, ...]:
    return tuple(rule("distributed.strategy").choices)


AXES: tuple[Axis, ...] = (
    Axis("family", tuple(FAMILY_NAMES)),
    Axis("method", ("lora", *(m for m in METHODS if m != "lora"))),
    Axis("storage", tuple(STORAGES)),
    Axis("residency", RESIDENCIES, reference="resident"),
    Axis("micro_batches", ("1", "2")),
    Axis("precision", tuple(PRECISIONS)),
    Axis("compile", ("eager", "compiled")),
    Axis("loss", tuple(LOSSES)),
    Axis("interruption", ("resumed", "straight"), reference="straight"),
    Axis("distributed", ("single", *_strategies()), reference="single"),
)
AXIS = {axis.name: axis for axis in AXES}
COMPARISONS = tuple(axis.name for axis in AXES if axis.reference is not None)

Cell = Mapping[str, str]

# What a value costs to run, relative to an in-process eager run: a compile per process, the
# processes of a resume or a torchrun job. Ties in the covering go to the cheaper value.
COST = {"compiled": 6, "ddp": 2, "fsdp": 2, "resumed": 1}


def cost(cell: Cell) -> int:
    return sum(COST.get(value, 0) for value in cell.values())


Pair = tuple[tuple[str, str], tuple[str, str]]


@dataclass(frozen=True)
class Workspace:
    """Where a cell's config points: a model folder per architecture, a tokenizer, a rows file
    per data format, and the folder runs are written under."""

    models: Mapping[str, Path]
    tokenizer: Path
    rows: Mapping[str, Path]
    runs: Path


def data_format(loss: str) -> str:
    """The row format a loss trains on."""
    if loss == "kto":
        return "kto"
    return "preference" if loss in PREFERENCE_LOSSES else "text"


def reference_of(cell: Cell) -> dict[str, str]:
    """The cell with every comparison axis at its reference value: same numerics, resident,
    straight through, one process."""
    return {**cell, **{name: AXIS[name].reference for name in COMPARISONS}}


def is_reference(cell: Cell) -> bool:
    return all(cell[name] == AXIS[name].reference for name in COMPARISONS)


def cell_label(cell: Cell) -> str:
    return " / ".join(cell[axis.name] for axis in AXES)


def train_config(cell: Cell, space: Workspace, out: Path) -> dict[str, Any]:
    """The train config (as a mapping) that runs ``cell``, writing to ``out``. Interruption
    and distribution are how it is launched, not keys: the caller applies them."""
    method = METHODS[cell["method"]]
    adapter: dict[str, Any] = {"method": cell["method"]}
    if method.svd_basis:
        adapter.update(u=5, r=2)
    elif not method.trains_base:
        adapter.update(rank=2, alpha=4)
    loss: dict[str, Any] = {"type": cell["loss"]}
    if cell["loss"] == "chunked_ce":
        loss["chunk_size"] = 7  # divides no row of the batch: a ragged last chunk every time
    residency = cell["residency"]
    config: dict[str, Any] = {
        "model": str(space.models[cell["family"]]),
        "tokenizer": str(space.tokenizer),
        "storage": cell["storage"],
        "adapter": adapter,
        "loss": loss,
        "data": {
            "train": str(space.rows[data_format(cell["loss"])]),
            "format": data_format(cell["loss"]),
            "seq_len": 64,
        },
        "optim": {"lr": 1e-3 if method.trains_base else 1e-2, "warmup_steps": 1},
        "batch": {"micro_batch": 2, "grad_accum": int(cell["micro_batches"])},
        "steps": 3,
        "seed": 5,
        "precision": cell["precision"],
        "compile": cell["compile"] == "compiled",
        "gradient_checkpointing": residency == "resident-recompute",
        "output": {"dir": str(out), "save_every": 100},
    }
    if not residency.startswith("resident"):
        tier, keep = residency.split("-")
        config["stream"] = {"tier": tier, "buffers": 2, "recompute": keep == "recompute"}
    if cell["distributed"] != "single":
        config["distributed"] = {"strategy": cell["distributed"]}
    return config


PLACEHOLDER = Workspace(
    models={a: Path(f"/matrix/{a}") for a in FAMILY_NAMES},
    tokenizer=Path("/matrix/tokenizer.gguf"),
    rows={f: Path(f"/matrix/{f}.jsonl") for f in ("text", "preference", "kto")},
    runs=Path("/matrix/runs"),
)


def valid(cell: Cell) -> bool:
    """The product accepts this cell's config, and the cell compares something (not every
    comparison axis at its reference)."""
    return _valid(tuple(cell[axis.name] for axis in AXES))


@functools.cache
def _valid(values: tuple[str, ...]) -> bool:
    cell = dict(zip(AXIS, values, strict=True))
    if is_reference(cell):
        return False
    try:
        train_config_from_dict(
            train_config(cell, PLACEHOLDER, Path("/matrix/out")), "/matrix/cell.yaml"
        )
    except ConfigError:
        return False
    return True


def _pairs_of(cell: Cell) -> set[Pair]:
    items = [(axis.name, cell[axis.name]) for axis in AXES]
    return set(itertools.combinations(items, 2))


def _units_of(cell: Cell, strength: int) -> set:
    return {((a, cell[a]),) for a in AXIS} if strength == 1 else _pairs_of(cell)


def _completions(fixed: Cell, rng: random.Random, tries: int) -> Iterable[dict[str, str]]:
    """The permissive completion first (every free axis at its first value, interruption
    resumed), then each free axis moved alone through its values, then random ones."""
    free = [axis for axis in AXES if axis.name not in fixed]
    base = {**{axis.name: axis.values[0] for axis in free}, **fixed}
    yield base
    for axis in free:
        for value in axis.values[1:]:
            yield {**base, axis.name: value}
    for _ in range(tries):
        yield {**{axis.name: rng.choice(axis.values) for axis in free}, **fixed}


def witness(fixed: Cell, seed: int = 0, tries: int = 60) -> dict[str, str] | None:
    """A valid cell holding the values ``fixed``, or None when none was found."""
    rng = random.Random(seed)
    return next((c for c in _completions(fixed, rng, tries) if valid(c)), None)


@functools.cache
def required(strength: int) -> frozenset:
    """Every unit (single value, or pair of values of two axes) for which ``witness`` finds a
    valid cell: the permissive completion, each free axis moved alone, then seeded random ones.
    The settings refuse pairs of values (full with nf4, compile with stream), so the first two
    kinds of completion decide every unit whose refusals involve at most one other axis."""
    units: set = set()
    if strength == 1:
        candidates = [((axis.name, v),) for axis in AXES for v in axis.values]
    else:
        candidates = [
            ((a.name, va), (b.name, vb))
            for a, b in itertools.combinations(AXES, 2)
            for va in a.values
            for vb in b.values
        ]
    for unit in candidates:
        if witness(dict(unit)) is not None:
            units.add(unit)
    return frozenset(units)


def covering(strength: int, seed: int = 0, candidates: int = 8) -> list[dict[str, str]]:
    """Valid cells that together hold every required unit of ``strength`` (1: every value, 2:
    every pair). Greedy: each new cell starts from the first uncovered unit and takes, axis by
    axis, the value that covers most new units; the best valid one of ``candidates`` tries is
    kept (the unit's witness when none is valid)."""
    rng = random.Random(seed)
    uncovered = set(required(strength))
    cells: list[dict[str, str]] = []
    while uncovered:
        start = dict(min(uncovered))
        best, gain = None, (-1, 0)
        for _ in range(candidates):
            cell = dict(start)
            for axis in rng.sample(AXES, len(AXES)):
                if axis.name in cell:
                    continue
                scores = {}
                for value in axis.values:
                    trial = {**cell, axis.name: value}
                    scores[value] = sum(
                        all(trial.get(k) == v for k, v in unit) for unit in uncovered
                    )
                top = max(scores.values())
                tied = [v for v, s in scores.items() if s == top]
                cheapest = min(COST.get(v, 0) for v in tied)
                cell[axis.name] = rng.choice([v for v in tied if COST.get(v, 0) == cheapest])
            if valid(cell):
                score = (len(_units_of(cell, strength) & uncovered), -cost(cell))
                if score > gain:
                    best, gain = cell, score
        if best is None:
            best = witness(start)
            assert best is not None, f"required unit {start} has no witness"
        cells.append({axis.name: best[axis.name] for axis in AXES})
        uncovered -= _units_of(best, strength)
    return cells


def uncovered(cells: Iterable[Cell], strength: int) -> set:
    """The required units of ``strength`` that none of ``cells`` holds."""
    held: set = set()
    for cell in cells:
        held |= _units_of(cell, strength)
    return required(strength) - held
