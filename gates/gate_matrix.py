"""gate-matrix: the claim matrix. Every pair of values of two axes (method, storage,
residency, micro-batches, precision, compile, loss, interruption, distribution, architecture),
read from the registries and setting rules, runs together in at least one cell (pairwise, not
the full product), and each cell trains like its resident, straight-through, one-process
reference: bitwise in one process, within a stated bound across ranks. A long gate, run alone
with ``nox -s gate-matrix``; CI runs gate-axes (every single value). Both measure
with ``support.matrix.claims``.
"""

from __future__ import annotations

import pytest

from assay_testing.matrix import covering, uncovered
from support.matrix.claims import (
    CONTROLS,
    DISTRIBUTED_CONTROL,
    axes_note,
    bound_ratio,
    coverage_claim,
    defect_on_cell,
    distributed_cells,
    distributed_claim,
    matrix_figure,
    single_process_cells,
    single_process_claim,
    unequal_tensors,
    verdict_words,
    without_newest_method,
)
from support.matrix.runs import build_workspace

HEADLINE = "cells.single_process"
STRENGTH = 2


@pytest.fixture(scope="module")
def cells():
    return covering(STRENGTH)


@pytest.fixture(scope="module")
def space(tmp_path_factory):
    return build_workspace(tmp_path_factory.mktemp("matrix"))


def test_cells_hold_every_pair_of_values(gate, cells):
    claim = gate.claim(**coverage_claim(STRENGTH, len(cells)))
    claim.measure(len(uncovered(cells, STRENGTH)))
    claim.control(*without_newest_method(cells, STRENGTH))
    gate.note(axes_note())


def test_single_process_cells_equal_their_reference(gate, cells, space, tmp_path):
    references = {}
    chosen, counts = single_process_cells(gate, cells, space, references)
    claim = gate.claim(**single_process_claim(len(chosen)))
    claim.measure(sum(counts))
    for fault, values in CONTROLS:
        claim.control(*defect_on_cell(fault, values, space, references, unequal_tensors))
    words = verdict_words(counts, 0, "equal", "unequal")
    gate.figure(matrix_figure(chosen, words, tmp_path / "cells.png"), "Single-process cells")


def test_distributed_cells_within_the_bound(gate, cells, space, tmp_path):
    references = {}
    chosen, ratios = distributed_cells(gate, cells, space, references)
    claim = gate.claim(**distributed_claim(len(chosen)))
    claim.measure(max(ratios, default=0.0))
    fault, values = DISTRIBUTED_CONTROL
    claim.control(*defect_on_cell(fault, values, space, references, bound_ratio))
    words = verdict_words(ratios, 1.0, "within", "outside")
    gate.figure(matrix_figure(chosen, words, tmp_path / "cells.png"), "Distributed cells")
