"""Records name the project under test, show failed tests, mark partial runs (which never
become the headline), are written per gate as it finishes, and judge dirtiness fairly."""

from __future__ import annotations

import json

from gatekit import PASSING_GATE, git

TWO = """
def test_one(gate):
    c = gate.claim("one", "holds", kind="correctness", threshold=Threshold("<=", 1))
    c.measure({one})
    c.control("broken", 2)

def test_two(gate):
    c = gate.claim("two", "holds", kind="correctness", threshold=Threshold("<=", 1))
    c.measure(0)
    c.control("broken", 2)
"""


def test_subject_is_the_project_under_test_with_an_ini_override(gates):
    gates.pytester.makefile(".toml", pyproject='[project]\nname = "toylib"\nversion = "1.2.3"\n')
    gates.write("subj", PASSING_GATE.format(value="1e-4"))
    assert gates.run().ret == 0
    receipt = gates.only_receipt("subj")
    assert receipt["subject"] == {  # nothing imported toylib: the declaration, labelled so
        "name": "toylib",
        "version": "1.2.3",
        "source": "pyproject.toml (the gates did not import 'toylib'; not checked)",
    }
    assert "Project under test: toylib 1.2.3" in (gates.records / "subj.md").read_text()
    gates.pytester.makeini("[pytest]\ngate_project = other==2.0\n")
    assert gates.run(receipts=gates.pytester.path / "r2").ret == 0
    subject = gates.only_receipt("subj", gates.pytester.path / "r2")["subject"]
    assert subject == {
        "name": "other",
        "version": "2.0",
        "source": "ini gate_project (the gates did not import 'other'; not checked)",
    }


def test_a_test_that_raises_is_listed_with_its_exception_line(gates):
    gates.write(
        "boom",
        """
def test_boom(gate):
    c = gate.claim("x", "holds", kind="correctness", threshold=Threshold("<=", 1))
    c.measure(0)
    c.control("broken", 2)
    raise ValueError("the reference file is truncated")
""",
    )
    assert gates.run().ret == 1
    receipt = gates.only_receipt("boom")
    assert receipt["status"] == "fail"
    (failure,) = receipt["run"]["failures"]
    assert failure["nodeid"].endswith("gate_boom.py::test_boom") and failure["when"] == "call"
    assert "ValueError: the reference file is truncated" in failure["message"]
    record = (gates.records / "boom.md").read_text()
    assert "Failed tests: 1" in record and "the reference file is truncated" in record


def test_partial_runs_are_marked_and_never_replace_a_complete_headline(gates):
    gates.write("part", TWO.format(one=0))
    assert gates.run().ret == 0
    (complete,) = [json.loads(p.read_text()) for p in gates.receipt_files("part")]
    assert "partial" not in complete["run"]
    assert gates.run("-k", "one").ret == 0
    receipts = [json.loads(p.read_text()) for p in gates.receipt_files("part")]
    (newest,) = [r for r in receipts if r["run"].get("partial")]
    assert "-k 'one'" in newest["run"]["partial_reason"]
    record = (gates.records / "part.md").read_text()
    assert f"Receipt `{complete['receipt_sha256'][:12]}`" in record
    assert "**Partial run:**" not in record  # the headline is complete
    assert "Partial runs after the newest complete run (not a verdict)" in record


def test_an_early_stop_writes_a_partial_receipt(gates):
    gates.write("stop", TWO.format(one=5))  # test_one fails its claim; -x stops before two
    assert gates.run("-x").ret == 1
    receipt = gates.only_receipt("stop")
    assert receipt["run"]["partial"] is True
    assert "stopped early: 1 of its 2 tests did not run" in receipt["run"]["partial_reason"]
    assert "**Partial run:**" in (gates.records / "stop.md").read_text()


def test_a_gate_receipt_is_written_when_its_last_test_finishes(gates):
    gates.write("first", PASSING_GATE.format(value="1e-4"))
    gates.write(
        "second",
        """
def test_sees_first(gate, pytestconfig):
    from pathlib import Path
    done = list((Path(pytestconfig.getoption("gate_receipts")) / "first").glob("*.json"))
    c = gate.claim("seen", "first's receipt exists", kind="correctness",
                   threshold=Threshold("==", 1))
    c.measure(len(done))
    c.control("no receipt", 0)
""",
    )
    assert gates.run().ret == 0
    assert gates.only_receipt("second")["status"] == "pass"


def test_per_gate_receipts_under_xdist(gates):
    gates.write("xa", TWO.format(one=0))
    gates.write("xb", PASSING_GATE.format(value="1e-4"))
    result = gates.run("-n", "2", subprocess=True)
    assert result.ret == 0, result.stdout.str()
    assert [c["id"] for c in gates.only_receipt("xa")["claims"]] == ["one", "two"]
    assert "partial" not in gates.only_receipt("xb")["run"]


def test_xdist_marks_partial_only_the_gate_that_lost_tests_to_deselection(gates):
    gates.write("ka", TWO.format(one=0))
    gates.write("kb", PASSING_GATE.format(value="1e-4"))
    result = gates.run("-n", "2", "-k", "not test_two", subprocess=True)
    assert result.ret == 0, result.stdout.str()
    lost = gates.only_receipt("ka")["run"]
    assert lost["partial"] is True and "-k 'not test_two'" in lost["partial_reason"]
    assert "partial" not in gates.only_receipt("kb")["run"]  # -k removed none of its tests


def test_dirty_is_the_tree_before_the_run_plus_hashed_untracked_files(gates):
    root = gates.pytester.path
    gates.write("tidy", PASSING_GATE.format(value="1e-4"))
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "gate")
    (root / "scratch.txt").write_text("an untracked file nobody hashes")
    assert gates.run().ret == 0  # writes untracked receipts and a record
    git(root, "add", "-A")
    git(root, "commit", "-qm", "records")
    assert gates.run().ret == 0  # rewrites the tracked record mid-run
    first, second = (json.loads(p.read_text()) for p in gates.receipt_files("tidy"))
    assert first["code"]["untracked_files"] == 0
    assert first["code"]["dirty"] is False and second["code"]["dirty"] is False
    (root / "impl.py").write_text("X = 1\n")  # untracked, and hashed by a claim
    gates.write(
        "tidy",
        """
def test_diff(gate):
    c = gate.claim("d", "holds", kind="correctness", threshold=Threshold("<=", 1),
                   code=["impl.py"])
    c.measure(0)
    c.control("broken", 2)
""",
    )
    git(root, "commit", "-qam", "new gate")
    assert gates.run().ret == 0
    receipts = [json.loads(p.read_text()) for p in gates.receipt_files("tidy")]
    (code,) = [r["code"] for r in receipts if r["claims"][0]["id"] == "d"]
    assert code["dirty"] is True and code["untracked_files"] == 1


def test_headline_prefers_the_newest_complete_receipt():
    from assay.qualify.judging.standing import headline

    def receipt(created, partial):
        run = {"partial": True, "partial_reason": "-k"} if partial else {}
        return {"created": created, "receipt_sha256": created[-1] * 64, "run": run}

    old, new_partial = receipt("2026-01-01T00:00:01Z", False), receipt("2026-01-02T00:00:02Z", True)
    assert headline([old, new_partial]) is old
    assert headline([new_partial]) is new_partial  # nothing complete: the partial one, labelled
