"""pytest plugin for gates: the ``gate`` fixture, xdist transport and receipts at session end.

Registered as the pytest11 entry point ``assay_qualify``. Each test of ``gate_<name>.py``
declares claims through the fixture; the process that owns the session (the xdist controller,
or the single process) merges them into one validated receipt per gate and renders records.
"""

from __future__ import annotations

import re
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from assay.errors import AssayError
from assay.qualify.gate import Gate
from assay.qualify.threshold import explain, judge

FRAGMENTS = pytest.StashKey[list[dict[str, Any]]]()
PROBLEMS = pytest.StashKey[list[str]]()
WRITTEN = pytest.StashKey[list[tuple[str, str]]]()
DEVICE = pytest.StashKey[str]()
GATE = pytest.StashKey[Gate]()
OUTCOME = pytest.StashKey[str]()
WORKER_KEY = "assay_gate_fragments"
GATE_MODULE = re.compile(r"^gate_([A-Za-z0-9_]+)\.py$")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("assay gates", "assay gates: qualification receipts and records")
    group.addoption(
        "--receipts",
        metavar="DIR",
        default="records/receipts",
        help="where receipts are appended, one folder per gate (default: records/receipts)",
    )
    group.addoption(
        "--records",
        metavar="DIR",
        default=None,
        help="where records are rendered (default: parent of --receipts)",
    )
    group.addoption(
        "--gate-device",
        choices=("cpu", "cuda", "auto"),
        default="auto",
        help="device gates measure on; auto = cuda when torch sees one",
    )
    group.addoption(
        "--baseline",
        metavar="DIR",
        default=None,
        help="fail on regression against the newest receipt per gate in DIR",
    )
    group.addoption(
        "--no-render",
        action="store_true",
        default=False,
        help="write receipts but do not render records",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.stash[FRAGMENTS] = []
    config.stash[PROBLEMS] = []
    config.stash[WRITTEN] = []


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _device(config: pytest.Config) -> str:
    if DEVICE not in config.stash:
        from assay.qualify.environment import resolve_device

        config.stash[DEVICE] = resolve_device(config.getoption("gate_device"))
    return config.stash[DEVICE]


def gate_name(path: Path) -> str:
    """The gate's name from its module file ``gate_<name>.py``; AssayError otherwise."""
    match = GATE_MODULE.match(path.name)
    if match is None:
        raise AssayError(f"{path}: the gate fixture needs a module named gate_<name>.py")
    return match.group(1)


@pytest.fixture
def gate(request: pytest.FixtureRequest) -> Generator[Gate, None, None]:
    """The declaration surface of one gate test (see docs/gate-api.md)."""
    config = request.config
    g = Gate(gate_name(request.path), _device(config), request.node.nodeid, config.rootpath)
    g.uses(request.path)  # the gate's own source is part of what was run
    request.node.stash[GATE] = g
    start = time.perf_counter()
    yield g
    fragment = g.fragment()
    fragment["outcome"] = request.node.stash.get(OUTCOME, "error")
    fragment["duration_s"] = time.perf_counter() - start
    # collection order is the same in every xdist worker, so it orders claims stably
    items = request.session.items
    fragment["order"] = items.index(request.node) if request.node in items else len(items)
    config.stash[FRAGMENTS].append(fragment)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    """Record how the test's own code ended, then fail it if any of its claims did not pass."""
    declared = item.stash.get(GATE, None)
    if declared is None:
        return (yield)
    try:
        result = yield
    except pytest.skip.Exception:
        item.stash[OUTCOME] = "skipped"
        raise
    except BaseException:
        item.stash[OUTCOME] = "failed"
        raise
    item.stash[OUTCOME] = "passed"
    reasons = []
    for claim in declared.fragment()["claims"]:
        reasons.append(explain(claim, judge(claim)))
    reasons = [r for r in reasons if r]
    if reasons:
        pytest.fail(f"gate {declared.name!r}: " + "; ".join(reasons), pytrace=False)
    return result


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """xdist controller: collect the fragments a finished worker sent back."""
    output = getattr(node, "workeroutput", None) or {}
    node.config.stash[FRAGMENTS].extend(output.get(WORKER_KEY, []))


def _dir(config: pytest.Config, value: str) -> Path:
    path = Path(value)
    return path if path.is_absolute() else config.invocation_params.dir / path


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    fragments = config.stash.get(FRAGMENTS, [])
    if _is_worker(config):
        config.workeroutput[WORKER_KEY] = fragments  # type: ignore[attr-defined]
        return
    if not fragments:
        return
    from assay.qualify.publish import Options, publish

    receipts = _dir(config, config.getoption("receipts"))
    records_opt = config.getoption("records")
    baseline_opt = config.getoption("baseline")
    options = Options(
        receipts=receipts,
        records=_dir(config, records_opt) if records_opt else receipts.parent,
        baseline=_dir(config, baseline_opt) if baseline_opt else None,
        render=not config.getoption("no_render"),
        device=_device(config),
        argv=[str(a) for a in config.invocation_params.args],
        root=config.rootpath,
    )
    written, problems = publish(fragments, options)
    config.stash[WRITTEN].extend(written)
    config.stash[PROBLEMS].extend(problems)
    if problems and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    written, problems = config.stash.get(WRITTEN, []), config.stash.get(PROBLEMS, [])
    if not written and not problems:
        return
    terminalreporter.section("assay gates")
    for path, status in written:
        terminalreporter.line(f"receipt ({status}): {path}")
    for problem in problems:
        terminalreporter.line(f"ERROR {problem}", red=True)
