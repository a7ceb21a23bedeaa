"""``assay compare OLD NEW`` over real ledgers written by ``write_receipt``: flips, regressions
within and beyond tolerance, changed bounds, new, missing and retired claims, two git
revisions, and bad input. The rule under test: a claim is reported unchanged only when nothing
a reader would compare (verdict, value, unit, operator, bound, tolerance) differs."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from gatekit import git
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "gates"))

from assay.cli import main  # noqa: E402
from assay.qualify.core.threshold import meets  # noqa: E402
from assay.qualify.ledger.chain import write_receipt  # noqa: E402
from assay.qualify.publishing.compare.changes import FLOAT_NOISE, claim_change  # noqa: E402
from support.faults import tamper_cases  # noqa: E402


def _claim(cid: str, value: float, op: str = "<=", bound: float = 1e-3, tol: float = 0.1):
    verdict = "pass" if meets(op, bound, value) else "fail"
    return {
        "id": cid,
        "statement": f"claim {cid}",
        "kind": "correctness",
        "measurement": {"value": value, "unit": "max abs"},
        "threshold": {"op": op, "value": bound, "tolerance": tol},
        "verdict": verdict,
        "margin": bound - value if op == "<=" else value - bound,
        "controls": [{"name": "broken", "measured": 1.0, "failed": True}],
        "test": f"gates/gate_demo.py::test_{cid}",
    }


def _run(
    receipts: Path,
    second: int,
    claims: list[dict],
    corrects: list[dict] = (),
    cpu: dict | None = None,
) -> dict:
    receipt = tamper_cases.synthetic_receipt(f"2026-01-01T00:00:{second:02d}Z", 0.0, "0" * 64)
    receipt["environment"]["cpu"].update(cpu or {})
    receipt["claims"] = claims
    receipt["corrects"] = list(corrects)
    receipt["run"]["tests"] = [{"nodeid": c["test"], "outcome": "passed"} for c in claims]
    receipt["status"] = "pass" if all(c["verdict"] == "pass" for c in claims) else "fail"
    path = write_receipt(receipt, receipts)
    return json.loads(path.read_text("utf-8"))


def _compare(capsys, old, new) -> tuple[int, dict]:
    code = main(["compare", str(old), str(new), "--json"])
    return code, json.loads(capsys.readouterr().out)


def _changes(found: dict) -> dict[str, str]:
    return {c["claim_id"]: c["change"] for c in found["claims"]}


def test_every_kind_of_change_between_two_ledgers(tmp_path, capsys):
    old, new = tmp_path / "old", tmp_path / "new"
    base = [
        _claim("flips", 1e-4),
        _claim("regresses", 1e-4),
        _claim("sinks", 2e-3),
        _claim("wobbles", 1e-4),
        _claim("improves", 9e-4),
        _claim("rebound", 1e-4),
        _claim("goes", 1e-4),
        _claim("retires", 1e-4),
        _claim("same", 1e-4),
    ]
    _run(old, 1, base)
    first = _run(new, 1, base)
    _run(
        new,
        2,
        [
            _claim("flips", 2e-3),  # now over its bound
            _claim("regresses", 3e-4),  # worse by 2e-4, tolerance 0.1 x 1e-3 = 1e-4
            _claim("sinks", 3e-3),  # worse, and failing on both sides
            _claim("wobbles", 1.5e-4),  # worse by 5e-5: inside the tolerance
            _claim("improves", 1e-4),
            _claim("rebound", 1e-4, bound=2e-3),
            _claim("same", 1e-4),
            _claim("arrives", 1e-4),
        ],
        corrects=[
            {"receipt_sha256": first["receipt_sha256"], "claim_id": "retires", "reason": "gone"}
        ],
    )
    code, found = _compare(capsys, old, new)
    assert _changes(found) == {
        "flips": "flipped to fail",
        "sinks": "regressed",
        "regresses": "regressed, still passing",
        "goes": "missing",
        "rebound": "bound changed",
        "retires": "retired",
        "arrives": "new",
        "improves": "improved",
        "wobbles": "within tolerance",
        "same": "unchanged",
    }
    assert code == 1 and not found["ok"]
    assert [c["change"] for c in found["claims"]][:3] == [
        "flipped to fail",
        "regressed",
        "missing",
    ]  # worst first
    assert found["gates"]["demo"]["new"].startswith("fail")
    assert main(["compare", str(old), str(new)]) == 1
    text = capsys.readouterr().out
    assert text.index("flipped to fail") < text.index("within tolerance")
    assert "unchanged" not in text.split("Claims:")[1].split("\n\n")[1]  # counted, not listed
    code, found = _compare(capsys, new, new)  # the control: a ledger against itself
    assert code == 0 and set(_changes(found).values()) == {"unchanged"}


def test_a_gate_that_vanishes_is_missing_and_one_that_arrives_unpaired(tmp_path, capsys):
    """Issue 52, rule 4: deleting a whole gate (receipts and all) used to read as "only in
    OLD" with exit 0, while one dropped claim reads as missing. The control: NEW that keeps the
    gate compares clean, so the exit 1 comes from the vanished gate alone."""
    old, new = tmp_path / "old", tmp_path / "new"
    _run(old, 1, [_claim("a", 1e-4)])
    (new / "other").mkdir(parents=True)
    receipt = tamper_cases.synthetic_receipt("2026-01-01T00:00:01Z", 0.0, "0" * 64)
    receipt["gate"] = "other"
    write_receipt(receipt, new)
    code, found = _compare(capsys, old, new)
    assert code == 1 and _changes(found) == {"a": "missing"}
    assert found["unpaired"] == ["demo (cpu): only in OLD", "other (cpu): only in NEW"]
    _run(new, 1, [_claim("a", 1e-4)])
    code, found = _compare(capsys, old, new)
    assert code == 0 and _changes(found) == {"a": "unchanged"}


@pytest.mark.parametrize("status", ["fail", "inconclusive"])
def test_a_gate_that_claimed_nothing_vanishing_whole_still_fails(tmp_path, capsys, status):
    """Found by the issue-52 adversary: a gate with no claims (its tests failed, or all were
    skipped) deleted whole compared clean, since no claim could go missing. Its standing now
    counts as fallen. The control: NEW that keeps the gate compares clean."""
    old = tmp_path / "old"
    _run(old, 1, [_claim("a", 1e-4)])
    receipt = tamper_cases.synthetic_receipt("2026-01-01T00:00:02Z", 0.0, "0" * 64)
    receipt.update(gate="quiet", claims=[], status=status)
    receipt.pop("headline_claim", None)
    outcome = "failed" if status == "fail" else "skipped"
    receipt["run"]["tests"] = [{"nodeid": "gates/gate_quiet.py::test_x", "outcome": outcome}]
    write_receipt(receipt, old)
    kept = tmp_path / "kept"
    shutil.copytree(old, kept)
    gone = tmp_path / "gone"
    shutil.copytree(old, gone)
    shutil.rmtree(gone / "quiet")
    code, found = _compare(capsys, old, gone)
    assert code == 1 and found["worse_standings"] == ["quiet"]
    code, found = _compare(capsys, old, kept)
    assert code == 0 and found["worse_standings"] == []


def test_a_run_of_some_gates_on_a_copy_of_the_ledger_compares_only_what_ran(tmp_path, capsys):
    """The regression run's shape (.ci/run, docs/ci.md job 1): CI runs a subset of the gates and
    writes their receipts on top of a copy of the committed ledger, so the gates it leaves out
    stay as published. The control: the same run in a bare folder counts the left-out gate as
    vanished (issue 52, rule 4), which is what failed CI before the copy."""
    old, bare = tmp_path / "old", tmp_path / "bare"
    _run(old, 1, [_claim("a", 1e-4)])
    other = tamper_cases.synthetic_receipt("2026-01-01T00:00:02Z", 0.0, "0" * 64)
    other["gate"] = "other"
    write_receipt(other, old)
    on_top = tmp_path / "on-top"
    shutil.copytree(old, on_top)
    rerun = tamper_cases.synthetic_receipt("2026-01-01T00:00:03Z", 0.0, "0" * 64)
    rerun["gate"] = "other"
    write_receipt(rerun, on_top)
    write_receipt(rerun, bare)
    code, found = _compare(capsys, old, on_top)
    assert code == 0 and not found["unpaired"]
    assert _changes(found) == {"a": "unchanged", "diff": "unchanged"}
    code, found = _compare(capsys, old, bare)
    assert code == 1 and _changes(found) == {"a": "missing", "diff": "unchanged"}


def _commit(repo: Path, message: str) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)


def _repo(tmp_path: Path, *values: float) -> tuple[Path, Path, list[dict]]:
    """A git repository with one commit per value, each adding a receipt measuring it."""
    repo = tmp_path / "repo"
    receipts = repo / "records" / "receipts"
    repo.mkdir()
    git(repo, "init", "-q")
    written = []
    for second, value in enumerate(values, 1):
        written.append(_run(receipts, second, [_claim("a", value)]))
        _commit(repo, f"run {second}")
    return repo, receipts, written


def test_two_git_revisions_are_read_without_a_checkout(tmp_path, capsys, monkeypatch):
    repo, receipts, _ = _repo(tmp_path, 1e-4, 5e-3)
    (receipts / "demo").rename(tmp_path / "moved")  # the working tree no longer holds them
    monkeypatch.chdir(repo)
    code, found = _compare(capsys, "HEAD~1", "HEAD")
    assert code == 1 and _changes(found) == {"a": "flipped to fail"}
    assert found["old"].startswith("HEAD~1 (") and found["new"].startswith("HEAD (")
    code, found = _compare(capsys, "HEAD", "HEAD")
    assert code == 0 and _changes(found) == {"a": "unchanged"}


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda t: (t / "nowhere", t / "nowhere"), "OLD {t}/nowhere: no such folder or file"),
        (lambda t: (t / "empty", t / "empty"), "OLD {t}/empty: a folder holding no receipts"),
        (lambda t: (t / "bad.json", t / "bad.json"), "{t}/bad.json"),
        (lambda t: ("--json", t), "OLD --json: not a receipts folder"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, make, expected):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.json").write_text("{not json", "utf-8")
    old, new = make(tmp_path)
    assert main(["compare", "--", str(old), str(new)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected.format(t=tmp_path) in err, err


def test_a_revision_without_receipts_and_one_with_a_non_utf8_receipt(tmp_path, capsys, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "README").write_text("x")
    _commit(repo, "bare")
    monkeypatch.chdir(repo)
    assert main(["compare", "HEAD", "HEAD"]) == 2
    assert "no records/receipts at" in capsys.readouterr().err
    (repo / "records/receipts/demo").mkdir(parents=True)
    (repo / "records/receipts/demo/x.json").write_bytes(b"\xff\xfe{}")
    _commit(repo, "junk")
    assert main(["compare", "HEAD", "HEAD"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "HEAD (" in err, err
    assert "):records/receipts/demo/x.json: not readable JSON" in err, err
    assert "assay-compare-" not in err  # the private checkout is named as the user named it


def test_summary_appends_to_the_github_step_summary(tmp_path, capsys, monkeypatch):
    old = tmp_path / "old"
    _run(old, 1, [_claim("a", 1e-4)])
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    assert main(["compare", str(old), str(old), "--summary"]) == 2
    assert "GITHUB_STEP_SUMMARY is not set" in capsys.readouterr().err
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert main(["compare", str(old), str(old), "--summary", "--markdown"]) == 0
    shown = capsys.readouterr().out
    assert summary.read_text() == "earlier step\n" + shown  # the Markdown, whatever is printed
    assert main(["compare", str(old), str(old), "--summary"]) == 0
    assert summary.read_text() == "earlier step\n" + shown * 2
    assert capsys.readouterr().out != shown  # the terminal got plain text


values = st.sampled_from([0.0, 1e-4, 5e-4, 9e-4, 1e-3, 1.05e-3, 1.5e-3, 2e-3, 5e-3])


@settings(max_examples=300, deadline=None)
@given(
    a=values,
    b=values,
    ops=st.tuples(st.sampled_from(["<=", ">=", "=="]), st.sampled_from(["<=", ">=", "=="])),
    bounds=st.tuples(st.sampled_from([1e-3, 2e-3]), st.sampled_from([1e-3, 2e-3])),
    tols=st.tuples(st.sampled_from([0.0, 0.1]), st.sampled_from([0.0, 0.1])),
    units=st.tuples(st.sampled_from(["s", "max abs"]), st.sampled_from(["s", "max abs"])),
)
def test_a_claim_is_unchanged_only_when_nothing_compared_differs(a, b, ops, bounds, tols, units):
    old = _claim("c", a, ops[0], bounds[0], tols[0])
    new = _claim("c", b, ops[1], bounds[1], tols[1])
    old["measurement"]["unit"], new["measurement"]["unit"] = units
    row = claim_change("g", "cpu", "c", old, new, set())
    same = (a, ops[0], bounds[0], tols[0], units[0]) == (b, ops[1], bounds[1], tols[1], units[1])
    assert (row.change == "unchanged") is same, (row.change, old, new)
    if old["verdict"] == "pass" and new["verdict"] == "fail":
        assert row.change == "flipped to fail"


def test_a_side_cannot_hide_a_regression_behind_its_own_unit_or_tolerance(tmp_path, capsys):
    old, new = tmp_path / "old", tmp_path / "new"
    _run(old, 1, [_claim("unit", 5e-4), _claim("tol", 1e-4), _claim("arrives", 1e-4)])
    wider = _claim("tol", 3e-4, tol=100.0)  # worse by 2e-4: over OLD's 1e-4 allowance
    other_unit = _claim("unit", 0.6)
    other_unit["measurement"]["unit"] = "mean abs error x1e-3"
    other_unit["threshold"]["value"], other_unit["margin"] = 0.9, 0.3
    other_unit["verdict"] = "pass"  # still passing, in the new unit
    _run(new, 1, [other_unit, wider, _claim("arrives", 1e-4), _claim("fresh", 5e-3)])
    code, found = _compare(capsys, old, new)
    assert code == 1
    assert _changes(found) == {
        "unit": "regressed",
        "tol": "regressed, still passing",  # a warning: it passes on both sides
        "arrives": "unchanged",
        "fresh": "new, not passing",
    }


def test_a_gate_whose_standing_fell_fails_even_with_no_claim_changed(tmp_path, capsys, monkeypatch):
    """A failing receipt erased from history (no correction) leaves NEW broken: exit 1, in the
    git view as in the folder view."""
    repo, receipts, _ = _repo(tmp_path, 1e-4)
    ledger = (receipts / "demo" / "LEDGER").read_text()
    failing = _run(receipts, 2, [_claim("a", 5e-3)])
    _commit(repo, "fail")
    (receipts / "demo" / "LEDGER").write_text(ledger)  # the failure erased, unacknowledged
    next((receipts / "demo").glob(f"*{failing['receipt_sha256'][:12]}*.json")).unlink()
    _commit(repo, "erase")
    monkeypatch.chdir(repo)
    for old, new in (("HEAD~2", "HEAD"), ("HEAD~2", "records/receipts")):
        code, found = _compare(capsys, old, new)
        assert code == 1 and found["worse_standings"] == ["demo"], (new, found["gates"])
        assert found["gates"]["demo"]["new"].startswith("broken")
        assert _changes(found) == {"a": "unchanged"}


def test_a_value_no_float_can_hold_is_refused_not_compared():
    from assay.errors import AssayError

    huge = _claim("a", 1e-4)
    huge["measurement"]["value"] = 10**400
    for old, new in ((_claim("a", 1e-4), huge), (huge, _claim("a", 1e-4))):
        with pytest.raises(AssayError, match="claim 'a': its measured value is not a finite"):
            claim_change("g", "cpu", "a", old, new, set())


def test_a_summary_that_is_not_a_file_is_refused_not_waited_on(tmp_path, capsys, monkeypatch):
    import os

    old = tmp_path / "old"
    _run(old, 1, [_claim("a", 1e-4)])
    os.mkfifo(tmp_path / "fifo")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "fifo"))
    assert main(["compare", str(old), str(old), "--summary"]) == 2
    assert "is not a regular file" in capsys.readouterr().err


def test_a_loosened_bound_cannot_turn_a_fail_into_a_pass(tmp_path, capsys):
    old, new = tmp_path / "old", tmp_path / "new"
    _run(old, 1, [_claim("a", 6e-4, bound=7e-4)])
    _run(new, 1, [_claim("a", 7.2e-4, bound=7.5e-4)])  # over OLD's bound, under its own
    code, found = _compare(capsys, old, new)
    assert code == 1 and _changes(found) == {"a": "flipped to fail"}


def test_failing_claims_on_a_gate_only_new_has_fail_the_comparison(tmp_path, capsys):
    old, new = tmp_path / "old", tmp_path / "new"
    _run(old, 1, [_claim("a", 1e-4)])
    _run(new, 1, [_claim("a", 1e-4)])
    receipt = tamper_cases.synthetic_receipt("2026-01-01T00:00:09Z", 5e-3, "0" * 64)
    receipt["gate"], receipt["status"] = "other", "fail"
    receipt["claims"][0].update(verdict="fail", margin=1e-3 - 5e-3)
    write_receipt(receipt, new)
    code, found = _compare(capsys, old, new)
    assert code == 1 and found["unpaired"] == ["other (cpu): only in NEW"]
    assert _changes(found) == {"a": "unchanged", "diff": "new, not passing"}
    assert found["worse_standings"] == ["other"]


def test_a_shallow_history_is_said_not_checked(tmp_path, capsys, monkeypatch):
    repo, _, _ = _repo(tmp_path, 1e-4, 2e-4)
    shallow = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow))
    monkeypatch.chdir(shallow)
    code, found = _compare(capsys, "HEAD", "records/receipts")
    assert code == 0 and len(found["notes"]) == 2
    assert all("git history not checked (shallow clone" in n for n in found["notes"])
    monkeypatch.chdir(repo)
    assert _compare(capsys, "HEAD~1", "HEAD")[1]["notes"] == []  # the control: full history


def test_a_summary_that_cannot_be_written_whole_is_not_written_at_all(
    tmp_path, capsys, monkeypatch
):
    """Issue 52, rule 6: on a full disk the summary used to keep half a table."""
    import errno
    import os

    old = tmp_path / "old"
    _run(old, 1, [_claim("a", 1e-4)])
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    assert main(["compare", str(old), str(old), "--summary"]) == 2
    assert "cannot append the summary" in capsys.readouterr().err
    assert summary.read_text() == "earlier step\n"


REGRESSIONS = ("regressed", "regressed, still passing")


@settings(max_examples=300, deadline=None)
@given(
    a=st.floats(min_value=1e-30, max_value=1e30),
    sign=st.sampled_from([1.0, -1.0]),
    step=st.floats(min_value=-1.0, max_value=1.0),
    op=st.sampled_from(["<=", ">="]),
)
def test_float_noise_is_never_a_regression_and_a_real_move_is(a, sign, step, op):
    """The same float computed twice (a move within FLOAT_NOISE of the larger) is never
    worse, with no tolerance at all; the control: a move of 8 times the noise the wrong way
    is a regression under the same bound."""
    a *= sign
    bound = abs(a) * 4 if op == "<=" else -abs(a) * 4

    def change(b: float) -> str:
        old, new = _claim("c", a, op, bound, 0.0), _claim("c", b, op, bound, 0.0)
        return claim_change("g", "cpu", "c", old, new, set()).change

    assert change(a + step * FLOAT_NOISE / 2 * abs(a)) not in (*REGRESSIONS, "improved")
    worse = a + (8 * FLOAT_NOISE * abs(a)) * (1 if op == "<=" else -1)
    assert change(worse) in REGRESSIONS


def test_the_reported_noise_case_exits_0_and_an_integer_step_is_no_noise(tmp_path, capsys):
    """Issue 54's case: 0.629966 -> +3.88e-09 under a tolerance of 0 was a regression. A byte
    count one higher is a real move, however large the count."""
    old, new = tmp_path / "old", tmp_path / "new"
    _run(old, 1, [_claim("attn", 0.629966, bound=0.7, tol=0.0)])
    _run(new, 1, [_claim("attn", 0.629966 + 3.88e-9, bound=0.7, tol=0.0)])
    code, found = _compare(capsys, old, new)
    assert code == 0 and _changes(found) == {"attn": "within tolerance"}
    row = claim_change(
        "g",
        "cpu",
        "b",
        _claim("b", 10**9, bound=2 * 10**9, tol=0.0),
        _claim("b", 10**9 + 1, bound=2 * 10**9, tol=0.0),
        set(),
    )
    assert row.change == "regressed, still passing"


def _timing(cid: str, seconds: float) -> dict:
    claim = _claim(cid, seconds, bound=5.0)
    claim["kind"] = "performance"
    claim["measurement"]["unit"] = "s"
    claim["threshold"]["tolerance"] = {"mode": "relative", "value": 0.1}
    claim["controls"] = [{"name": "a sleep added", "measured": 10.0, "failed": True}]
    return claim


QUIET = {"model": "AMD EPYC", "threads": 2, "torch_threads": 2, "load_per_thread": 0.1}


@pytest.mark.parametrize(
    ("new_cpu", "why"),
    [
        ({**QUIET, "load_per_thread": 1.5}, "load per CPU thread 0.1 in OLD, 1.5 in NEW"),
        ({**QUIET, "load_per_thread": None}, "load was not recorded in NEW"),
        ({**QUIET, "model": "Intel Xeon"}, "CPU AMD EPYC in OLD, Intel Xeon in NEW"),
        ({**QUIET, "threads": 16}, "CPU threads 2 in OLD, 16 in NEW"),
    ],
)
def test_timings_are_compared_only_between_like_machines(tmp_path, capsys, new_cpu, why):
    """Issue 54's second case: a load time of 1.06 s became 3.75 s on a busy machine, bound
    5 s. Between unlike runs it is not comparable (a note says why), and a correctness claim
    of the same runs is still compared; the control: the same runs on a like machine at a
    like load show the regression."""
    old, new, like = tmp_path / "old", tmp_path / "new", tmp_path / "like"
    _run(old, 1, [_timing("load", 1.06), _claim("exact", 1e-4)], cpu=QUIET)
    _run(new, 1, [_timing("load", 3.75), _claim("exact", 5e-4)], cpu=new_cpu)
    code, found = _compare(capsys, old, new)
    assert _changes(found) == {"load": "not comparable", "exact": "regressed, still passing"}
    assert code == 0 and any(why in note for note in found["notes"]), found["notes"]
    _run(
        like,
        1,
        [_timing("load", 3.75), _claim("exact", 1e-4)],
        cpu={**QUIET, "load_per_thread": 0.4},
    )
    code, found = _compare(capsys, old, like)
    assert _changes(found) == {"load": "regressed, still passing", "exact": "unchanged"}


def test_a_timing_that_fails_its_bound_flips_whatever_the_machine(tmp_path, capsys):
    old, new = tmp_path / "old", tmp_path / "new"
    _run(old, 1, [_timing("load", 1.06)], cpu=QUIET)
    _run(new, 1, [_timing("load", 6.0)], cpu={**QUIET, "load_per_thread": 1.5})
    code, found = _compare(capsys, old, new)
    assert code == 1 and _changes(found) == {"load": "flipped to fail"}


def test_a_regression_still_passing_warns_and_fails_only_when_asked(tmp_path, capsys):
    old, new = tmp_path / "old", tmp_path / "new"
    _run(old, 1, [_claim("a", 1e-4)])
    _run(new, 1, [_claim("a", 3e-4)])  # worse beyond its tolerance, under its bound
    assert main(["compare", str(old), str(new)]) == 0
    assert "Warning: 1 claim regressed beyond its tolerance" in capsys.readouterr().out
    assert main(["compare", str(old), str(new), "--fail-on-regression"]) == 1  # the control
    assert "1 claim flipped to fail, regressed" in capsys.readouterr().out


def test_the_terminal_gets_plain_text_and_markdown_only_when_asked(tmp_path, capsys):
    """No Markdown escapes (\\_, &lt;) and no terminal escape sequence from a receipt's text
    in the plain view; the same comparison as Markdown keeps its escapes (the control that
    the strings do carry what the plain view must not show)."""
    old, new = tmp_path / "old", tmp_path / "new"
    _run(old, 1, [_claim("a_b", 1e-4)])
    moved = _claim("a_b", 5e-4)
    moved["measurement"]["unit"] = "max abs \x1b[31m"
    _run(new, 1, [moved])
    assert main(["compare", str(old), str(new)]) == 1
    plain = capsys.readouterr().out
    assert "a_b" in plain and "(<= 0.001)" in plain and "regressed" in plain
    assert "\\_" not in plain and "&lt;" not in plain and "\x1b" not in plain
    assert "**" not in plain and "|" not in plain.split("Standing")[0].replace("|OLD|", "")
    assert main(["compare", str(old), str(new), "--markdown"]) == 1
    markdown = capsys.readouterr().out
    assert "a\\_b" in markdown and "&lt;=" in markdown and "\x1b" not in markdown
