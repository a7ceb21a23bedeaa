"""gate-axes: CI's slice of the claim matrix. Every value of every axis (method, storage,
residency, micro-batches, precision, compile, loss, interruption, distribution, architecture),
read from the registries and setting rules, runs in at least one cell, and each cell trains
like its resident, straight-through, one-process reference: bitwise in one process, within a
stated bound across ranks. gate-matrix runs every pair of values outside CI
(``nox -s gate-matrix``); both share ``support.matrix_claims``.
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
STRENGTH = 1


@pytest.fixture(scope="module")
def cells():
    return covering(STRENGTH)


@pytest.fixture(scope="module")
def space(tmp_path_factory):
    return build_workspace(tmp_path_factory.mktemp("axes"))


def test_cells_hold_every_value(gate, cells):
    coverage_claim(gate, cells, STRENGTH)


def test_single_process_cells_equal_their_reference(gate, cells, space, tmp_path):
    chosen, words = single_process_claim(gate, cells, space, {})
    gate.figure(matrix_figure(chosen, words, tmp_path / "cells.png"), "Single-process cells")


def test_distributed_cells_within_the_bound(gate, cells, space, tmp_path):
    chosen, words = distributed_claim(gate, cells, space, {})
    gate.figure(matrix_figure(chosen, words, tmp_path / "cells.png"), "Distributed cells")
