"""Each claim records its own code files; a listed module its test never imports errors it."""

from __future__ import annotations

CODE = """
def test_c(gate):
    import json.decoder
    c = gate.claim("c", "holds", kind="correctness", threshold=Threshold("<=", 1),
                   code={code})
    c.measure(0)
    c.control("broken", 2)
"""


def test_claim_code_files_start_with_the_gate_module_and_union_into_code_files(gates):
    gates.write("code", CODE.format(code='["json.decoder"]'))
    assert gates.run().ret == 0
    receipt = gates.only_receipt("code")
    paths = [f["path"] for f in receipt["claims"][0]["code_files"]]
    assert paths[0] == "gate_code.py" and paths[1].endswith("json/decoder.py")
    assert {f["path"] for f in receipt["code"]["files"]} == set(paths)
    record = (gates.records / "code.md").read_text()
    assert "test `gate_code.py::test_c`" in record


def test_a_module_the_test_never_imported_is_a_stale_declaration(gates):
    gates.write("stale", CODE.format(code='["wave"]'))
    result = gates.run()
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*module 'wave' is imported by nothing its gate module imports*"])


CHILD = """
import subprocess, sys

def test_c(gate):
    c = gate.claim("c", "holds", kind="correctness", threshold=Threshold("<=", 1),
                   code=["childonly"])
    script = "{report}import childonly"
    subprocess.run([sys.executable, "-c", script], check=True)
    c.measure(0)
    c.control("broken", 2)
"""
REPORTS = "from assay.qualify.plugin.child_imports import report_at_exit; report_at_exit(); "


def test_a_module_only_a_child_process_imported_counts_when_the_child_reports(gates):
    gates.pytester.makepyfile(childonly="VALUE = 1\n")
    gates.write("child", CHILD.replace("{report}", REPORTS))
    result = gates.run(subprocess=True)
    assert result.ret == 0, result.stdout.str()
    paths = [f["path"] for f in gates.only_receipt("child")["claims"][0]["code_files"]]
    assert paths == ["gate_child.py", "childonly.py"]


def test_a_child_that_does_not_report_leaves_its_module_stale(gates):
    gates.pytester.makepyfile(childonly="VALUE = 1\n")
    gates.write("silent", CHILD.replace("{report}", ""))
    result = gates.run(subprocess=True)
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["*module 'childonly' is imported by nothing its gate module imports*"]
    )


def test_gate_uses_is_import_checked_too(gates):
    gates.write(
        "uses",
        CODE.format(code="[]").replace("    import json.decoder\n", "    gate.uses('wave')\n"),
    )
    result = gates.run()
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*gate.uses: module 'wave' is imported by nothing*"])


MAIN = """
import subprocess, sys

def test_m(gate):
    c = gate.claim("m", "holds", kind="correctness", threshold=Threshold("<=", 1),
                   code=["childmain"])
    subprocess.run([sys.executable, "-m", "childmain"], check=True)
    c.measure(0)
    c.control("broken", 2)
"""


def test_a_module_a_child_ran_with_dash_m_counts_under_its_own_name(gates):
    # `python -m childmain` runs it as __main__; the report names it childmain
    gates.pytester.makepyfile(childmain=REPORTS.replace("; ", "\n") + "\n")
    gates.write("main", MAIN)
    result = gates.run(subprocess=True)
    assert result.ret == 0, result.stdout.str()


FIXTURE = """
import subprocess, sys
import pytest

@pytest.fixture(scope="module")
def ran():
    subprocess.run([sys.executable, "-c", "{report}import childonly"], check=True)

def test_f(gate, ran):
    c = gate.claim("f", "holds", kind="correctness", threshold=Threshold("<=", 1),
                   code=["childonly"])
    c.measure(0)
    c.control("broken", 2)

def test_g(gate, ran):  # the fixture's child ran before this test began
    c = gate.claim("g", "holds", kind="correctness", threshold=Threshold("<=", 1),
                   code=["childonly"])
    c.measure(0)
    c.control("broken", 2)
"""


def test_a_child_started_by_a_module_fixture_counts_without_plumbing(gates):
    gates.pytester.makepyfile(childonly="VALUE = 1\n")
    gates.write("fixture", FIXTURE.replace("{report}", REPORTS))
    result = gates.run(subprocess=True)
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=2)


def test_child_imports_reads_each_report_once_and_restores_the_environment(tmp_path, monkeypatch):
    import json
    import os

    from assay.qualify.plugin.child_imports import ENV, ChildImports

    monkeypatch.setenv(ENV, "outer")
    children = ChildImports()
    children.start()
    directory = children.directory
    assert os.environ[ENV] == str(directory)
    report = {"modules": ["a", "b"], "context": "t:x", "read": ["/data/table.csv"]}
    (directory / "imports-1.json").write_text(json.dumps(report))
    (directory / "imports-2.json").write_text("[")  # torn: reported nothing
    assert children.names(["t:x"]) == {"a", "b"} and children.names(["t:y"]) == set()
    assert children.reads("t:x") == {"/data/table.csv"} and children.reads("t:y") == set()
    (directory / "imports-1.json").write_text(json.dumps({"modules": ["changed"]}))  # read
    (directory / "imports-3.json").write_text(json.dumps({"modules": ["c"], "context": None}))
    assert children.names(["t:x", None]) == {"a", "b", "c"}
    children.stop()
    assert os.environ[ENV] == "outer" and not directory.exists()
