"""The claim matrix is generated from the registries and the settings' own rules: every entry
is an axis value, every value (and every pair) that some valid run holds is in a cell, and the
cells are the runs the product accepts."""

from __future__ import annotations

import re

import pytest

from assay.errors import ConfigError
from assay.model.families import NAMES as FAMILY_NAMES
from assay.settings import rule
from assay.settings.choices import LOSSES, PRECISIONS
from assay.settings.loader import train_config_from_dict
from assay.settings.methods import METHODS
from assay.settings.storages import STORAGES
from assay_testing import matrix

REGISTRIES = {
    "method": METHODS,
    "storage": STORAGES,
    "loss": LOSSES,
    "precision": PRECISIONS,
    "family": FAMILY_NAMES,
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


def test_every_cell_and_its_reference_are_runs_the_product_accepts(pairwise, tmp_path):
    assert all(matrix.valid(cell) for cell in pairwise)
    assert not any(matrix.is_reference(cell) for cell in pairwise)
    for cell in pairwise:  # the reference is a run too: the loader accepts it
        config = matrix.train_config(
            matrix.reference_of(cell), matrix.PLACEHOLDER, tmp_path / "out"
        )
        train_config_from_dict(config, tmp_path / "reference.yaml")


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"method": "full", "storage": "nf4"}, "adapter.method"),
        ({"compile": "compiled", "residency": "ram-recompute"}, "compile"),
        ({"distributed": "fsdp", "residency": "disk-keep"}, "distributed.strategy"),
        ({"distributed": "fsdp", "storage": "bf16"}, "distributed.strategy"),
        ({"method": "full", "residency": "ram-keep"}, "stream.recompute"),
        ({"method": "full", "residency": "disk-recompute"}, "stream.tier"),
        ({"method": "full", "loss": "dpo"}, "adapter.method"),
        ({"loss": "kto", "distributed": "ddp"}, "loss.type"),
    ],
)
def test_pairs_the_loader_refuses_are_in_no_cell(values, field, pairwise, tmp_path):
    """The loader itself refuses the pair (naming the field), whatever the other axes hold, so
    no cell and no requirement holds it."""
    cell = {**{axis.name: axis.values[0] for axis in matrix.AXES}, **values}
    config = matrix.train_config(cell, matrix.PLACEHOLDER, tmp_path / "out")
    with pytest.raises(ConfigError, match=re.escape(field)):
        train_config_from_dict(config, tmp_path / "cell.yaml")
    assert not any(all(c[k] == v for k, v in values.items()) for c in pairwise)
    assert matrix.witness(values) is None


def test_a_method_with_no_cell_is_seen(pairwise):
    newest = list(METHODS)[-1]
    before = [cell for cell in pairwise if cell["method"] != newest]
    assert {unit for unit in matrix.uncovered(before, 2) if ("method", newest) in unit}


def test_the_covering_is_deterministic(pairwise):
    assert matrix.covering(2) == pairwise
