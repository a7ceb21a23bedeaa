"""The mutant runners on fake subjects: a kill needs a clean pass and a failure with the fault
(and, against gates, a failing claim)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assay_testing.mutation import (
    PytestRun,
    classify,
    clean_killers,
    covered,
    covering_tests,
    failing_claims,
    gate_verdict,
    mutmut_score,
    newest_claims,
    run_gate_mutants,
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


GATE_SUBJECT = """
import os

from assay.qualify import Threshold


def _armed():
    # the gate runner arms its mutant through ASSAY_MUTANT (in children too)
    return os.environ.get("ASSAY_MUTANT") == "qualify.judging.stale.ignore"


def _claim(gate, name, value, control=1):
    claim = gate.claim(name, "counts", kind="correctness",
                       threshold=Threshold("==", 0), unit="count", code=())
    claim.measure(value)
    claim.control("the same, broken", control)


def test_claim_fails_when_armed(gate):
    _claim(gate, "subject.count", int(_armed()))


def test_raises_when_armed(gate):
    assert not _armed()
    _claim(gate, "subject.raises", 0)


def test_claim_always_fails(gate):
    _claim(gate, "subject.always", 1)


def test_control_blinded_when_armed(gate):
    _claim(gate, "subject.blind", 0, control=int(not _armed()))
"""


@pytest.fixture
def gate_subject(tmp_path: Path) -> Path:
    (tmp_path / "gates").mkdir()
    (tmp_path / "gates/gate_subject.py").write_text(GATE_SUBJECT)
    return tmp_path


def test_gate_kills_need_a_failing_claim_and_a_clean_pass(gate_subject):
    node = "gates/gate_subject.py::{}".format
    results, clean = run_gate_mutants(
        [
            ("qualify.judging.stale.ignore", [node("test_claim_fails_when_armed")]),
            ("qualify.judging.stale.ignore", [node("test_raises_when_armed")]),
            ("qualify.ledger.chain.unchained", [node("test_claim_fails_when_armed")]),
            ("qualify.judging.stale.ignore", [node("test_claim_always_fails")]),
            ("qualify.judging.stale.ignore", []),
            # a gate test that raised does not stop the run: the claim after it still fails
            (
                "qualify.judging.stale.ignore",
                [node("test_raises_when_armed"), node("test_claim_fails_when_armed")],
            ),
            # the measurement holds but the control stopped failing: the gate does not pass
            ("qualify.judging.stale.ignore", [node("test_control_blinded_when_armed")]),
        ],
        root=gate_subject,
        scratch=gate_subject / "scratch",
        budget_s=120,
        jobs=2,
    )
    verdicts = [r.verdict for r in results]
    assert verdicts == [
        "killed",
        "errored",
        "survived",
        "invalid",
        "unreached",
        "killed",
        "killed",
    ]
    assert results[0].failed_claims == ("subject: subject.count",)
    assert results[6].failed_claims == ("subject: subject.blind (inconclusive)",)
    assert results[1].failed_tests == (node("test_raises_when_armed"),)
    # one clean run per failing set; the always-failing claim reads as a kill there (the
    # control's signal), the two that fail only with the mutant do not
    assert sorted(clean.values()) == ["killed", "survived", "survived", "survived", "survived"]


def test_a_claim_counts_against_a_mutant_when_it_does_not_pass_on_its_evidence(tmp_path):
    """Failed, or measured within its bound with a control no longer failing; never a claim that
    was not measured (its test raised first) nor a speed claim (the machine was loaded)."""

    def claim(name, verdict, value, kind="correctness"):
        measurement = None if value is None else {"value": value}
        return {"id": name, "verdict": verdict, "kind": kind, "measurement": measurement}

    receipt = {
        "gate": "g",
        "claims": [
            claim("failed", "fail", 1.0),
            claim("blinded", "inconclusive", 0.0),
            claim("unmeasured", "inconclusive", None),
            claim("slow", "fail", 9.0, kind="performance"),
            claim("fine", "pass", 0.0),
        ],
    }
    (tmp_path / "g").mkdir()
    (tmp_path / "g/1.json").write_text(json.dumps(receipt))
    assert failing_claims(tmp_path) == ["g: failed", "g: blinded (inconclusive)"]


def test_a_gate_kill_is_confirmed_only_by_the_clean_check():
    failed = PytestRun(1, 0.0, {"gates/g.py::t": "FAILED"}, "")
    claims = ("g: c",)
    assert gate_verdict(failed, ("gates/g.py::t",), claims, lambda _: True) == "killed"
    assert gate_verdict(failed, ("gates/g.py::t",), claims, lambda _: False) == "invalid"
    assert gate_verdict(failed, ("gates/g.py::t",), (), lambda _: True) == "errored"
    assert gate_verdict(failed, (), claims, lambda _: True) == "error"  # nothing to confirm
    assert gate_verdict(PytestRun(0, 0.0, {}, ""), (), (), lambda _: True) == "survived"
    assert gate_verdict(PytestRun(None, 0.0, {}, ""), (), (), lambda _: True) == "timeout"


def _receipt(folder: Path, name: str, claims: list[tuple[str, str, list[str]]], ran: list[str]):
    folder.mkdir(parents=True, exist_ok=True)
    receipt = {
        "gate": folder.name,
        "claims": [
            {"id": i, "test": t, "executed_files": [{"path": p} for p in paths]}
            for i, t, paths in claims
        ],
        "run": {"tests": [{"nodeid": n} for n in ran]},
    }
    (folder / name).write_text(json.dumps(receipt))


def test_covering_tests_are_the_newest_receipts_readers_in_gate_order(tmp_path):
    _receipt(tmp_path / "slow", "1.json", [("a", "s::t1", ["m.py"])], ["s::t1"])
    _receipt(
        tmp_path / "fast",
        "1.json",
        [("a", "f::old", ["m.py"]), ("b", "f::t1", ["x.py"])],
        ["f::old", "f::t1"],
    )
    _receipt(  # the newest receipt of gate fast: f::t2 ran before f::t1, f::t3 reads no m.py
        tmp_path / "fast",
        "2.json",
        [("a", "f::t1", ["m.py"]), ("b", "f::t2", ["x.py", "m.py"]), ("c", "f::t3", ["x.py"])],
        ["f::t2", "f::t1", "f::t3"],
    )
    collected = {"s::t1", "f::t1", "f::t2", "f::t3"}  # f::old moved away
    found = covering_tests("m.py", tmp_path, ["fast", "slow", "absent"], collected)
    assert found == ["f::t2", "f::t1", "s::t1"]
    assert covering_tests("nothing.py", tmp_path, ["fast", "slow"], collected) == []


def test_a_test_keeps_the_claims_of_the_newest_run_that_ran_it(tmp_path):
    """A narrowed newer run (one test) neither drops the other tests nor their claims; a test
    that the tree no longer collects is never selected, however full the receipt naming it."""
    _receipt(
        tmp_path / "gate",
        "1.json",
        [("a", "g::t1", ["m.py"]), ("b", "g::t2", ["m.py"]), ("c", "g::gone", ["m.py"])],
        ["g::t1", "g::t2", "g::gone"],
    )
    _receipt(tmp_path / "gate", "2.json", [("a", "g::t1", ["x.py"])], ["g::t1"])
    assert newest_claims(tmp_path / "gate")["g::t1"][0]["executed_files"] == [{"path": "x.py"}]
    found = covering_tests("m.py", tmp_path, ["gate"], {"g::t1", "g::t2"})
    assert found == ["g::t2"]
