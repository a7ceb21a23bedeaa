"""A gate's verdict does not depend on what else ran in its process (issue 52, rule 5).

Invariant: for a set of gates, every test's outcome is the same whether its gate runs alone or
with the others, in any order, on one worker or two. The gates of
``support.robustness.verdict_cases`` would leak into each other under a check that reads the
process's imports; gate-robustness claims the whole matrix, and this test runs a short one.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gates"))

from support.robustness.verdict_cases import (
    CONTROLS,
    differing,
    fault_env,
    outcomes,
    runs,
    unexpected,
)

ALONE_AND_ALL = (
    "a alone",
    "c alone",
    "all, -n 1",
    "all reversed, -n 1",
    "all shuffled (3), -n 2",
)


@pytest.mark.slow
def test_each_gate_gets_one_verdict_alone_together_and_shuffled(tmp_path):
    planned = [p for p in runs(seeds=(3,)) if p[0] in ALONE_AND_ALL]
    table = outcomes(tmp_path, planned)
    assert differing(table) == [] and unexpected(table) == []


@pytest.mark.slow
@pytest.mark.parametrize("fault", sorted(CONTROLS))
def test_control_a_process_wide_check_passes_a_stale_gate_after_another(tmp_path, fault):
    """The same runs with each process-wide check injected: a gate with a stale declaration
    passes among all (another gate, or its child, imported its module first) and errors
    alone."""
    planned = [p for p in runs(seeds=()) if p[0] in CONTROLS[fault]]
    assert differing(outcomes(tmp_path, planned, fault_env(fault)))
