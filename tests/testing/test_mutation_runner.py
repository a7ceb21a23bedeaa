"""The mutant runner on a fake subject: a kill needs a clean pass and a failure with the fault."""

from __future__ import annotations

from pathlib import Path

import pytest

from assay_testing.mutation import (
    PytestRun,
    classify,
    clean_killers,
    covered,
    mutmut_score,
    run_mutants,
    run_pytest,
)

SUBJECT = """
import os, time

def test_sees_no_defect():
    assert "qualify.judging.stale.ignore" not in os.environ.get("ASSAY_FAULTS", "").split(",")

def test_always_passes():
    pass

def test_always_fails():
    assert False

def test_hangs():
    time.sleep(60)
"""


@pytest.fixture
def subject(tmp_path: Path) -> Path:
    (tmp_path / "test_subject.py").write_text(SUBJECT)
    return tmp_path


def test_killed_survived_invalid_and_error_from_one_clean_run(subject):
    nodes = [
        f"test_subject.py::{n}"
        for n in ("test_sees_no_defect", "test_always_passes", "test_always_fails")
    ]
    clean = run_pytest(
        nodes, faults="", root=subject, scratch=subject, timeout_s=120, first_failure=False
    )
    assert clean.outcomes[nodes[0]] == "PASSED" and clean.outcomes[nodes[2]] == "FAILED"
    results = run_mutants(
        [
            (
                "qualify.judging.stale.ignore",
                [nodes[0]],
                120,
            ),  # the killer fails only when the defect is armed
            ("qualify.ledger.chain.unchained", [nodes[0]], 120),  # armed, but nothing looks at it
            (
                "qualify.judging.stale.ignore",
                [nodes[2]],
                120,
            ),  # fails with or without the fault: not a kill
            (
                "qualify.judging.stale.ignore",
                ["test_subject.py::test_missing"],
                120,
            ),  # never ran in the clean run
        ],
        root=subject,
        scratch=subject,
        clean=clean,
        jobs=2,
    )
    assert [r.verdict for r in results] == ["killed", "survived", "invalid", "invalid"]


def test_a_run_past_its_budget_is_a_timeout_not_a_kill(subject):
    run = run_pytest(
        ["test_subject.py::test_hangs"],
        faults="qualify.judging.stale.ignore",
        root=subject,
        scratch=subject,
        timeout_s=3,
    )
    assert run.returncode is None
    assert classify(run, True) == "timeout"


def test_classify_counts_only_exit_code_one_as_a_kill():
    def run(code):
        return PytestRun(code, 0.0, {}, "")

    assert classify(run(1), True) == "killed"
    assert classify(run(0), True) == "survived"
    assert [classify(run(c), True) for c in (2, 3, 4, 5)] == ["error"] * 4
    assert classify(run(1), False) == "invalid"


def test_a_killer_selects_its_parameters_and_whole_files():
    outcomes = {"t.py::a[1]": "PASSED", "t.py::a[2]": "FAILED", "t.py::ab": "PASSED"}
    assert covered(outcomes, "t.py::a") == ["PASSED", "FAILED"]
    assert len(covered(outcomes, "t.py")) == 3
    assert not clean_killers(PytestRun(0, 0.0, outcomes, ""), ["t.py::a"])
    assert clean_killers(PytestRun(0, 0.0, outcomes, ""), ["t.py::ab"])


def test_mutmut_score_counts_timeouts_as_killed_and_leaves_unchecked_out():
    codes = {"a": 1, "b": 0, "c": 36, "d": None, "e": 33, "f": 3, "g": -11}
    counts = mutmut_score(codes)
    assert (counts["killed"], counts["survived"], counts["timeout"]) == (2, 1, 1)
    # "no tests" is a mutant the selected tests let through: tested, not killed.
    assert (counts["no_tests"], counts["tested"]) == (1, 5)
    assert (counts["not_checked"], counts["other"], counts["total"]) == (1, 1, 7)
    assert counts["score"] == 0.6
    assert mutmut_score({})["score"] == 0.0
