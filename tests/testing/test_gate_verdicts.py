"""Stored gate verdicts: reused only when every input that decided them is unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import assay_testing.mutation as mutation
from assay_testing.gate_verdicts import StoredVerdict, VerdictStore, verdict_key
from assay_testing.mutation import run_gate_mutants, selection_key

GATE_SUBJECT = """
import os

from assay.qualify import Threshold


def test_claim_fails_when_armed(gate):
    claim = gate.claim("subject.count", "counts", kind="correctness",
                       threshold=Threshold("==", 0), unit="count", code=())
    claim.measure(int(os.environ.get("ASSAY_MUTANT") == "qualify.judging.stale.ignore"))
    claim.control("the same, broken", 1)
"""
NODE = "gates/gate_subject.py::test_claim_fails_when_armed"
VERSIONS = {"python": "3.11.7", "torch": "2.13.0"}
MUTANT = "qualify.judging.stale.ignore"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "gates/support").mkdir(parents=True)
    (tmp_path / "gates/gate_subject.py").write_text(GATE_SUBJECT)
    (tmp_path / "gates/support/helper.py").write_text("HELP = 1\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src/read.py").write_text("READ = 1\n")
    (tmp_path / "src/unread.py").write_text("UNREAD = 1\n")
    return tmp_path


def _key(root: Path, selected=(NODE,), versions=VERSIONS) -> str:
    return verdict_key(MUTANT, list(selected), ["src/read.py"], root, versions)


def test_the_key_moves_with_every_input_that_decides_a_verdict(root):
    base = _key(root)
    assert _key(root) == base
    (root / "src/unread.py").write_text("UNREAD = 2\n")
    assert _key(root) == base  # a file no covering claim read
    changes = []
    (root / "src/read.py").write_text("READ = 2\n")
    changes.append(_key(root))
    (root / "gates/support/helper.py").write_text("HELP = 2\n")
    changes.append(_key(root))
    (root / "gates/gate_subject.py").write_text(GATE_SUBJECT + "\n# edited\n")
    changes.append(_key(root))
    changes.append(_key(root, selected=(NODE, NODE + "_too")))
    changes.append(_key(root, versions={**VERSIONS, "torch": "2.14.1"}))
    (root / "src/read.py").unlink()
    changes.append(_key(root))
    assert len({base, *changes}) == 1 + len(changes)


def _campaign(root: Path, store: VerdictStore, key: str):
    return run_gate_mutants(
        [(MUTANT, [NODE])],
        root=root,
        scratch=root / "scratch",
        budget_s=120,
        jobs=1,
        store=store,
        keys={MUTANT: key},
    )


def test_a_verdict_is_measured_once_and_reused_only_under_its_key(root, monkeypatch):
    path = root / "verdicts.json"
    (first,), clean = _campaign(root, VerdictStore(path), _key(root))
    assert first.verdict == "killed" and first.reused_from is None
    stored = json.loads(path.read_text())["verdicts"][MUTANT]
    assert stored["verdict"] == "killed" and stored["clean"] == "survived"

    def no_run(*args, **kwargs):
        raise AssertionError("a stored verdict with the same key was measured again")

    with monkeypatch.context() as patched:
        patched.setattr(mutation, "run_pytest", no_run)
        (again,), clean_again = _campaign(root, VerdictStore(path), _key(root))
    assert again.verdict == "killed" and again.reused_from == stored["measured"]
    assert again.failed_claims == first.failed_claims
    assert clean_again == clean  # the control sees the stored clean run

    # Control: an input changed, so the same call measures again.
    (root / "src/read.py").write_text("READ = 2\n")
    measured = []
    real = mutation.run_pytest
    monkeypatch.setattr(mutation, "run_pytest", lambda *a, **k: measured.append(1) or real(*a, **k))
    (third,), _ = _campaign(root, VerdictStore(path), _key(root))
    assert third.reused_from is None and measured


def test_a_store_of_another_format_is_refused(tmp_path):
    path = tmp_path / "verdicts.json"
    path.write_text(json.dumps({"format": "something/0", "verdicts": {}}))
    with pytest.raises(ValueError, match="format"):
        VerdictStore(path)


def test_a_verdict_that_depends_on_the_load_is_never_kept(tmp_path):
    """A timeout or a run that could not start, of the mutant's run or of the clean run its
    verdict rests on, is measured again, never reused; a kill is kept."""
    store = VerdictStore(tmp_path / "verdicts.json")
    cases = (
        ("a", "timeout", None),
        ("b", "error", None),
        ("c", "killed", "survived"),
        ("d", "invalid", "timeout"),
        ("e", "invalid", "error"),
    )
    for name, verdict, clean in cases:
        store.put(name, StoredVerdict("k", verdict, 1.0, (), (), (), clean, "now", ""))
    again = VerdictStore(tmp_path / "verdicts.json")
    assert [again.get(n, "k") is not None for n in "abcde"] == [False, False, True, False, False]


def test_the_order_of_the_covering_tests_is_not_part_of_the_key(root):
    """The order decides how soon a kill comes, not whether: a reordered selection keeps its
    verdicts, a changed one does not."""
    other = "gates/gate_subject.py::test_other"
    forward = selection_key(MUTANT, [NODE, other], root / "receipts", root, VERSIONS)
    backward = selection_key(MUTANT, [other, NODE], root / "receipts", root, VERSIONS)
    assert forward == backward
    assert selection_key(MUTANT, [NODE], root / "receipts", root, VERSIONS) != forward
