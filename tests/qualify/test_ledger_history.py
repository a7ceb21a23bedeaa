"""The receipts folder checked against its git history (assay.qualify.ledger.history).

Each case builds a throwaway git repository; receipts are fake files and the LEDGER plain
text, since only the shape of the history is checked here (chain.py checks the content)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from gatekit import git

from assay.qualify.ledger.history import CORRECTIONS_HEADER, check_history, gate_history, rewrite

GATE = "g"
ROOT = Path(__file__).resolve().parents[2]


def ledger_line(n: int) -> str:
    return f"{hashlib.sha256(str(n).encode()).hexdigest()} r{n}.json\n"


class Repo:
    """A git repository holding ``records/receipts/g/`` with a LEDGER and receipts."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.receipts = path / "records" / "receipts"
        path.mkdir(parents=True)
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str) -> str:
        return git(self.path, *args)

    def file(self, name: str, gate: str = GATE) -> Path:
        return self.receipts / gate / name

    def write(self, name: str, text: str, gate: str = GATE) -> None:
        self.file(name, gate).parent.mkdir(parents=True, exist_ok=True)
        self.file(name, gate).write_text(text, "utf-8")

    def ledger(self, *numbers: int) -> None:
        self.write("LEDGER", "# ledger\n" + "".join(ledger_line(n) for n in numbers))

    def commit(self, message: str = "step") -> str:
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")

    def published(self) -> str:
        """Two receipts and their LEDGER, committed."""
        for n in (1, 2):
            self.write(f"r{n}.json", f'{{"n": {n}}}\n')
        self.ledger(1, 2)
        return self.commit("publish r1 r2")


@pytest.fixture(autouse=True)
def isolated_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No user or system git config, and no repository found above tmp_path."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    made = Repo(tmp_path / "repo")
    made.published()
    return made


def sha_of(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def only_problem(repo: Repo) -> str:
    report = check_history(repo.receipts)
    assert report.checked, report.notes
    assert len(report.problems) == 1, report.problems
    return report.problems[0]


def test_append_only_history_has_no_problems(repo: Repo) -> None:
    repo.write("r3.json", '{"n": 3}\n')
    repo.ledger(1, 2, 3)
    repo.commit("publish r3")
    repo.write("r4.json", '{"n": 4}\n')
    repo.ledger(1, 2, 3, 4)  # uncommitted, but an extension
    report = check_history(repo.receipts)
    assert report.checked and report.reason == ""
    assert report.problems == () and report.violations == ()
    assert not report.failed


def test_ledger_line_removed_in_a_later_commit(repo: Repo) -> None:
    repo.write("r3.json", '{"n": 3}\n')
    repo.ledger(1, 2, 3)
    repo.commit("publish r3")
    repo.ledger(1, 3)
    commit = repo.commit("drop r2 from the ledger")
    line = only_problem(repo)
    assert line.startswith(f"{GATE}/LEDGER: line removed in commit {commit[:12]}")
    assert ledger_line(2).strip() in line


def test_ledger_line_changed_in_a_later_commit(repo: Repo) -> None:
    before = repo.file("LEDGER").read_text("utf-8")
    repo.write("LEDGER", before.replace(ledger_line(2), ledger_line(9)))
    commit = repo.commit("re-seal r2")
    line = only_problem(repo)
    assert line.startswith(f"{GATE}/LEDGER: line changed in commit {commit[:12]}")
    assert sha_of(before) in line  # names the version that was rewritten


def test_ledger_line_inserted_above_existing_lines(repo: Repo) -> None:
    repo.write("LEDGER", "# ledger\n" + ledger_line(0) + ledger_line(1) + ledger_line(2))
    commit = repo.commit("backdate r0")
    assert only_problem(repo).startswith(f"{GATE}/LEDGER: line inserted in commit {commit[:12]}")


def test_receipt_deleted(repo: Repo) -> None:
    repo.file("r1.json").unlink()
    commit = repo.commit("withdraw r1")
    line = only_problem(repo)
    assert line.startswith(f"{GATE}/r1.json: deleted in commit {commit[:12]}")
    assert sha_of('{"n": 1}\n') in line


def test_receipt_modified_after_it_was_added(repo: Repo) -> None:
    repo.write("r2.json", '{"n": 2, "edited": true}\n')
    commit = repo.commit("fix r2 in place")
    assert only_problem(repo).startswith(f"{GATE}/r2.json: modified in commit {commit[:12]}")


@pytest.mark.parametrize("strategy", ["ort", "ours"])
def test_deletion_on_a_merged_branch(repo: Repo, strategy: str) -> None:
    """Reported even when the merge kept the file ('ours'): the deleting commit is history."""
    repo.git("checkout", "-q", "-b", "side")
    repo.file("r2.json").unlink()
    side = repo.commit("withdraw r2 on a branch")
    repo.git("checkout", "-q", "main")
    repo.write("other.txt", "x\n", gate="h")
    repo.commit("unrelated")
    repo.git("merge", "-q", "--no-ff", "-s", strategy, "-m", "merge side", "side")
    report = check_history(repo.receipts)
    assert any(v.commit == side and v.change == "deleted" for v in report.violations)
    assert any(f"in commit {side[:12]}" in p for p in report.problems)
    assert repo.file("r2.json").exists() == (strategy == "ours")


def correction(repo: Repo, at: str, **changes: str) -> dict[str, str]:
    entry = {
        "date": "2026-12-02",
        "commit": at,
        "file": "r1.json",
        "change": "deleted",
        "sha256": sha_of('{"n": 1}\n'),
        "reason": "withdrawn by mistake; its numbers are in r3.json",
    }
    entry.update(changes)
    return entry


def acknowledge(repo: Repo, *entries: dict[str, str]) -> None:
    lines = "".join(json.dumps(e) + "\n" for e in entries)
    repo.write("CORRECTIONS", CORRECTIONS_HEADER + lines)


def test_acknowledged_deletion_is_a_note_not_a_problem(repo: Repo) -> None:
    repo.file("r1.json").unlink()
    commit = repo.commit("withdraw r1")
    acknowledge(repo, correction(repo, commit[:12]))
    repo.commit("acknowledge")
    report = check_history(repo.receipts)
    assert report.problems == ()
    assert len(report.violations) == 1  # still found, never dropped
    [note] = [n for n in report.notes if "acknowledged" in n]
    assert f"{GATE}/r1.json: deleted in commit {commit[:12]}" in note
    assert f"{GATE}/CORRECTIONS:2 (2026-12-02)" in note


@pytest.mark.parametrize(
    "field, value",
    [
        ("file", "r2.json"),
        ("change", "modified"),
        ("sha256", "0" * 64),
        ("commit", "0123456789ab"),
    ],
)
def test_a_correction_covers_exactly_its_violation(repo: Repo, field: str, value: str) -> None:
    repo.file("r1.json").unlink()
    commit = repo.commit("withdraw r1")
    acknowledge(repo, correction(repo, commit, **{field: value}))
    problems = check_history(repo.receipts).problems
    assert any(p.startswith(f"{GATE}/r1.json: deleted in commit {commit[:12]}") for p in problems)
    assert any("CORRECTIONS:2: acknowledges" in p for p in problems)  # covers nothing


def test_malformed_correction_is_a_problem(repo: Repo) -> None:
    acknowledge(repo, correction(repo, "not hex"))
    problems = check_history(repo.receipts).problems
    assert problems == (f"{GATE}/CORRECTIONS:2: commit must be 12 to 40 lowercase hex digits",)


def test_corrections_are_append_only_and_cannot_excuse_themselves(repo: Repo) -> None:
    repo.file("r1.json").unlink()
    commit = repo.commit("withdraw r1")
    acknowledge(repo, correction(repo, commit))
    first = repo.commit("acknowledge")
    assert check_history(repo.receipts).problems == ()
    text = repo.file("CORRECTIONS").read_text("utf-8")
    repo.write("CORRECTIONS", CORRECTIONS_HEADER)
    later = repo.commit("forget it")
    excuse = {"file": "CORRECTIONS", "change": "line removed", "sha256": sha_of(text)}
    acknowledge(repo, correction(repo, later, **excuse))
    problems = check_history(repo.receipts).problems
    assert any(
        p.startswith(f"{GATE}/CORRECTIONS: line removed in commit {later[:12]}") for p in problems
    )
    assert any(f"r1.json: deleted in commit {commit[:12]}" in p for p in problems)
    assert first != later


def test_no_git_repository_is_not_checked(tmp_path: Path) -> None:
    receipts = tmp_path / "plain" / "receipts"
    (receipts / GATE).mkdir(parents=True)
    (receipts / GATE / "LEDGER").write_text("# ledger\n", "utf-8")
    report = check_history(receipts)
    assert not report.checked and not report.failed
    assert "no git repository" in report.reason
    assert report.notes == (f"history not checked: {report.reason}",)


def test_shallow_clone_is_not_checked(repo: Repo, tmp_path: Path) -> None:
    repo.file("r1.json").unlink()
    repo.commit("withdraw r1")
    repo.write("r3.json", '{"n": 3}\n')
    repo.commit("publish r3")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{repo.path}", str(clone))
    report = check_history(clone / "records" / "receipts")
    assert not report.checked and report.problems == ()
    assert "shallow" in report.reason and report.notes[0].startswith("history not checked")
    assert check_history(repo.receipts).problems  # the full history does show the deletion


def test_receipts_never_committed_are_not_checked(tmp_path: Path) -> None:
    fresh = Repo(tmp_path / "fresh")
    fresh.write("README", "x\n", gate="..")
    fresh.commit("no receipts yet")
    fresh.ledger(1)
    report = check_history(fresh.receipts)
    assert not report.checked and "not tracked" in report.reason


def test_a_gate_never_committed_is_a_note(repo: Repo) -> None:
    repo.write("r1.json", "{}\n", gate="new")
    report = check_history(repo.receipts)
    assert report.checked and report.problems == ()
    assert "history not checked for new: no file of it in HEAD" in report.notes


def test_uncommitted_receipts_on_a_committed_ledger_are_a_note(repo: Repo) -> None:
    """Issue 52, rule 4: a failing r3 written and removed before any commit, then r4 written
    on top, left no trace git could show, and verify said nothing. Every receipt no commit
    holds is named as unchecked history; once committed, the note goes (the control)."""
    repo.write("r4.json", '{"n": 4}\n')
    repo.ledger(1, 2, 4)
    report = check_history(repo.receipts)
    assert report.checked and report.problems == ()
    assert report.notes == (
        f"history not checked for {GATE}: 1 receipt(s) not committed yet (newest r4.json); "
        "a run removed before its commit would not show",
    )
    repo.commit("publish r4")
    assert check_history(repo.receipts).notes == ()


def test_uncommitted_ledger_line_removal(repo: Repo) -> None:
    repo.ledger(1)
    line = only_problem(repo)
    assert line.startswith(f"{GATE}/LEDGER: line removed in the working tree (uncommitted)")


def test_uncommitted_receipt_deletion_and_modification(repo: Repo) -> None:
    repo.file("r1.json").unlink()
    repo.write("r2.json", '{"n": 22}\n')
    problems = check_history(repo.receipts).problems
    assert sorted(p.split(" (earlier")[0] for p in problems) == [
        f"{GATE}/r1.json: deleted in the working tree (uncommitted)",
        f"{GATE}/r2.json: modified in the working tree (uncommitted)",
    ]


def test_uncommitted_violation_cannot_be_acknowledged(repo: Repo) -> None:
    repo.file("r1.json").unlink()
    acknowledge(repo, correction(repo, "0" * 40))
    assert len(check_history(repo.receipts).problems) == 2  # the deletion, the idle entry


def test_gate_history_is_scoped_to_its_gate(repo: Repo) -> None:
    repo.write("r1.json", "{}\n", gate="h")
    repo.commit("gate h")
    repo.file("r1.json").unlink()
    repo.commit("withdraw g/r1")
    assert gate_history(repo.receipts, "h").problems == ()
    assert gate_history(repo.receipts, "h").checked
    assert len(gate_history(repo.receipts, GATE).problems) == 1


def test_rewrite_classifies_the_first_difference() -> None:
    assert rewrite(b"a\nb\n", b"a\nb\nc\n") is None
    assert rewrite(b"a\nb", b"a\nb\nc\n") is None
    assert rewrite(b"a\nb\nc\n", b"a\nc\n")[0] == "line removed"
    assert rewrite(b"a\nb\n", b"a\nB\n")[0] == "line changed"
    assert rewrite(b"a\nb\n", b"x\na\nb\n")[0] == "line inserted"
    assert rewrite(b"a\nb\n", b"")[0] == "line removed"


def test_this_repository_has_only_acknowledged_rewrites() -> None:
    receipts = ROOT / "records" / "receipts"
    if not receipts.is_dir():
        pytest.skip("no records/receipts in this checkout")
    report = check_history(receipts)
    if not report.checked:
        pytest.skip(report.reason)
    assert report.problems == ()
    deleted = "quality/20261201T030804Z-17c55aac14cb.json: deleted in commit 7f05130da702"
    assert any(n.startswith(deleted) and "acknowledged" in n for n in report.notes)
