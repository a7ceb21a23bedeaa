"""I2, complete means complete, and I3, pytest agrees with the receipt: a matrix of real pytest
runs over every way pytest offers to select, deselect, skip, stop, rerun or crash, set in every
place it can be set (command line, ini ``addopts``, ``PYTEST_ADDOPTS``, a conftest, a plugin).

The gate under test has a claim that fails whenever its test runs. So whatever a run leaves out,
the rule is the same: the run is complete only if every test of the gate ran to a verdict, and
no run, however selected, shows that gate as pass."""

from __future__ import annotations

import json

import pytest

from assay.qualify.judging.standing import gate_standing

GATE = """
import pytest
from assay.qualify import Threshold


def test_good(gate):
    c = gate.claim("good", "agrees", kind="correctness", threshold=Threshold("<=", 1e-3))
    c.measure(0.0)
    c.control("broken", 1.0)


@pytest.mark.parametrize("size", [1, 2])
def test_bad(gate, size):
    bound = Threshold("<=", 1e-3)
    c = gate.claim(f"bad{{size}}", "agrees too", kind="correctness", threshold=bound)
    c.measure({bad})
    c.control("broken", 1.0)


class TestMore:
    def test_more(self, gate):
        c = gate.claim("more", "agrees", kind="correctness", threshold=Threshold("<=", 1e-3))
        c.measure(0.0)
        c.control("broken", 1.0)
"""

HIDE_BAD = "items[:] = [i for i in items if 'bad' not in i.name]"
# (how, where): what to write and which extra argv, leaving test_bad out of the run
LEAVE_OUT = {
    ("-k", "command line"): ({}, ["-k", "not bad"], {}),
    ("-k", "ini addopts"): ({"ini": "addopts = -k 'not bad'"}, [], {}),
    ("-k", "PYTEST_ADDOPTS"): ({}, [], {"PYTEST_ADDOPTS": "-k 'not bad'"}),
    ("-m", "command line"): ({"mark": True}, ["-m", "not heavy"], {}),
    ("-m", "ini addopts"): ({"mark": True, "ini": "addopts = -m 'not heavy'"}, [], {}),
    ("-m", "PYTEST_ADDOPTS"): ({"mark": True}, [], {"PYTEST_ADDOPTS": "-m 'not heavy'"}),
    ("--deselect", "command line"): ({}, ["--deselect", "gate_demo.py::test_bad[1]"], {}),
    ("--deselect", "ini addopts"): (
        {"ini": "addopts = --deselect gate_demo.py::test_bad[2]"},
        [],
        {},
    ),
    ("node id", "command line"): ({"ids": True}, ["gate_demo.py::test_good"], {}),
    ("modifyitems", "conftest"): (
        {"conftest": f"def pytest_collection_modifyitems(items):\n    {HIDE_BAD}\n"},
        [],
        {},
    ),
    ("modifyitems", "plugin"): (
        {"plugin": f"def pytest_collection_modifyitems(items):\n    {HIDE_BAD}\n"},
        [],
        {"PYTEST_PLUGINS": "leave_out"},
    ),
    ("deselected hook", "conftest"): (
        {
            "conftest": "def pytest_collection_modifyitems(config, items):\n"
            "    bad = [i for i in items if 'bad' in i.name]\n"
            f"    {HIDE_BAD}\n"
            "    config.hook.pytest_deselected(items=bad)\n"
        },
        [],
        {},
    ),
    ("pycollect_makeitem", "conftest"): (
        {
            "conftest": "import pytest\n\n"
            "@pytest.hookimpl(tryfirst=True)\n"
            "def pytest_pycollect_makeitem(collector, name, obj):\n"
            "    if name == 'test_bad':\n"
            "        return []\n"
        },
        [],
        {},
    ),
    ("python_functions", "ini"): ({"ini": "python_functions = test_good test_more"}, [], {}),
    ("-x", "command line"): ({"bad_first": True}, ["-x"], {}),
    ("--maxfail", "ini addopts"): ({"bad_first": True, "ini": "addopts = --maxfail=1"}, [], {}),
    ("--setup-only", "command line"): ({}, ["--setup-only"], {}),
    ("pytest.exit", "test body"): ({"exit": "pytest.exit('enough')"}, [], {}),
    ("KeyboardInterrupt", "test body"): ({"exit": "raise KeyboardInterrupt"}, ["subprocess"], {}),
}


def _project(
    pytester: pytest.Pytester,
    bad: str,
    *,
    mark=False,
    ini="",
    conftest="",
    plugin="",
    bad_first=False,
    exit="",
    ids=False,
) -> None:
    source = GATE.format(bad=bad)
    if mark:
        parametrize = '@pytest.mark.parametrize("size"'
        source = source.replace(parametrize, "@pytest.mark.heavy\n" + parametrize)
    if bad_first:  # bad runs before good, so stopping at it leaves good out
        good, rest = source.split("@pytest.mark.parametrize", 1)
        head, good_test = good.split("def test_good", 1)
        source = head + "@pytest.mark.parametrize" + rest + "\n\ndef test_good" + good_test
    if exit:  # test_good ends the run its own way
        end = '    c.control("broken", 1.0)\n\n\n@'
        source = source.replace(end, end.replace("\n\n\n@", f"\n    {exit}\n\n\n@"), 1)
    pytester.makepyfile(gate_demo=source)
    lines = ["[pytest]", "markers = heavy: a marker to select by", "gate_device = cpu"]
    pytester.makeini("\n".join([*lines, ini]) + "\n")
    if conftest:
        pytester.makeconftest(conftest)
    if plugin:
        pytester.makepyfile(leave_out=plugin)
        pytester.syspathinsert()


def _run(pytester, argv, env, monkeypatch) -> pytest.RunResult:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    receipts = pytester.path / "records" / "receipts"
    target = [] if any("::" in a for a in argv) else ["gate_demo.py"]
    if "subprocess" in argv:  # an interrupt would reach the test process itself
        rest = [a for a in argv if a != "subprocess"]
        return pytester.runpytest_subprocess(*target, *rest, f"--gate-receipts={receipts}")
    return pytester.runpytest(*target, *argv, f"--gate-receipts={receipts}")


def _receipts(pytester) -> list[dict]:
    folder = pytester.path / "records" / "receipts" / "demo"
    ledger = (folder / "LEDGER").read_text().split("\n") if (folder / "LEDGER").exists() else []
    names = [line.split()[1] for line in ledger if line and not line.startswith("#")]
    return [json.loads((folder / n).read_text()) for n in names]


@pytest.mark.parametrize(("how", "where"), sorted(LEAVE_OUT))
def test_a_run_that_leaves_out_a_failing_test_is_partial_and_never_pass(
    pytester, monkeypatch, how, where
):
    setup, argv, env = LEAVE_OUT[(how, where)]
    _project(pytester, "0.5", **setup)
    result = _run(pytester, argv, env, monkeypatch)
    receipts = _receipts(pytester)
    if receipts:
        newest = receipts[-1]
        ran_bad = any("bad" in t["nodeid"] for t in newest["run"]["tests"])
        assert newest["run"].get("partial") or ran_bad, newest["run"]
        assert not (newest["run"].get("partial") is None and newest["status"] == "pass")
    standing = gate_standing(pytester.path / "records" / "receipts", "demo")
    assert standing.status != "pass", standing.summary()
    assert result.ret != 0 or not receipts or receipts[-1]["run"].get("partial"), result.ret


@pytest.mark.parametrize(
    ("argv", "ini", "env"),
    [
        ([], "", {}),
        ([], "addopts = -m 'not heavy'", {}),  # a marker expression that leaves nothing out
        (["-k", "demo"], "", {}),
        ([], "", {"PYTEST_ADDOPTS": "-p no:cacheprovider"}),
        (["--ff"], "", {}),
    ],
)
def test_a_run_that_leaves_nothing_out_is_complete(pytester, monkeypatch, argv, ini, env):
    _project(pytester, "0.0", ini=ini)
    result = _run(pytester, argv, env, monkeypatch)
    assert result.ret == 0, result.stdout.str()
    (receipt,) = _receipts(pytester)
    assert "partial" not in receipt["run"], receipt["run"].get("partial_reason")
    assert gate_standing(pytester.path / "records" / "receipts", "demo").status == "pass"


@pytest.mark.parametrize("mode", ["--lf", "--sw"])
def test_rerunning_the_failures_only_is_partial(pytester, monkeypatch, mode):
    _project(pytester, "0.5")
    _run(pytester, [] if mode == "--lf" else [mode], {}, monkeypatch)  # --sw stops at bad[1]
    (pytester.path / "gate_demo.py").write_text(
        (pytester.path / "gate_demo.py").read_text().replace("c.measure(0.5)", "c.measure(0.0)")
    )
    _run(pytester, [mode], {}, monkeypatch)
    second = _receipts(pytester)[-1]
    assert second["run"]["partial"], second["run"]
    standing = gate_standing(pytester.path / "records" / "receipts", "demo")
    assert standing.status == "fail", standing.summary()  # the complete run's failure stands


def test_a_rerun_that_passes_keeps_the_first_failure(pytester, monkeypatch):
    flaky = GATE.format(bad="0.0").replace(
        '    c.measure(0.0)\n    c.control("broken", 1.0)\n\n\n@',
        "    import os\n"
        "    first = not os.path.exists('tried')\n"
        "    open('tried', 'w').close()\n"
        "    c.measure(0.5 if first else 0.0)\n"
        '    c.control("broken", 1.0)\n\n\n@',
        1,
    )
    pytester.makepyfile(gate_demo=flaky)
    pytester.makeini("[pytest]\ngate_device = cpu\n")
    result = _run(pytester, ["--reruns", "1"], {}, monkeypatch)
    assert result.ret != 0  # pytest agrees with the receipt: the claim failed once
    (receipt,) = _receipts(pytester)
    good = next(c for c in receipt["claims"] if c["id"] == "good")
    assert good["verdict"] == "fail"
    assert any("ran 2 times" in n for n in receipt["notes"])
    assert gate_standing(pytester.path / "records" / "receipts", "demo").status == "fail"


def test_a_crash_leaves_no_receipt_and_never_a_pass(pytester):
    _project(pytester, "0.0", exit="import os; os._exit(3)")
    receipts = pytester.path / "records" / "receipts"
    result = pytester.runpytest_subprocess("gate_demo.py", f"--gate-receipts={receipts}")
    assert result.ret != 0
    assert _receipts(pytester) == []


def test_a_crashed_xdist_worker_leaves_a_partial_or_failing_receipt(pytester):
    _project(pytester, "0.0", exit="import os; os._exit(3)")
    receipts = pytester.path / "records" / "receipts"
    result = pytester.runpytest_subprocess("gate_demo.py", "-n", "2", f"--gate-receipts={receipts}")
    assert result.ret != 0
    for receipt in _receipts(pytester):
        assert receipt["status"] == "fail" or receipt["run"].get("partial"), receipt["run"]
    assert gate_standing(receipts, "demo").status != "pass"
