"""A rewrite of a gate's committed history shows in every view, not only in ``verify``: an
unacknowledged one leaves the gate broken, and an acknowledgement never turns a recorded failure
into a pass (an entry erasing a failing receipt must keep its text, which is then weighed)."""

from __future__ import annotations

import hashlib
import json

import pytest
from gatekit import git
from test_standing import GATE, assert_agree, five_views

from assay.qualify.judging.standing import gate_standing
from assay.qualify.ledger.chain import HEADER, ledger_path, read_ledger


@pytest.fixture(autouse=True)
def isolatedgit(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))


@pytest.fixture
def failing_tail(gates):
    """A passing run and a failing one, both committed; the failing one is the newest."""
    root = gates.pytester.path
    git(root, "init", "-q")
    gates.write("demo", GATE.format(bad="0.0"))
    assert gates.run().ret == 0
    git(root, "add", "-A")
    git(root, "commit", "-qm", "pass")
    gates.write("demo", GATE.format(bad="0.5"))
    assert gates.run().ret != 0
    git(root, "add", "-A")
    git(root, "commit", "-qm", "fail")
    return gates


def _drop_newest(gates) -> tuple[str, str]:
    """Delete the newest receipt and its LEDGER line, as a tree editor would; its name and text."""
    path = gates.receipt_files("demo")[-1]
    text = path.read_text("utf-8")
    path.unlink()
    entries, _ = read_ledger(ledger_path(gates.receipts, "demo"))
    lines = "".join(f"{sha} {name}\n" for sha, name in entries[:-1])
    ledger_path(gates.receipts, "demo").write_text(HEADER + lines, "utf-8")
    from assay.qualify.publishing.index import render_all

    render_all(gates.receipts, gates.records, gates.pytester.path)
    return path.name, text


@pytest.mark.parametrize("committed", [False, True])
def test_an_unacknowledged_deletion_leaves_every_view_broken(
    failing_tail, tmp_path, capsys, committed
):
    _drop_newest(failing_tail)
    if committed:
        git(failing_tail.pytester.path, "commit", "-qam", "drop the failing run")
    assert_agree(five_views(failing_tail, tmp_path, capsys), "broken")


def _acknowledge(gates, name: str, text: str, *, keep: bool) -> None:
    root = gates.pytester.path
    commit = git(root, "rev-parse", "HEAD")
    before = git(root, "show", f"{commit}^:records/receipts/demo/LEDGER") + "\n"
    lines = [
        {"file": name, "change": "deleted", "sha256": hashlib.sha256(text.encode()).hexdigest()},
        {
            "file": "LEDGER",
            "change": "line removed",
            "sha256": hashlib.sha256(before.encode()).hexdigest(),
        },
    ]
    if keep:
        lines[0]["content"] = text
    with (gates.receipts / "demo" / "CORRECTIONS").open("w", encoding="utf-8") as handle:
        for line in lines:
            entry = {"date": "2026-12-04", "commit": commit, "reason": "withdrawn", **line}
            handle.write(json.dumps(entry) + "\n")
    from assay.qualify.publishing.index import render_all

    render_all(gates.receipts, gates.records, root)


def test_acknowledging_the_erasure_of_a_failure_without_its_text_is_refused(
    failing_tail, tmp_path, capsys
):
    name, text = _drop_newest(failing_tail)
    git(failing_tail.pytester.path, "commit", "-qam", "drop the failing run")
    _acknowledge(failing_tail, name, text, keep=False)
    views = five_views(failing_tail, tmp_path, capsys)
    assert_agree(views, "broken")
    assert "without keeping its text" in views["record"]


def test_an_erased_failure_whose_text_is_kept_still_fails_the_gate(failing_tail, tmp_path, capsys):
    name, text = _drop_newest(failing_tail)
    git(failing_tail.pytester.path, "commit", "-qam", "drop the failing run")
    _acknowledge(failing_tail, name, text, keep=True)
    standing = gate_standing(failing_tail.receipts, "demo")
    assert standing.problems == [] and standing.status == "fail", standing.summary()
    assert_agree(five_views(failing_tail, tmp_path, capsys), "fail", "erased run", "acknowledged")


def test_erasing_every_receipt_of_a_failing_gate_still_shows_its_failure(
    failing_tail, tmp_path, capsys
):
    """The whole receipts folder deleted and acknowledged with each file's text: the gate keeps
    its row, record, page and standing, and the failure the erased receipts hold stands."""
    gates, root = failing_tail, failing_tail.pytester.path
    folder = gates.receipts / "demo"
    files = {
        p.name: p.read_text("utf-8") for p in [*gates.receipt_files("demo"), folder / "LEDGER"]
    }
    for name in files:
        (folder / name).unlink()
    git(root, "commit", "-qam", "drop the gate's receipts")
    commit = git(root, "rev-parse", "HEAD")
    with (folder / "CORRECTIONS").open("w", encoding="utf-8") as handle:
        for name, text in files.items():
            entry = {
                "date": "2026-12-04",
                "commit": commit,
                "reason": "withdrawn",
                "file": name,
                "change": "deleted",
                "sha256": hashlib.sha256(text.encode()).hexdigest(),
            }
            if name != "LEDGER":
                entry["content"] = text
            handle.write(json.dumps(entry) + "\n")
    from assay.qualify.publishing.index import render_all

    render_all(gates.receipts, gates.records, root)
    assert_agree(five_views(gates, tmp_path, capsys), "fail", "erased run")


def test_a_replace_graft_does_not_hide_an_unacknowledged_deletion(failing_tail, tmp_path, capsys):
    """``git replace --graft`` makes every reader of history skip the commit that added the
    failing receipt; history is read as committed, so the deletion still shows."""
    root = failing_tail.pytester.path
    added = git(root, "rev-parse", "HEAD")
    _drop_newest(failing_tail)
    git(root, "commit", "-qam", "drop the failing run")
    git(root, "replace", "--graft", "HEAD", f"{added}^")
    assert_agree(five_views(failing_tail, tmp_path, capsys), "broken")
