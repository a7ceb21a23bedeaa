"""I7, provenance is closed: what a claim depended on includes the files it opened (data tables,
configs, fixtures on disk, in the test or in a child) and every module whose import-time code it
relied on, whichever gate imported it first; staleness covers all of it, and code that ran but
differs from the tree is flagged."""

from __future__ import annotations

import json
import sys

import pytest

from assay.qualify.judging.stale import check_receipt

PACKAGE = {
    "pyproject.toml": '[project]\nname = "toylib"\nversion = "0.1"\n',
    "toylib/__init__.py": "",
    "toylib/constants.py": "LIMIT = 3\n",
    "toylib/core.py": "from toylib.constants import LIMIT\n\ndef clamp(x):\n    return min(x, 3)\n",
    "data/table.csv": "x,y\n1,2\n",
}

FIRST = """
import toylib.core  # this gate imports toylib first: the constants run under its context

def test_first(gate):
    c = gate.claim("first", "clamps", kind="correctness", threshold=Threshold("==", 0))
    c.measure(toylib.core.clamp(5) - 3)
    c.control("broken", 1)
"""

SECOND = """
import toylib.core

def test_second(gate):
    c = gate.claim("second", "clamps too", kind="correctness", threshold=Threshold("==", 0))
    c.measure(toylib.core.clamp(9) - 3)
    c.control("broken", 1)
"""

READER = """
import subprocess
import sys

def test_reads(gate):
    with open("data/table.csv") as handle:
        rows = handle.read().splitlines()
    code = "import assay.qualify as q; q.report_at_exit(); open('data/child.txt').read()"
    subprocess.run([sys.executable, "-c", code], check=True)
    c = gate.claim("rows", "two rows", kind="correctness", threshold=Threshold("==", 2))
    c.measure(len(rows))
    c.control("truncated", 1)
"""


@pytest.fixture
def toy(gates):
    for name, text in PACKAGE.items():
        path = gates.pytester.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    gates.pytester.syspathinsert()
    return gates


def _paths(claim: dict, key: str) -> list[str]:
    return [e["path"] for e in claim.get(key, [])]


def test_import_time_code_counts_for_a_gate_that_did_not_import_it_first(toy):
    toy.write("first", FIRST)
    toy.write("second", SECOND)
    assert toy.run().ret == 0
    (second,) = toy.only_receipt("second")["claims"]
    # the constants' line ran once, under gate_first's import; gate_second relies on it too
    assert "toylib/constants.py" not in _paths(second, "executed_files")
    assert "toylib/constants.py" in _paths(second, "import_files")
    (toy.pytester.path / "toylib/constants.py").write_text("LIMIT = 4\n")
    stale = check_receipt(toy.pytester.path, toy.only_receipt("second"))
    assert stale is not None and "toylib/constants.py" in stale.changed


def test_files_a_claim_opened_are_part_of_it_children_included(toy):
    (toy.pytester.path / "data/child.txt").write_text("from the child\n")
    toy.write("reads", READER)
    result = toy.run()
    assert result.ret == 0, result.stdout.str()
    receipt = toy.only_receipt("reads")
    (claim,) = receipt["claims"]
    assert _paths(claim, "read_files") == ["data/child.txt", "data/table.csv"]
    assert check_receipt(toy.pytester.path, receipt) is None
    (toy.pytester.path / "data/table.csv").write_text("x,y\n1,2\n3,4\n")
    stale = check_receipt(toy.pytester.path, receipt)
    assert stale is not None and stale.changed == {"data/table.csv": ["rows"]}
    assert not any("receipts" in p for p in _paths(claim, "read_files"))


def test_an_installed_copy_that_differs_from_the_tree_is_flagged(toy, tmp_path, monkeypatch):
    installed = tmp_path / "site-packages" / "toylib"
    installed.mkdir(parents=True)
    for name in ("__init__.py", "constants.py", "core.py"):
        (installed / name).write_text((toy.pytester.path / "toylib" / name).read_text())
    (installed / "core.py").write_text(PACKAGE["toylib/core.py"] + "# a later release\n")
    monkeypatch.syspath_prepend(str(installed.parent))
    toy.write("first", FIRST)
    assert toy.run("--import-mode=importlib").ret == 0  # the gate's folder stays off sys.path
    receipt = toy.only_receipt("first")
    assert "toylib/core.py" in _paths(receipt["claims"][0], "executed_files")  # the tree's path
    assert receipt["code"]["differs_from_tree"] == ["toylib/core.py"]
    record = (toy.records / "first.md").read_text("utf-8")
    assert "WARNING: the code that ran differs from the project tree in 1 file" in record
    assert "code that ran differs from the tree" in record.split("\n")[2]


def test_an_untraced_claim_still_depends_on_what_its_gate_imports(toy, monkeypatch):
    """With coverage off (a timing gate, or ASSAY_GATE_COVERAGE=0), the claim records no
    executed files; the modules its gate imports still count, so an edit to them stales it."""
    monkeypatch.setenv("ASSAY_GATE_COVERAGE", "0")
    toy.write("first", FIRST)
    assert toy.run().ret == 0
    receipt = toy.only_receipt("first")
    (claim,) = receipt["claims"]
    assert claim["code_source"] == "declared" and "executed_files" not in claim
    assert "toylib/core.py" in _paths(claim, "import_files")
    (toy.pytester.path / "toylib/core.py").write_text(PACKAGE["toylib/core.py"] + "# edit\n")
    stale = check_receipt(toy.pytester.path, receipt)
    assert stale is not None and "toylib/core.py" in stale.changed


def test_a_file_read_at_import_time_counts_for_every_gate_relying_on_the_module(toy):
    """toylib reads its table when imported; gate_first imports it first, gate_second finds it
    imported already. Both claims depend on the table, so an edit to it stales both."""
    (toy.pytester.path / "toylib/__init__.py").write_text(
        "with open('data/table.csv') as handle:\n    TABLE = handle.read()\n"
    )
    toy.write("first", FIRST)
    toy.write("second", SECOND)
    assert toy.run().ret == 0
    for gate in ("first", "second"):
        (claim,) = toy.only_receipt(gate)["claims"]
        assert "data/table.csv" in _paths(claim, "read_files"), (gate, claim)
    (toy.pytester.path / "data/table.csv").write_text("x,y\n9,9\n")
    for gate in ("first", "second"):
        assert check_receipt(toy.pytester.path, toy.only_receipt(gate)) is not None, gate


def test_a_database_a_claim_opened_is_part_of_it(toy):
    """SQLite opens its file in C, past Python's open event; the connect is noted instead."""
    import sqlite3

    with sqlite3.connect(toy.pytester.path / "data/cases.db") as db:
        db.execute("create table cases (x)")
        db.execute("insert into cases values (2)")
    toy.write(
        "db",
        """
import sqlite3

def test_db(gate):
    rows = sqlite3.connect("file:data/cases.db?mode=ro", uri=True).execute("select x from cases")
    c = gate.claim("db", "one case", kind="correctness", threshold=Threshold("==", 1))
    c.measure(len(rows.fetchall()))
    c.control("empty", 0)
""",
    )
    assert toy.run().ret == 0
    (claim,) = toy.only_receipt("db")["claims"]
    assert "data/cases.db" in _paths(claim, "read_files")


SECOND_SESSION = """
import pathlib, sys
import pytest

receipts = sys.argv[1]
pytest.main(["gate_first.py", "-q", "-p", "no:cacheprovider", "--gate-receipts=" + receipts])
core = pathlib.Path("toylib/core.py")
core.write_text(core.read_text().replace("min(x, 3)", "min(x, 3) + 1"))  # now it fails
pytest.main(["gate_first.py", "-q", "-p", "no:cacheprovider", "--gate-receipts=" + receipts])
"""


def test_code_edited_between_two_sessions_of_one_process_is_flagged(toy):
    """A notebook or watch loop runs pytest twice in one process; the second session runs the
    module loaded by the first, not the edited file, so its receipt says the code differs."""
    toy.write("first", FIRST)
    script = toy.pytester.path / "twice.py"
    script.write_text(SECOND_SESSION)
    toy.pytester.run(sys.executable, str(script), str(toy.receipts))
    first, second = (json.loads(p.read_text()) for p in toy.receipt_files("first"))
    assert "differs_from_tree" not in first["code"]
    assert second["code"]["differs_from_tree"] == ["toylib/core.py"]
    assert second["status"] == "pass"  # the old code ran: what a reader must be warned of


OWN_TRACER = """
import importlib
import sys

def test_traced(gate):
    sys.settrace(lambda frame, event, arg: None)  # the test's own tracer replaces coverage's
    core = importlib.import_module("toylib.core")  # imported by name: no static import
    sys.settrace(None)
    c = gate.claim("own", "clamps", kind="correctness", threshold=Threshold("==", 0))
    c.measure(core.clamp(5) - 3)
    c.control("broken", 1)
"""


def test_a_test_that_replaces_the_tracer_is_declared_and_what_it_loaded_still_counts(toy):
    toy.write("own", OWN_TRACER)
    assert toy.run().ret == 0
    (claim,) = toy.only_receipt("own")["claims"]
    assert claim["code_source"] == "declared" and "executed_files" not in claim
    assert "toylib/core.py" in _paths(claim, "import_files")


def test_a_src_package_named_unlike_its_distribution_is_measured(gates):
    root = gates.pytester.path
    (root / "pyproject.toml").write_text('[project]\nname = "toy-library"\nversion = "0.1"\n')
    (root / "src" / "toylib").mkdir(parents=True)
    (root / "src" / "toylib" / "__init__.py").write_text("def add(a, b):\n    return a + b\n")
    gates.pytester.syspathinsert(root / "src")
    gates.write(
        "lib",
        """
import toylib

def test_add(gate):
    c = gate.claim("add", "adds", kind="correctness", threshold=Threshold("==", 0))
    c.measure(toylib.add(1, 2) - 3)
    c.control("broken", 1)
""",
    )
    assert gates.run().ret == 0
    (claim,) = gates.only_receipt("lib")["claims"]
    assert "src/toylib/__init__.py" in _paths(claim, "executed_files")


INSIDE = """
def test_{name}(gate):
    import toylib.core  # imported by whichever test runs first; the other finds it loaded

    c = gate.claim("{name}", "clamps", kind="correctness", threshold=Threshold("==", 0))
    c.measure(toylib.core.clamp(5) - 3)
    c.control("broken", 1)
"""


def test_a_claims_import_files_do_not_depend_on_which_gate_ran_first(toy):
    """Issue 52, rule 5 (found by its adversary): a package's __init__ ran under the test that
    imported the package first, so only that claim listed it. Every module a claim ran or
    loaded brings its packages' __init__ along, in either order."""
    for name in ("alpha", "beta"):
        toy.write(name, INSIDE.format(name=name))
    found = []
    for order, receipts in ((1, toy.pytester.path / "one"), (-1, toy.pytester.path / "two")):
        toy.modules = toy.modules[::order]
        assert toy.run(receipts=receipts, subprocess=True).ret == 0
        found.append(
            {
                gate: _paths(toy.only_receipt(gate, receipts)["claims"][0], "import_files")
                for gate in ("alpha", "beta")
            }
        )
    assert found[0] == found[1]
    assert all("toylib/__init__.py" in paths for paths in found[0].values()), found


def test_a_helper_package_beside_a_gate_module_counts_for_every_importer(tmp_path):
    """Issue 52, rule 5: a helper package beside the gate modules (on their import path, not
    the project under test) was listed only for the test that loaded it first. Its files are
    now resolved from the gate module's imports, so every importer lists them; a module in a
    package folder does not resolve its siblings by absolute name (Python 3 has no implicit
    relative imports)."""
    from assay.qualify.plugin.imports import import_closure

    support = tmp_path / "gates" / "support"
    support.mkdir(parents=True)
    (support / "__init__.py").write_text("")
    (support / "tables.py").write_text("from support.base import X\n")
    (support / "base.py").write_text("X = 1\n")
    (support / "lonely.py").write_text("import base\n")
    (tmp_path / "gates" / "gate_x.py").write_text(
        "def test_x():\n    from support.tables import X\n"
    )
    found = import_closure(tmp_path, ["gates/gate_x.py"], [])
    assert found == [
        "gates/support/__init__.py",
        "gates/support/base.py",
        "gates/support/tables.py",
    ]
    assert import_closure(tmp_path, ["gates/support/lonely.py"], []) == []
