"""I3, pytest agrees with the receipt: a claim declared or measured anywhere (the test body, a
fixture, its teardown, a finalizer) is judged the same way, and a claim that does not pass means
a non-zero exit, however the test that declared it ended."""

from __future__ import annotations

import json

import pytest

from assay.qualify.judging.standing import gate_standing

FIXTURE_TEARDOWN = """
import pytest

@pytest.fixture
def peak(gate):
    claim = gate.claim("peak", "peak under budget", kind="memory",
                       threshold=Threshold("<=", 100), unit="MiB")
    yield claim
    claim.measure({value})  # measured when the fixture tears down
    claim.control("leaky", 500)

def test_step(peak):
    pass
"""

WHOLLY_IN_TEARDOWN = """
import pytest

@pytest.fixture
def peak(gate):
    yield
    claim = gate.claim("peak", "peak under budget", kind="memory", threshold=Threshold("<=", 100))
    claim.measure({value})
    claim.control("leaky", 500)

def test_step(peak):
    pass
"""

FINALIZER = """
def test_step(gate, request):
    claim = gate.claim("peak", "peak under budget", kind="memory", threshold=Threshold("<=", 100))
    claim.control("leaky", 500)
    request.addfinalizer(lambda: claim.measure({value}))
"""

SKIPPED_AFTER = """
import pytest

def test_step(gate):
    claim = gate.claim("peak", "peak under budget", kind="memory", threshold=Threshold("<=", 100))
    claim.measure({value})
    claim.control("leaky", 500)
    pytest.skip("decided to skip after measuring")
"""

XFAILED = """
import pytest

@pytest.mark.xfail(reason="known")
def test_step(gate):
    claim = gate.claim("peak", "peak under budget", kind="memory", threshold=Threshold("<=", 100))
    claim.measure({value})
    claim.control("leaky", 500)
"""

PLACES = {
    "fixture teardown": FIXTURE_TEARDOWN,
    "wholly in teardown": WHOLLY_IN_TEARDOWN,
    "finalizer": FINALIZER,
    "skipped after measuring": SKIPPED_AFTER,
    "xfail": XFAILED,
}


@pytest.mark.parametrize("place", sorted(PLACES))
def test_a_failing_claim_fails_the_session_wherever_it_was_measured(gates, place):
    gates.write("agree", PLACES[place].format(value=250))
    result = gates.run()
    receipt = gates.only_receipt("agree")
    assert [c["verdict"] for c in receipt["claims"]] == ["fail"]
    assert receipt["status"] == "fail"
    assert result.ret != 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*claim 'peak'*"])


@pytest.mark.parametrize("place", ["fixture teardown", "wholly in teardown", "finalizer"])
def test_a_passing_claim_measured_late_passes(gates, place):
    gates.write("agree", PLACES[place].format(value=50))
    result = gates.run()
    assert result.ret == 0, result.stdout.str()
    assert gates.only_receipt("agree")["status"] == "pass"


def test_a_preview_agrees_too(gates):
    gates.write("agree", FIXTURE_TEARDOWN.format(value=250))
    result = gates.run("--gate-no-write")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*NOT PASSED gate 'agree': claim 'peak' fail*"])
    assert not gates.receipts.exists()


def test_a_declaration_after_the_gate_closed_is_refused_not_lost(gates):
    gates.write(
        "agree",
        """
import pytest

HELD = []

@pytest.fixture(autouse=True)
def late(request):
    yield
    HELD[0].claim("late", "never recorded", kind="memory", threshold=Threshold("<=", 1))

def test_step(gate):
    HELD.append(gate)
    c = gate.claim("early", "recorded", kind="memory", threshold=Threshold("<=", 1))
    c.measure(0)
    c.control("broken", 2)
""",
    )
    result = gates.run()
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*gate.claim: gate 'agree' of *test_step is closed*"])
    receipt = gates.only_receipt("agree")
    assert receipt["status"] == "fail" and receipt["run"]["failures"][0]["when"] == "teardown"


def test_a_claim_failed_in_the_call_is_not_reported_twice(gates):
    gates.write(
        "agree",
        """
def test_step(gate):
    c = gate.claim("x", "holds", kind="memory", threshold=Threshold("<=", 1))
    c.measure(5)
    c.control("broken", 2)
""",
    )
    result = gates.run()
    result.assert_outcomes(failed=1, errors=0)
    receipt = gates.only_receipt("agree")
    assert [f["when"] for f in receipt["run"]["failures"]] == ["call"]
    assert receipt["run"]["failures"][0]["verdict"] is True


INTERRUPTED = """
import os
import pytest

def test_mean(gate):
    c = gate.claim("m", "mean is zero", kind="correctness", threshold=Threshold("<=", 0))
    c.measure(int(os.environ.get("MEAN", "0")))
    c.control("shifted", 5)
    if os.environ.get("MEAN"):
        {stop}

def test_later(gate):
    c = gate.claim("later", "holds", kind="correctness", threshold=Threshold("<=", 0))
    c.measure(0)
    c.control("broken", 5)
"""


@pytest.mark.parametrize("stop", ["pytest.exit('stop', returncode=0)", "raise KeyboardInterrupt"])
def test_an_interrupt_in_the_test_that_measured_a_failing_claim_keeps_it(gates, stop, monkeypatch):
    from assay.qualify.judging.standing import gate_standing

    gates.write("agree", INTERRUPTED.format(stop=stop))
    assert gates.run(subprocess=True).ret == 0
    monkeypatch.setenv("MEAN", "1")
    assert gates.run(subprocess=True).ret != 0
    newest = [__import__("json").loads(p.read_text()) for p in gates.receipt_files("agree")][-1]
    assert newest["run"]["partial"] and [c["verdict"] for c in newest["claims"]] == ["fail"]
    assert newest["run"]["failures"][0]["message"].startswith("interrupted: ")
    assert gate_standing(gates.receipts, "agree").status == "fail"


XPASS_STRICT = """
import pytest

@pytest.mark.xfail(strict=True, reason="thought broken")
def test_step(gate):
    c = gate.claim("x", "holds", kind="memory", threshold=Threshold("<=", 1))
    c.measure(0)
    c.control("broken", 2)
"""

XFAIL_RAISES = """
import pytest

@pytest.mark.xfail(reason="known")
def test_step(gate):
    c = gate.claim("x", "holds", kind="memory", threshold=Threshold("<=", 1))
    c.measure(0)
    c.control("broken", 2)
    assert False, "the step raised"
"""


@pytest.mark.parametrize("source", [XPASS_STRICT, XFAIL_RAISES], ids=["strict xpass", "xfail"])
def test_a_test_failure_the_claims_do_not_show_fails_the_receipt_and_the_session(gates, source):
    gates.write("agree", source)
    result = gates.run()
    receipt = gates.only_receipt("agree")
    assert receipt["status"] == "fail"
    assert [f["verdict"] for f in receipt["run"]["failures"]] == [False]
    assert result.ret != 0
    assert "**Status: FAIL**" in (gates.records / "agree.md").read_text("utf-8")


SUBTEST_FAILS = """
def test_step(gate, subtests):
    c = gate.claim("x", "holds", kind="memory", threshold=Threshold("<=", 1))
    c.measure(0)
    c.control("broken", 2)
    with subtests.test(n=2):
        assert False, "one subtest fails"
"""


def test_a_failed_subtest_is_its_tests_outcome(gates):
    pytest.importorskip("_pytest.subtests")  # pytest >= 9 has subtests built in
    gates.write("agree", SUBTEST_FAILS)
    assert gates.run().ret != 0
    receipt = gates.only_receipt("agree")
    assert receipt["status"] == "fail"
    assert [t["outcome"] for t in receipt["run"]["tests"]] == ["failed"]


def test_a_raising_environment_hook_fails_the_session_and_keeps_the_receipt(gates):
    gates.pytester.makeconftest(
        "def pytest_gate_environment(config):\n    raise RuntimeError('numpy missing')\n"
    )
    gates.write("agree", XFAIL_RAISES.replace('    assert False, "the step raised"\n', ""))
    result = gates.run()
    assert result.ret != 0 and "INTERNALERROR" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*pytest_gate_environment raised RuntimeError: numpy missing*"])
    assert gates.only_receipt("agree")["claims"][0]["verdict"] == "pass"


@pytest.mark.parametrize("option", ["--gate-receipts", "--gate-records", "--gate-baseline"])
def test_a_folder_option_naming_a_file_is_one_usage_line(gates, option):
    gates.write("agree", XFAIL_RAISES)
    (gates.pytester.path / "taken.txt").write_text("a file\n")
    result = gates.pytester.runpytest(f"{option}=taken.txt", *map(str, gates.modules))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines([f"*{option} *taken.txt: expected a folder, found a file*"])


RUNS_TWICE = """
RUNS = []

def test_step(gate):
    RUNS.append(1)
    c = gate.claim("x", "holds", kind="memory", threshold=Threshold("<=", 1))
    c.measure(0 if len(RUNS) == 1 else 7)  # the second run misses the bound
    c.control("broken", 2)
"""

LOOP_AGAIN = """
import pytest

@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session):  # a stability check: run everything once more
    result = yield
    for i, item in enumerate(session.items):
        after = session.items[i + 1] if i + 1 < len(session.items) else None
        item.config.hook.pytest_runtest_protocol(item=item, nextitem=after)
    return result
"""


@pytest.mark.parametrize("how", ["conftest repeats the loop", "xdist --dist each"])
def test_a_test_run_again_after_its_receipt_goes_in_a_later_partial_receipt(gates, how):
    if how == "xdist --dist each":
        source = RUNS_TWICE.replace(
            "len(RUNS) == 1", "__import__('os').environ.get('PYTEST_XDIST_WORKER') != 'gw1'"
        )
        gates.write("agree", source)
        result = gates.run("-n", "2", "--dist", "each")
    else:
        gates.pytester.makeconftest(LOOP_AGAIN)
        gates.write("agree", RUNS_TWICE)
        result = gates.run()
    assert result.ret != 0
    receipts = [json.loads(p.read_text()) for p in gates.receipt_files("agree")]
    assert sorted(c["verdict"] for r in receipts for c in r["claims"]) == ["fail", "pass"]
    first, late = receipts  # ledger order: whichever run finished first is complete
    assert "partial" not in first["run"] and "ran again" in late["run"]["partial_reason"]
    assert gate_standing(gates.receipts, "agree").status == "fail"


def test_records_are_never_rendered_from_another_ledger_than_the_one_beside_them(gates, tmp_path):
    """ini gate_records names the published records; a scratch --gate-receipts run would have
    re-rendered them from its own ledger. It is refused in one line, and nothing is written."""
    gates.write("agree", XFAIL_RAISES)
    gates.pytester.makeini("[pytest]\ngate_records = records\n")
    (gates.records / "receipts").mkdir(parents=True)
    scratch = tmp_path / "scratch" / "receipts"
    result = gates.pytester.runpytest(f"--gate-receipts={scratch}", *map(str, gates.modules))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gate-records *records: its records show the receipts in*"])
    assert not scratch.exists() and list(gates.records.iterdir()) == [gates.records / "receipts"]
    no_render = gates.pytester.runpytest(
        f"--gate-receipts={scratch}", "--gate-no-render", *map(str, gates.modules)
    )
    assert no_render.ret != pytest.ExitCode.USAGE_ERROR and scratch.exists()
