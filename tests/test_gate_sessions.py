"""The gate sessions of noxfile.py leave the checkout as it was unless asked to publish (issue
54: after `nox -s gates`, `git status` listed 240 changed records and receipts)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _noxfile():
    spec = importlib.util.spec_from_file_location("assay_noxfile", ROOT / "noxfile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


NOXFILE = _noxfile()


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout


def _gates(repo: Path, *posargs: str) -> str:
    """A gate session's pytest run on ``repo`` with ``posargs``, as noxfile.py builds it."""
    args, where = NOXFILE.gate_destination(list(posargs), repo)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
    done = subprocess.run(
        [*command, "gates/gate_exactness.py", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return where


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The framework quickstart's toy project as a git checkout with this project's .gitignore
    and one published, committed run."""
    repo = tmp_path / "toy"
    shutil.copytree(ROOT / "examples/toy-gates", repo)
    shutil.copy(ROOT / ".gitignore", repo / ".gitignore")
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "gates@example.invalid")
    _git(repo, "config", "user.name", "gates")
    _gates(repo, NOXFILE.PUBLISH)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "published")
    return repo


@pytest.mark.slow
def test_a_gate_session_leaves_the_checkout_clean_unless_asked_to_publish(project):
    published = sorted((project / "records/receipts").rglob("*.json"))
    where = _gates(project)
    assert _git(project, "status", "--porcelain", "--untracked-files=all") == ""
    scratch = project / NOXFILE.SCRATCH
    assert where.startswith(str(NOXFILE.SCRATCH))
    # the published ledger with this run on top, and its records rendered beside it
    written = sorted((scratch / "receipts").rglob("*.json"))
    assert len(written) == len(published) + 1
    assert (scratch / "exactness.md").is_file()
    # the control: asked to publish, the same run changes the tracked records
    assert _gates(project, NOXFILE.PUBLISH) == "records/ (published)"
    changed = _git(project, "status", "--porcelain", "--untracked-files=all")
    assert "records/receipts/exactness/" in changed and "records/exactness.md" in changed


def test_what_a_gate_keeps_between_runs_is_copied_into_the_scratch_folder(tmp_path):
    """gate-mutation's stored verdicts live under the session's records folder (issue 54's
    attack: a scratch run wrote records/mutation/gate-verdicts.json): the scratch folder starts
    from a copy of the published store, and the gate resolves its store there."""
    import importlib.util as util

    store = tmp_path / "records" / "mutation" / "gate-verdicts.json"
    store.parent.mkdir(parents=True)
    store.write_text('{"format": "assay.gate-verdicts/1", "verdicts": {}}')
    args, _ = NOXFILE.gate_destination(["-q"], tmp_path)
    copied = tmp_path / NOXFILE.SCRATCH / "mutation" / "gate-verdicts.json"
    assert copied.read_text() == store.read_text()

    spec = util.spec_from_file_location("gate_mutation_under_test", ROOT / "gates/gate_mutation.py")
    gate = util.module_from_spec(spec)
    spec.loader.exec_module(gate)

    class Config:  # what setting_dir reads of a pytest config
        invocation_params = type("P", (), {"dir": tmp_path})()
        inipath = None
        rootpath = tmp_path

        def __init__(self, options):
            self.options = options

        def getoption(self, name, default=None):
            return self.options.get(name, default)

        def getini(self, name):
            return "records/receipts" if name == "gate_receipts" else ""

    options = dict(a.removeprefix("--").replace("-", "_", 1).split("=", 1) for a in args[:2])
    assert gate.verdict_store_path(Config(options)) == copied
    # the control: a publishing session (no place named) keeps the published store
    assert gate.verdict_store_path(Config({})) == store


def test_options_that_name_a_place_are_the_users_and_publish_is_never_passed_on(tmp_path):
    args, _ = NOXFILE.gate_destination(["-n", "2", "--gate-receipts=/x/receipts"], tmp_path)
    assert args == ["-n", "2", "--gate-receipts=/x/receipts"]
    assert not (tmp_path / NOXFILE.SCRATCH).exists()  # nothing copied for a run going elsewhere
    args, where = NOXFILE.gate_destination(["-q", NOXFILE.PUBLISH], tmp_path)
    assert args == ["-q"] and where == "records/ (published)"
    args, _ = NOXFILE.gate_destination(["-q"], tmp_path)
    assert args[-1] == "-q" and args[0].startswith("--gate-receipts=")  # the user's args last


def test_the_scratch_folder_is_one_git_ignores_in_this_checkout():
    inside = NOXFILE.SCRATCH / "receipts" / "nf4" / "x.json"
    ignored = subprocess.run(["git", "check-ignore", "-q", str(inside)], cwd=ROOT, check=False)
    tracked = subprocess.run(  # the control: the published place is not ignored
        ["git", "check-ignore", "-q", "records/receipts/nf4/x.json"], cwd=ROOT, check=False
    )
    assert (ignored.returncode, tracked.returncode) == (0, 1)
