"""pytest plugin for gates: the ``gate`` fixture, its options, and receipts as gates finish.

Registered as the pytest11 entry point ``assay_qualify``. Each test of ``gate_<name>.py``
declares claims through the fixture; the declarations ride on the test's teardown report
(so they cross from xdist workers with it), and the process that owns the session writes a
gate's validated receipt and renders its record as soon as the gate's last test finishes.

Start-up is cheap on purpose: this module imports only pytest, the standard library and the
project layout (:mod:`assay.qualify.core.layout`, constants). The gate declaration code,
receipts (jsonschema), records (jinja2) and environment probes load on first use, so a session
without gate tests pays for none of them.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from assay.qualify.core.layout import GATE_MODULE, RECEIPTS_FOLDER, gate_of

GATE = pytest.StashKey[Any]()
OUTCOME = pytest.StashKey[str]()
STATE = pytest.StashKey[Any]()
CHILDREN = pytest.StashKey[Any]()  # this process's ChildImports, once it collected gate tests
MEASURE = pytest.StashKey[Any]()  # this process's executed.Measure, once it saw a gate module
# gate name -> its files, where more than one claims it
CLASHES = pytest.StashKey[dict[str, set[str]]]()
JUDGED = pytest.StashKey[dict[str, str]]()  # claim id -> the verdict the test was already failed on
SELECTION = pytest.StashKey[Any]()  # --gate-select=stale: the gates judged current or not
DIR_OPTIONS = ("--gate-receipts", "--gate-records", "--gate-baseline")


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from assay.qualify.plugin import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("assay gates", "assay gates: qualification receipts and records")
    dirs = (
        ("receipts", "where receipts are appended, one folder per gate", RECEIPTS_FOLDER),
        ("records", "where records are rendered (default: parent of the receipts dir)", None),
        (
            "baseline",
            "fail on regression against the newest complete receipt per gate in DIR;"
            " must not overlap the receipts dir",
            None,
        ),
    )
    for name, text, default in dirs:
        shown = f" (default: {default})" if default else ""
        group.addoption(
            f"--gate-{name}",
            dest=f"gate_{name}",
            metavar="DIR",
            default=None,
            help=f"{text}{shown}. Write --gate-{name}=DIR: in the space form pytest may take DIR "
            "for a test path when it picks the rootdir. Ini: gate_" + name,
        )
        parser.addini(f"gate_{name}", f"{text} (relative to the ini file)", default=default)
    group.addoption(
        "--gate-no-render",
        dest="gate_no_render",
        action="store_true",
        default=False,
        help="write receipts but do not render records (ini: gate_render = false)",
    )
    parser.addini("gate_render", "render records after writing receipts", type="bool", default=True)
    group.addoption(
        "--gate-no-write",
        dest="gate_no_write",
        action="store_true",
        default=False,
        help="try the gates: print each gate's verdict but write no receipt, record or figure",
    )
    group.addoption(
        "--gate-device",
        dest="gate_device",
        choices=("cpu", "cuda", "auto"),
        default=None,
        help="device gates measure on; auto = cuda when the session's torch sees one "
        "(ini: gate_device; default auto)",
    )
    parser.addini("gate_device", "device gates measure on: cpu, cuda or auto", default="auto")
    group.addoption(
        "--gate-select",
        dest="gate_select",
        choices=("all", "stale"),
        default=None,
        help="which gate modules run: all, or stale (only gates whose record on this device is "
        "not current for this tree and environment; the others are listed with the receipt "
        "that keeps them current). Ini: gate_select; default all",
    )
    parser.addini("gate_select", "which gate modules run: all or stale", default="all")
    group.addoption(
        "--gate-provenance",
        dest="gate_provenance",
        metavar="FILE",
        default=None,
        help="JSON naming the commit a tree without .git was made from ({commit, dirty, "
        "tree_sha256}, as the GPU kit writes); used only when git knows no commit",
    )
    parser.addini(
        "gate_project",
        "the project under test, as name or name==version (default: "
        "[project] of the rootdir's pyproject.toml)",
        default="",
    )


def _space_form_outside(config: pytest.Config) -> str | None:
    """The trap of ``--gate-baseline DIR``: pytest picks the rootdir before plugins' options
    are known, so an existing DIR outside the invocation directory counts as a test path,
    moves the rootdir (and loses the ini file). The ``=`` form is one token and is safe."""
    args = [str(a) for a in config.invocation_params.args]
    here = config.invocation_params.dir.resolve()
    for option, value in itertools.pairwise(args):
        if option in DIR_OPTIONS:
            path = (config.invocation_params.dir / value).resolve()
            if path.exists() and here not in [path, *path.parents]:
                return (
                    f"{option} {value}: write {option}={value}; in the space form pytest takes "
                    "the directory for a test path when it picks the rootdir"
                )
    return None


def _not_a_folder(config: pytest.Config) -> str | None:
    """A folder setting that names an existing file, or None."""
    from assay.qualify.plugin.session import setting_dir

    for name in ("gate_receipts", "gate_records", "gate_baseline"):
        path = setting_dir(config, name)
        if path is not None and path.exists() and not path.is_dir():
            return f"--{name.replace('_', '-')} {path}: expected a folder, found a file"
    return None


def _records_of_another_ledger(config: pytest.Config) -> str | None:
    """Records that would be rendered from receipts other than the ones beside them (an ini
    ``gate_records`` with a scratch ``--gate-receipts``), or None."""
    from assay.qualify.plugin.session import no_write, records_dir, render_enabled, setting_dir

    receipts = setting_dir(config, "gate_receipts")
    records = records_dir(config)
    if receipts is None or records is None or no_write(config) or not render_enabled(config):
        return None
    beside = records / "receipts"
    if beside.is_dir() and beside.resolve() != receipts.resolve():
        return (
            f"--gate-records {records}: its records show the receipts in {beside}, but this run "
            f"writes receipts to {receipts}; rendering there would replace them with another "
            "ledger's: pass --gate-records beside those receipts, or --gate-no-render"
        )
    return None


def pytest_configure(config: pytest.Config) -> None:
    trap = (
        _space_form_outside(config) or _not_a_folder(config) or _records_of_another_ledger(config)
    )
    if trap:
        raise pytest.UsageError(trap)
    if config.getoption("gate_baseline", None) or config.getini("gate_baseline"):
        from assay.qualify.judging.baseline import refuse_self_baseline
        from assay.qualify.plugin.session import setting_dir

        baseline = setting_dir(config, "gate_baseline")
        receipts = setting_dir(config, "gate_receipts")
        refusal = refuse_self_baseline(baseline, receipts) if baseline and receipts else None
        if refusal:
            raise pytest.UsageError(refusal)
    provenance = config.getoption("gate_provenance", None)
    if provenance:  # checked now, so a bad file is a usage error, not a collection crash
        from assay.errors import AssayError
        from assay.qualify.plugin.environment import provenance_state

        try:
            provenance_state(config.invocation_params.dir / provenance)
        except AssayError as err:
            raise pytest.UsageError(f"--gate-provenance: {err}") from None
    if not _is_worker(config):
        config.pluginmanager.register(_Reports(config), "assay_gate_reports")
        selection = _selection(config)
        if selection is not None:  # judged before this run writes any receipt
            selection.decide_named()


def _selection(config: pytest.Config) -> Any:
    """This process's :class:`assay.qualify.plugin.select.Selection` under
    ``--gate-select=stale``; None when every gate runs."""
    if SELECTION not in config.stash:
        choice = config.getoption("gate_select", None) or config.getini("gate_select") or "all"
        if choice not in ("all", "stale"):
            raise pytest.UsageError(f"gate_select = {choice!r}: expected all or stale")
        from assay.qualify.plugin.select import Selection

        config.stash[SELECTION] = Selection(config) if choice == "stale" else None
    return config.stash[SELECTION]


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _state(config: pytest.Config) -> Any:
    if STATE not in config.stash:
        from assay.qualify.plugin.session import GateSession

        config.stash[STATE] = GateSession(config)
    return config.stash[STATE]


def _has_gate(nodeids: list[str]) -> bool:
    return any(gate_of(n) for n in nodeids)


def gate_name(path: Path) -> str:
    """The gate's name from its module file ``gate_<name>.py``; AssayError otherwise."""
    match = GATE_MODULE.match(path.name)
    if match is None:
        from assay.errors import AssayError

        raise AssayError(
            f"{path}: the gate fixture needs a module named gate_<name>.py (not gate_README.py: "
            "README is the records index)"
        )
    return match.group(1)


@pytest.fixture
def gate(request: pytest.FixtureRequest) -> Generator[Any, None, None]:
    """The declaration surface of one gate test (see docs/gate-api.md)."""
    from assay.qualify.plugin.environment import resolve_device
    from assay.qualify.plugin.fragment import STARTED, TAKEN, take
    from assay.qualify.plugin.gate import Gate
    from assay.qualify.plugin.session import FRAGMENT_KEY, VERDICT_KEY, clash_line, plain_nodeid

    config = request.config
    node = request.node
    name = gate_name(request.path)
    clash = config.stash.get(CLASHES, {}).get(name)
    if clash:
        pytest.fail(clash_line(name, clash), pytrace=False)
    # a test run again (a rerun plugin) starts clean: its last attempt's report already left
    node.user_properties[:] = [
        p for p in node.user_properties if p[0] not in (FRAGMENT_KEY, VERDICT_KEY)
    ]
    node.stash[JUDGED] = {}
    choice = config.getoption("gate_device", None) or config.getini("gate_device") or "auto"
    g = Gate(name, resolve_device(choice), plain_nodeid(node.nodeid), config.rootpath)
    if choice == "cuda" and g.device != "cuda":
        g.note("asked for --gate-device cuda, but this process saw no CUDA device: measured on cpu")
    g.module(request.path)  # the gate's own source is part of what every claim ran
    node.stash[GATE] = g
    node.stash[STARTED] = time.perf_counter()
    node.stash[TAKEN] = False
    yield g
    if node.stash[TAKEN]:  # interrupted in its own code: the session already holds it
        return
    from assay.qualify.core.threshold import unjudged

    outcome = node.stash.get(OUTCOME, "error")
    children, measure = config.stash.get(CHILDREN, None), config.stash.get(MEASURE, None)
    fragment = take(node, g, outcome, children, measure)
    # rides on the teardown report, which xdist serialises to the controller
    node.user_properties.append((FRAGMENT_KEY, fragment))
    problems = g.stale_code()
    if outcome != "failed":  # a test that raised is failed already
        problems += unjudged(fragment["claims"], node.stash[JUDGED])
    if problems:
        if len(problems) > len(g.stale_code()):
            node.user_properties.append((VERDICT_KEY, "teardown"))
        pytest.fail(f"gate {g.name!r}: " + "; ".join(problems), pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    """Record how the test's own code ended, then fail it on every claim that already fails.
    A claim still waiting for its measurement or controls (a fixture may add them in its
    teardown) is judged when the ``gate`` fixture finishes."""
    declared = item.stash.get(GATE, None)
    if declared is None:
        return (yield)
    try:
        result = yield
    except pytest.skip.Exception:
        item.stash[OUTCOME] = "skipped"
        raise
    except (KeyboardInterrupt, pytest.exit.Exception) as error:
        from assay.qualify.plugin.fragment import keep_interrupted

        item.stash[OUTCOME] = "failed"
        config = item.config
        state = None if _is_worker(config) else _state(config)
        found = config.stash.get(CHILDREN, None), config.stash.get(MEASURE, None)
        keep_interrupted(item, declared, error, state, *found)
        raise
    except BaseException:
        item.stash[OUTCOME] = "failed"
        raise
    item.stash[OUTCOME] = "passed"
    from assay.qualify.core.threshold import explain, judge
    from assay.qualify.plugin.session import VERDICT_KEY

    reasons = []
    for claim in declared.fragment()["claims"]:
        verdict = judge(claim)
        if verdict["verdict"] == "fail":  # final: no later control or measure can change it
            item.stash[JUDGED][claim["id"]] = "fail"
            reasons.append(explain(claim, verdict))
    if reasons:
        item.user_properties.append((VERDICT_KEY, "call"))
        pytest.fail(f"gate {declared.name!r}: " + "; ".join(reasons), pytrace=False)
    return result


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, Any]:
    """The items a gate module produced, read innermost: before ``--lf`` or any plugin's
    wrapper filters the report, so what was left out of the run is known."""
    report = yield
    path = getattr(collector, "path", None)
    if path is not None and GATE_MODULE.match(path.name) and report.result:
        nodeids = [n.nodeid for n in report.result if isinstance(n, pytest.Item)]
        if nodeids:
            _state(collector.config).raw.update(nodeids)
    return report


def pytest_collection_finish(session: pytest.Session) -> None:
    """Where gate tests were collected: children report their imports from now on; gate names
    claimed by two files are refused; a single process records the selected gate tests and
    those left out (and takes the tree state, before any write).

    An xdist worker instead tags each gate test with the tests of its gate that were collected
    and left out: only workers collect, and the tag rides on every report to the controller.
    """
    from assay.qualify.plugin.session import gate_files

    ids = [item.nodeid for item in session.items]
    state = _state(session.config) if (_has_gate(ids) or STATE in session.config.stash) else None
    if state is None:
        return
    lost = state.raw - set(ids)
    clashes = {g: f for g, f in gate_files([*ids, *lost]).items() if len(f) > 1}
    session.config.stash[CLASHES] = clashes
    if not _has_gate(ids):
        return
    _start_child_imports(session.config)
    if _is_worker(session.config):
        _tag_lost(session.items, lost)
        return
    state.expect(ids, lost)


def _start_child_imports(config: pytest.Config) -> None:
    """Children started from here on (module fixtures included) report their imports."""
    from assay.qualify.plugin.child_imports import ChildImports

    if CHILDREN not in config.stash:
        config.stash[CHILDREN] = ChildImports()
        config.stash[CHILDREN].start()


class _CurrentGate(pytest.File):
    """A gate module ``--gate-select=stale`` leaves out: collected as nothing, never imported,
    so it has no tests to count as left out and writes no receipt."""

    def collect(self) -> list[pytest.Item]:
        return []


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> Any:
    """Before a gate module is imported: a gate ``--gate-select=stale`` finds current is
    collected as nothing; otherwise measure what it and its tests execute (once per process;
    :mod:`assay.qualify.plugin.executed` and coverage load only here)."""
    config = parent.config
    match = GATE_MODULE.match(module_path.name)
    selection = _selection(config)
    if match and selection is not None and selection.leaves_out(match.group(1)):
        return _CurrentGate.from_parent(parent, path=module_path)
    if match and MEASURE not in config.stash:
        from assay.qualify.plugin.executed import Measure

        config.stash[MEASURE] = Measure(config)
        config.pluginmanager.register(config.stash[MEASURE], "assay_gate_measure")


def pytest_unconfigure(config: pytest.Config) -> None:
    children = config.stash.get(CHILDREN, None)
    if children is not None:
        children.stop()
    measure = config.stash.get(MEASURE, None)
    if measure is not None:
        measure.close()


def _tag_lost(items: list[pytest.Item], lost: set[str]) -> None:
    from assay.qualify.plugin.session import LOST_KEY

    per_gate: dict[str, list[str]] = {}
    for nodeid in lost:
        gate = gate_of(nodeid)
        if gate is not None:
            per_gate.setdefault(gate, []).append(nodeid)
    for item in items:
        gate = gate_of(item.nodeid)
        if gate is not None:
            item.user_properties.append((LOST_KEY, sorted(per_gate.get(gate, []))))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """xdist controller: every worker collects the same tests; the first list is enough."""
    if _has_gate(ids):
        _state(node.config).expect(list(ids))


class _Reports:
    """Registered in the controlling process: reads gate fragments and failures off reports."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(tryfirst=True)  # before junitxml etc. see the fragment property
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if _has_gate([report.nodeid]):
            _state(self.config).report(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed and _has_gate([report.nodeid]):
            _state(self.config).collect_error(report)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    selection = config.stash.get(SELECTION, None)
    if (
        selection is not None
        and session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED
        and selection.all_current()
    ):  # every named gate is current: selecting none of them is the run's success
        session.exitstatus = pytest.ExitCode.OK
    if _is_worker(config) or STATE not in config.stash:
        return
    state = config.stash[STATE]
    state.finish()
    # a claim that did not pass fails the session, however its test ended (skipped, xfailed,
    # run again, judged in a teardown): pytest agrees with the receipt
    if (state.problems or state.not_passing) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    selection = config.stash.get(SELECTION, None)
    if selection is not None and not _is_worker(config):
        terminalreporter.section("assay gates: --gate-select=stale")
        for decision in selection.decided():
            terminalreporter.line(decision.describe())
    state = config.stash.get(STATE, None)
    if state is None or (not state.written and not state.problems):
        return
    terminalreporter.section("assay gates")
    if config.get_verbosity() >= 0:  # -q: the line per gate alone
        from assay.qualify.plugin.claims_table import claims_table

        for line, bad in claims_table(state.shown):
            terminalreporter.line(line, red=bad)
    for path, status in state.written:
        shown = path if path.startswith("not written") else f"receipt ({status}): {path}"
        terminalreporter.line(shown)
    for line in state.not_passing:
        terminalreporter.line(f"NOT PASSED {line}", red=True)
    for problem in state.problems:
        terminalreporter.line(f"ERROR {problem}", red=True)
