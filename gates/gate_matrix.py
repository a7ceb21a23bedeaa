"""gate-matrix: the claim matrix. Every pair of values of two axes (method, storage,
residency, micro-batches, precision, compile, loss, interruption, distribution, architecture),
read from the registries and setting rules, runs together in at least one cell (pairwise, not
the full product), and each cell trains like its resident, straight-through, one-process
reference: bitwise in one process, within a stated bound across ranks. A long gate, run alone
with ``nox -s gate-matrix``; CI runs gate-axes (every single value). Both share
``support.matrix_claims``.
"""

from __future__ import annotations

import pytest

from assay_testing.matrix import covering
from support.matrix_claims import (
    coverage_claim,
    distributed_claim,
    matrix_figure,
    single_process_claim,
)
from support.matrix_runs import build_workspace

HEADLINE = "cells.single_process"
STRENGTH = 2


@pytest.fixture(scope="module")
def cells():
    return covering(STRENGTH)


@pytest.fixture(scope="module")
def space(tmp_path_factory):
    return build_workspace(tmp_path_factory.mktemp("matrix"))


def test_cells_hold_every_pair_of_values(gate, cells):
    coverage_claim(gate, cells, STRENGTH)


def test_single_process_cells_equal_their_reference(gate, cells, space, tmp_path):
    chosen, words = single_process_claim(gate, cells, space, {})
    gate.figure(matrix_figure(chosen, words, tmp_path / "cells.png"), "Single-process cells")


def test_distributed_cells_within_the_bound(gate, cells, space, tmp_path):
    chosen, words = distributed_claim(gate, cells, space, {})
    gate.figure(matrix_figure(chosen, words, tmp_path / "cells.png"), "Distributed cells")
