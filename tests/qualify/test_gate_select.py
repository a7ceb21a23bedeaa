"""``--gate-select=stale`` (issue 57): a gate runs only when its record is not current for the
tree and the environment; every other gate is listed with the receipt that keeps it current.

Each rule is shown end to end on a throwaway git project with two gates, ``alpha`` (reads
``lib/alpha_impl.py`` and ``data/alpha.json``) and ``beta`` (reads ``lib/beta_impl.py``), each
with its control: the same session with ``--gate-select=all`` runs both, and undoing the change
selects neither. A hypothesis test then draws file changes against a recorded set of reads and
checks that the selection is exactly the gates whose recorded files changed.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from gatekit import git
from hypothesis import given, settings
from hypothesis import strategies as st

from assay.qualify.judging import select
from assay.qualify.judging.select import environment_changes, why_run

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "gates"))

from support.robustness.selection_cases import FILES, GATES, HISTORIES, Case, build, expected, spoil  # noqa: E402

GATE = """
import json
from pathlib import Path

import {module}
from assay.qualify import Threshold


def test_{name}(gate):
    claim = gate.claim("{name}.value", "the value holds", kind="correctness",
                       threshold=Threshold("<=", 1.0), unit="x", code=["{module}"])
    extra = {reads}
    claim.measure({module}.VALUE + extra)
    claim.control("a broken subject", 5.0)
"""


class Project:
    """A git project with gates alpha and beta, run once and committed."""

    def __init__(self, pytester: pytest.Pytester) -> None:
        self.pytester = pytester
        self.root = pytester.path
        (self.root / "lib").mkdir()
        (self.root / "data").mkdir()
        (self.root / "gates").mkdir()
        (self.root / "lib/alpha_impl.py").write_text("VALUE = 0.25\n")
        (self.root / "lib/beta_impl.py").write_text("VALUE = 0.5\n")
        (self.root / "data/alpha.json").write_text('{"extra": 0.125}\n')
        (self.root / "README.md").write_text("# a project\n")
        reads = 'json.loads(Path(__file__).parents[1].joinpath("data/alpha.json").read_text())'
        for name, extra in (("alpha", f"{reads}['extra']"), ("beta", "0.0")):
            source = GATE.format(name=name, module=f"{name}_impl", reads=extra)
            (self.root / f"gates/gate_{name}.py").write_text(textwrap.dedent(source))
        (self.root / "conftest.py").write_text(
            "import sys, pathlib\nsys.path.insert(0, str(pathlib.Path(__file__).parent / 'lib'))\n"
        )
        pytester.makeini("[pytest]\npython_files = gate_*.py\n")
        git(self.root, "init", "-q", "-b", "main")
        assert self.run("all").ret == 0
        self.commit("first qualification")

    def commit(self, message: str) -> None:
        git(self.root, "add", "-A")
        git(self.root, "commit", "-q", "-m", message)

    def run(self, choice: str, *extra: str) -> pytest.RunResult:
        return self.pytester.runpytest(
            "-p",
            "no:cacheprovider",
            "--gate-device=cpu",
            f"--gate-select={choice}",
            *extra,
            "gates",
        )

    def tried(self, choice: str = "stale") -> set[str]:
        """The gates a run selects, tried without writing (the ledger stays as it was)."""
        return self.ran(self.run(choice, "--gate-no-write"))

    def ran(self, result: pytest.RunResult) -> set[str]:
        """The gates whose tests ran in ``result``; under selection the summary must agree."""
        out = result.stdout.str()
        names = {n for n in ("alpha", "beta") if f"gates/gate_{n}.py ." in out}
        assert result.parseoutcomes().get("passed", 0) == len(names), out
        if "--gate-select=stale" in out:
            assert {n for n in ("alpha", "beta") if f"gate-{n}: runs:" in out} == names, out
        return names


@pytest.fixture
def project(pytester: pytest.Pytester) -> Project:
    return Project(pytester)


def test_nothing_changed_runs_nothing_and_names_the_receipts(project):
    result = project.run("stale")
    assert result.ret == 0, result.stdout.str()  # nothing to run is the run's success
    assert project.ran(result) == set()
    out = result.stdout.str()
    assert "gate-alpha: current (receipt " in out and "gate-beta: current (receipt " in out
    # the control: the same tree under --gate-select=all runs both
    assert project.run("all").parseoutcomes()["passed"] == 2


@pytest.mark.parametrize(
    ("path", "text", "selected"),
    [
        ("lib/alpha_impl.py", "VALUE = 0.25  # one line changed\n", {"alpha"}),
        ("lib/beta_impl.py", "VALUE = 0.5  # one line changed\n", {"beta"}),
        ("data/alpha.json", '{"extra": 0.126}\n', {"alpha"}),
        ("gates/gate_beta.py", None, {"beta"}),
        ("README.md", "# a project, documented better\n", set()),
    ],
)
def test_a_change_selects_exactly_the_gates_that_read_it(project, path, text, selected):
    target = project.root / path
    before = target.read_text()
    target.write_text(text if text is not None else before + "\n# an edited gate file\n")
    assert project.tried() == selected  # dirty: the tree is read, not a commit
    project.commit(f"change {path}")
    assert project.tried() == selected  # committed: the same
    assert project.tried("all") == {"alpha", "beta"}  # the control: every gate runs
    assert project.ran(project.run("stale")) == selected  # qualified again, receipts written
    assert project.tried() == set()  # and now current


def test_a_new_torch_version_selects_the_gates_that_recorded_torch(project, monkeypatch):
    recorded = json.loads(
        next((project.root / "records/receipts/alpha").glob("*.json")).read_text()
    )
    assert recorded["environment"]["torch"] is not None
    real = select._installed
    monkeypatch.setattr(
        select, "_installed", lambda dist: "99.0.0" if dist == "torch" else real(dist)
    )
    result = project.run("stale", "--gate-no-write")
    assert project.ran(result) == {"alpha", "beta"}
    assert "torch " in result.stdout.str() and "-> 99.0.0" in result.stdout.str()
    monkeypatch.setattr(select, "_installed", real)  # the control: the recorded version
    assert project.tried() == set()


def test_a_receipt_that_does_not_verify_selects_its_gate(project):
    receipt = next((project.root / "records/receipts/beta").glob("*.json"))
    body = receipt.read_bytes()
    receipt.write_bytes(body.replace(b'"pass"', b'"PASS"', 1))
    result = project.run("stale", "--gate-no-write")
    assert project.ran(result) == {"beta"}
    assert "gate-beta: runs: its ledger" in result.stdout.str()
    receipt.write_bytes(body)  # the control
    assert project.tried() == set()


def test_without_git_history_every_gate_runs(project):
    """A tree whose ledger history cannot be checked (no .git) cannot be called current."""
    (project.root / ".git").rename(project.root / "no-git")
    result = project.run("stale", "--gate-no-write")
    assert project.ran(result) == {"alpha", "beta"}
    assert "no git checkout" in result.stdout.str()


def test_environment_changes_names_each_difference(monkeypatch):
    monkeypatch.setattr(select, "_installed", {"torch": "2.0", "transformers": None}.get)
    recorded = {"torch": "2.0", "transformers": "5.0", "bitsandbytes": None, "python": "X 1.2.3"}
    found = environment_changes(recorded)
    assert "transformers 5.0 -> not installed" in found
    assert not any(f.startswith(("torch", "bitsandbytes")) for f in found)
    assert any(f.startswith("python X 1.2.3 -> ") for f in found)


def test_under_xdist_the_workers_and_the_summary_agree(project):
    """Two workers judge while they collect, the controller before anything is written: a
    current ledger runs nothing and exits 0, one change runs its gate alone."""
    argv = ("-p", "no:cacheprovider", "--gate-device=cpu", "-n", "2", "--gate-no-write", "gates")
    result = project.pytester.runpytest_subprocess(*argv, "--gate-select=stale")
    assert result.ret == 0, result.stdout.str()
    assert "gate-alpha: current" in result.stdout.str()
    (project.root / "lib/beta_impl.py").write_text("VALUE = 0.5  # changed\n")
    result = project.pytester.runpytest_subprocess(*argv, "--gate-select=stale")
    assert result.parseoutcomes().get("passed") == 1, result.stdout.str()
    assert "gate-beta: runs: records/beta.md: stale" in result.stdout.str()
    # the control: the same workers with every gate selected
    assert project.pytester.runpytest_subprocess(*argv).parseoutcomes().get("passed") == 2


# -- generated: selection equals the recorded reads that changed -------------------------


@settings(max_examples=25, deadline=None)
@given(
    reads=st.fixed_dictionaries(
        {g: st.lists(st.sampled_from(FILES), unique=True, max_size=3) for g in GATES}
    ),
    changed=st.lists(st.sampled_from(FILES), unique=True, max_size=3),
    spoiled=st.one_of(st.none(), st.sampled_from(GATES)),
    failing=st.one_of(st.none(), st.sampled_from(GATES)),
    moved=st.one_of(st.none(), st.sampled_from(GATES)),
    history=st.sampled_from(HISTORIES),
)
def test_selection_is_exactly_the_gates_the_rule_names(
    tmp_path_factory, reads, changed, spoiled, failing, moved, history
):
    case = Case(reads, changed, spoiled, failing, moved, history)
    root, receipts = build(tmp_path_factory.mktemp("select"), case)
    decisions = {g: why_run(receipts, root, g, "cpu") for g in reads}
    assert {g for g, d in decisions.items() if d.runs} == expected(case)


def test_a_copy_of_the_receipts_alone_is_judged_as_the_ledger_it_copies(tmp_path):
    """CI copies records/receipts without the records or their figures. The selection reads
    receipts and the tree, never figures: this project's gate-stream, whose receipts name
    figures, judged from such a copy is what it is judged from records/ (the control: the copy
    spoiled selects it)."""
    import shutil

    copy = tmp_path / "receipts"
    shutil.copytree(ROOT / "records" / "receipts" / "stream", copy / "stream")
    receipt = json.loads(next((copy / "stream").glob("*.json")).read_text())
    assert receipt["figures"], "gate-stream's receipts name figures"
    here = why_run(ROOT / "records" / "receipts", ROOT, "stream", "cpu")
    assert why_run(copy, ROOT, "stream", "cpu") == here
    spoil(copy, "stream")
    assert why_run(copy, ROOT, "stream", "cpu").runs
