"""The claim matrix is generated from the registries and the settings' own rules: every entry
is an axis value, every value (and every pair) that some valid run holds is in a cell, and the
cells are the runs the product accepts."""

from __future__ import annotations

import pytest

from assay.adapters.registry import METHODS
from assay.model.config import SUPPORTED_ARCHITECTURES
from assay.settings import rule
from assay.settings.choices import LOSSES, PRECISIONS
from assay.storage.registry import STORAGES
from assay_testing import matrix

REGISTRIES = {
    "method": METHODS,
    "storage": STORAGES,
    "loss": LOSSES,
    "precision": PRECISIONS,
    "family": SUPPORTED_ARCHITECTURES,
    "distributed": rule("distributed.strategy").choices,
}


@pytest.fixture(scope="module")
def pairwise():
    return matrix.covering(2)


@pytest.mark.parametrize("strength", [1, 2])
def test_every_registry_entry_has_a_cell(strength, pairwise):
    cells = pairwise if strength == 2 else matrix.covering(1)
    for axis, entries in REGISTRIES.items():
        held = {cell[axis] for cell in cells}
        assert set(entries) <= held, f"{axis}: {sorted(set(entries) - held)} in no cell"


def test_the_cells_hold_every_required_value_and_pair(pairwise):
    assert matrix.uncovered(pairwise, 2) == set()
    assert matrix.uncovered(matrix.covering(1), 1) == set()
    # and the requirement is not vacuous: most pairs of values are possible together
    assert len(matrix.required(2)) > 500


def test_every_cell_is_a_run_the_product_accepts_and_compares_something(pairwise):
    assert all(matrix.valid(cell) for cell in pairwise)
    assert not any(matrix.is_reference(cell) for cell in pairwise)
    assert all(matrix.valid(matrix.reference_of(cell)) is False for cell in pairwise)


@pytest.mark.parametrize(
    "values",
    [
        {"method": "full", "storage": "nf4"},
        {"compile": "compiled", "residency": "ram-recompute"},
        {"distributed": "fsdp", "residency": "disk-keep"},
        {"distributed": "fsdp", "storage": "bf16"},
        {"method": "full", "residency": "ram-keep"},
    ],
)
def test_pairs_the_product_refuses_are_not_required(values):
    assert matrix.witness(values) is None
    unit = tuple(sorted(values.items(), key=lambda kv: [a.name for a in matrix.AXES].index(kv[0])))
    assert unit not in matrix.required(2)


def test_a_method_with_no_cell_is_seen(pairwise):
    newest = list(METHODS)[-1]
    before = [cell for cell in pairwise if cell["method"] != newest]
    assert {unit for unit in matrix.uncovered(before, 2) if ("method", newest) in unit}


def test_the_covering_is_deterministic(pairwise):
    assert matrix.covering(2) == pairwise
