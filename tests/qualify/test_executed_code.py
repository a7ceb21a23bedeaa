"""Code a claim depends on is measured, not only listed: packages expand to every module file,
each claim records the project files its test executed (its children's too), and an edit to
any of them stales the record."""

from __future__ import annotations

import pytest

from assay.qualify.judging.stale import check_receipt

PYPROJECT = '[project]\nname = "toypkg"\nversion = "0.1"\n'
PACKAGE = {
    "toypkg/__init__.py": "VERSION = 1\n",
    "toypkg/_core.py": "def add(a, b):\n    return a + b\n",
    "toypkg/_other.py": "def run():\n    return 3\n\nif __name__ == '__main__':\n    run()\n",
    "toypkg/_fixture.py": "def prepare():\n    return 'ready'\n",
    "toypkg/nested/__init__.py": "",
    "toypkg/nested/_deep.py": "DEEP = 1\n",
}


@pytest.fixture
def toy(gates):
    """A third-party project ``toypkg`` in the sandbox: the project under test."""
    (gates.pytester.path / "pyproject.toml").write_text(PYPROJECT)
    for name, text in PACKAGE.items():
        path = gates.pytester.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return gates


def paths(entries):
    return [e["path"] for e in entries]


CORE = """
import toypkg

def test_core(gate):
    from toypkg import _core
    c = gate.claim("core", "adds", kind="correctness", threshold=Threshold("==", 0),
                   code=[])
    c.measure(_core.add(1, 2) - 3)
    c.control("broken", 1)
"""


def test_a_claim_lists_the_project_files_its_test_executed_and_an_edit_stales_it(toy):
    toy.write("core", CORE)
    result = toy.run()
    assert result.ret == 0, result.stdout.str()
    receipt = toy.only_receipt("core")
    claim = receipt["claims"][0]
    assert claim["code_source"] == "measured"
    # the gate module imported the package (gate-wide); the test ran _core; nothing else ran
    assert paths(claim["executed_files"]) == ["toypkg/__init__.py", "toypkg/_core.py"]
    assert paths(claim["code_files"]) == ["gate_core.py"]
    root = toy.pytester.path
    assert check_receipt(root, receipt) is None
    core = root / "toypkg" / "_core.py"
    core.write_text(core.read_text() + "# edited\n")
    stale = check_receipt(root, receipt)
    assert stale is not None and stale.changed == {"toypkg/_core.py": ["core"]}


CHILD = """
import subprocess, sys

def test_child(gate):
    c = gate.claim("child", "runs", kind="correctness", threshold=Threshold("==", 0))
    done = subprocess.run([sys.executable, "-m", "toypkg._other"], check=False)
    c.measure(done.returncode)
    c.control("broken", 1)
"""


def test_a_child_process_of_the_test_is_measured_into_the_claim(toy):
    toy.write("child", CHILD)
    result = toy.run()
    assert result.ret == 0, result.stdout.str()
    claim = toy.only_receipt("child")["claims"][0]
    assert "toypkg/_other.py" in paths(claim["executed_files"])
    assert "toypkg/_core.py" not in paths(claim["executed_files"])


ORDER = """
import pytest
import toypkg

@pytest.fixture(scope="module")
def prepared():
    from toypkg import _fixture
    return _fixture.prepare()

def test_a(gate, prepared):
    from toypkg import _core
    c = gate.claim("a", "adds", kind="correctness", threshold=Threshold("==", 0))
    c.measure(_core.add(1, 1) - 2)
    c.control("broken", 1)

def test_b(gate, prepared):
    from toypkg import _other
    c = gate.claim("b", "runs", kind="correctness", threshold=Threshold("==", 0))
    c.measure(_other.run() - 3)
    c.control("broken", 1)
"""
REVERSE = """
import os

def pytest_collection_modifyitems(items):
    if os.environ.get("TOY_REVERSE"):
        items.reverse()
"""


def test_the_executed_sets_do_not_depend_on_test_order_or_workers(toy, monkeypatch):
    toy.write("order", ORDER)
    toy.pytester.makeconftest(REVERSE)
    runs = {}
    for name, reverse, extra in (
        ("forward", "", ()),
        ("reverse", "1", ()),
        ("xdist", "", ("-n", "2")),
    ):
        monkeypatch.setenv("TOY_REVERSE", reverse)
        receipts = toy.pytester.path / f"receipts-{name}"
        result = toy.run(*extra, receipts=receipts, subprocess=bool(extra))
        assert result.ret == 0, result.stdout.str()
        claims = toy.only_receipt("order", receipts)["claims"]
        runs[name] = {c["id"]: paths(c["executed_files"]) for c in claims}
    assert runs["forward"] == runs["reverse"] == runs["xdist"]
    # import-time and the module fixture count for both claims, whichever test set it up
    shared = ["toypkg/__init__.py", "toypkg/_fixture.py"]
    assert runs["forward"] == {
        "a": [*shared[:1], "toypkg/_core.py", shared[1]],
        "b": [*shared, "toypkg/_other.py"],
    }


UNMEASURED = """
GATE_COVERAGE = False

def test_declared(gate):
    from toypkg import _core
    c = gate.claim("declared", "adds", kind="correctness", threshold=Threshold("==", 0),
                   code=["toypkg"])
    c.measure(_core.add(1, 2) - 3)
    c.control("broken", 1)
"""


def test_a_gate_that_opts_out_records_only_its_declared_files_expanding_packages(toy):
    toy.write("unmeasured", UNMEASURED)
    result = toy.run()
    assert result.ret == 0, result.stdout.str()
    claim = toy.only_receipt("unmeasured")["claims"][0]
    assert claim["code_source"] == "declared" and "executed_files" not in claim
    # a package stands for every module file under it, recursively
    assert paths(claim["code_files"]) == [
        "gate_unmeasured.py",
        "toypkg/__init__.py",
        "toypkg/_core.py",
        "toypkg/_fixture.py",
        "toypkg/_other.py",
        "toypkg/nested/__init__.py",
        "toypkg/nested/_deep.py",
    ]


TIMED = """
def test_timed(gate):
    from assay.qualify.plugin.claim import MeasuredControl
    from toypkg import _core
    c = gate.claim("timed", "fast", kind="performance", threshold=Threshold("<", 1.0),
                   unit="s", code=["toypkg._core"])
    c.measure(0.1)
    c.control("slow", MeasuredControl(2.0, "s"))

def test_plain(gate):
    from toypkg import _core
    c = gate.claim("plain", "adds", kind="correctness", threshold=Threshold("==", 0))
    c.measure(_core.add(1, 2) - 3)
    c.control("broken", 1)
"""


def test_a_test_declaring_a_performance_claim_runs_untraced(toy):
    toy.write("timed", TIMED)
    result = toy.run()
    assert result.ret == 0, result.stdout.str()
    by_id = {c["id"]: c for c in toy.only_receipt("timed")["claims"]}
    assert by_id["timed"]["code_source"] == "declared"
    assert "executed_files" not in by_id["timed"]
    assert by_id["plain"]["code_source"] == "measured"
    assert "toypkg/_core.py" in paths(by_id["plain"]["executed_files"])


def test_old_receipts_without_executed_files_keep_declared_staleness(toy):
    toy.write("core", CORE)
    assert toy.run().ret == 0
    receipt = toy.only_receipt("core")
    for claim in receipt["claims"]:  # as written before executed and imported files existed
        claim.pop("executed_files")
        claim.pop("code_source")
        claim.pop("import_files", None)
    core = toy.pytester.path / "toypkg" / "_core.py"
    core.write_text(core.read_text() + "# edited\n")
    assert check_receipt(toy.pytester.path, receipt) is None


def test_a_session_without_gate_modules_never_loads_coverage(pytester):
    pytester.makepyfile(test_plain="import sys\n\ndef test_x():\n    assert 1\n")
    pytester.makeconftest(
        "import sys\n\ndef pytest_sessionfinish(session):\n"
        "    assert 'coverage' not in sys.modules\n"
        "    assert 'assay.qualify.plugin.executed' not in sys.modules\n"
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
