"""A record's standing is a function of the committed tree: files no clean checkout holds (tool
caches such as ``.hypothesis/``, build metadata, git-ignored files) are never recorded as what a
claim relied on, and never make a record stale, so the published records verify the same on
the machine that made them and on a fresh clone."""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

import pytest
from gatekit import git
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "gates"))

from assay.qualify.core.source import NOT_TREE_DIRS, tree_paths  # noqa: E402
from assay.qualify.judging.stale import check_receipt  # noqa: E402
from assay.qualify.ledger.chain import write_receipt  # noqa: E402
from assay.qualify.ledger.receipt import read_receipt, receipt_paths  # noqa: E402
from assay.qualify.plugin.reads import project_files  # noqa: E402
from assay.qualify.publishing.index import render_all  # noqa: E402
from assay.qualify.publishing.verify import verify_all, verify_stale  # noqa: E402
from support.faults import tamper_cases  # noqa: E402

NOT_TREE = [".hypothesis/constants/0a1b", "pkg.egg-info/entry_points.txt", "ignored/data.txt"]
TRACKED = [
    "data/table.csv",
    "ignored/kept.txt",
]  # the second is tracked though its folder is ignored


def _repo(root: Path) -> Path:
    """A git tree with an ignored folder holding one force-tracked file, and every path of
    :data:`NOT_TREE` and :data:`TRACKED` present."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q")
    (root / ".gitignore").write_text("ignored/\n", "utf-8")
    for rel in [*NOT_TREE, *TRACKED]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"{rel}\n", "utf-8")
    git(root, "add", ".gitignore", "data/table.csv")
    git(root, "add", "-f", "ignored/kept.txt")
    return root


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_tree_is_what_a_clean_checkout_holds(tmp_path):
    root = _repo(tmp_path / "p")
    assert tree_paths(root, [*NOT_TREE, *TRACKED, "/etc/hostname"]) == {
        *TRACKED,
        "/etc/hostname",
    }
    # outside a git repository only the fixed cache and build folders are left out
    plain = tmp_path / "plain"
    plain.mkdir()
    assert tree_paths(plain, [*NOT_TREE, *TRACKED]) == {"ignored/data.txt", *TRACKED}


@settings(max_examples=60, deadline=None)
@given(
    folders=st.lists(
        st.sampled_from([*sorted(NOT_TREE_DIRS), "x.egg-info", "y.dist-info", "src", "data"]),
        min_size=1,
        max_size=3,
    )
)
def test_any_path_through_a_cache_or_build_folder_is_left_out(tmp_path_factory, folders):
    root = tmp_path_factory.mktemp("t")
    path = "/".join([*folders, "f.txt"])
    expected = not any(f in NOT_TREE_DIRS or f.endswith(("-info",)) for f in folders)
    assert (path in tree_paths(root, [path])) is expected


def test_files_outside_the_tree_are_not_recorded_as_read(tmp_path):
    root = _repo(tmp_path / "p")
    opened = [str(root / rel) for rel in [*NOT_TREE, *TRACKED]]
    found = {p.relative_to(root.resolve()).as_posix() for p in project_files(opened, root)}
    assert found == set(TRACKED)


def _published(root: Path) -> Path:
    """One receipt whose claim read every path of NOT_TREE and TRACKED, rendered."""
    (root / "gates").mkdir()
    (root / "gates/gate_demo.py").write_text('"""gate-demo: a demo."""\n', "utf-8")
    receipt = tamper_cases.synthetic_receipt("2026-01-01T00:00:00Z", 0.0, "0" * 64)
    receipt["code"]["files"] = [
        {"path": "gates/gate_demo.py", "sha256": _sha(root / "gates/gate_demo.py")}
    ]
    receipt["claims"][0]["read_files"] = [
        {"path": rel, "sha256": _sha(root / rel)} for rel in sorted([*NOT_TREE, *TRACKED])
    ]
    records = root / "records"
    write_receipt(receipt, records / "receipts")
    render_all(records / "receipts", records, root)
    return records


@pytest.mark.parametrize("changed", NOT_TREE + TRACKED)
def test_only_a_change_in_the_tree_makes_a_record_stale(tmp_path, changed):
    root = _repo(tmp_path / "p")
    records = _published(root)
    receipt = read_receipt(next(iter(receipt_paths(records / "receipts"))))
    assert check_receipt(root, receipt) is None
    (root / changed).write_text("edited\n", "utf-8")
    found = check_receipt(root, receipt)
    if changed in TRACKED:  # the control: the same edit inside the tree is caught
        assert found is not None and changed in found.changed
        assert verify_stale(records / "receipts", root)[0]
    else:
        assert found is None
        assert verify_all(records / "receipts", records, root) == []
    (root / changed).unlink()  # gone is the same as changed
    assert (check_receipt(root, receipt) is None) is (changed not in TRACKED)


def _clean_checkout(into: Path) -> Path:
    """The project as a fresh clone of it would be, working-tree edits included: git's files,
    every tracked file and every untracked one git does not ignore, and nothing else."""
    listed = git(ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    for rel in filter(None, listed.split("\0")):
        source = ROOT / rel
        if source.is_file():
            (into / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / rel)
    shutil.copytree(ROOT / ".git", into / ".git", symlinks=True)
    return into


def test_published_records_verify_the_same_in_a_clean_checkout_and_beside_any_caches(tmp_path):
    checkout = _clean_checkout(tmp_path / "clone")
    records = checkout / "records"
    assert verify_all(records / "receipts", records, checkout) == []
    assert verify_stale(records / "receipts", checkout)[0] == []
    # fill every recorded path that is not the tree's with other bytes: nothing may change
    recorded = set()
    for path in receipt_paths(records / "receipts"):
        receipt = read_receipt(path)
        for claim in receipt["claims"]:
            for key in ("code_files", "executed_files", "import_files", "read_files"):
                recorded |= {e["path"] for e in claim.get(key) or []}
    outside = sorted(
        p for p in recorded - tree_paths(checkout, sorted(recorded)) if not Path(p).is_absolute()
    )
    for rel in outside:
        (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
        (checkout / rel).write_bytes(b"a cache of some other machine\n")
    assert verify_all(records / "receipts", records, checkout) == []
    assert verify_stale(records / "receipts", checkout)[0] == []
