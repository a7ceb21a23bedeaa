"""One pytest session's gate bookkeeping, in the process that writes receipts.

Tracks which tests of each gate module were selected and which were left out, gathers the
fragments and failures their reports carry (from xdist workers too), and publishes a gate's
receipt as soon as its last test has finished, so a long gate run keeps what it measured if a
later gate crashes. Whether a run is complete is decided from what pytest did
(:mod:`assay.qualify.plugin.completeness`), never from the command line.
Imported only once a session shows a gate test, so plain pytest sessions never load it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, cast

import pytest

from assay.qualify.core.layout import gate_of

XDIST_GROUP = re.compile(r"@[^\]/:@]+$")
# user properties on a gate test's reports: the fragment it declared; the collected tests of
# its gate left out of the run (an xdist worker sees that, its controller does not); the phase
# in which the plugin failed the test on a claim's verdict (not the test's own code)
FRAGMENT_KEY = "assay_gate_fragment"
LOST_KEY = "assay_gate_lost"
VERDICT_KEY = "assay_gate_verdict"


def plain_nodeid(nodeid: str) -> str:
    """``nodeid`` without the ``@group`` suffix pytest-xdist's ``--dist loadgroup`` appends, so
    receipts name a test the same way whichever scheduler ran it."""
    return XDIST_GROUP.sub("", nodeid)


def gate_files(nodeids: list[str]) -> dict[str, set[str]]:
    """Gate name -> the module files its node ids come from; more than one is a clash."""
    found: dict[str, set[str]] = {}
    for nodeid in nodeids:
        gate = gate_of(nodeid)
        if gate is not None:
            found.setdefault(gate, set()).add(nodeid.split("::", 1)[0])
    return found


def clash_line(gate: str, files: set[str]) -> str:
    """The refusal for two gate files claiming one gate name."""
    return (
        f"gate {gate!r} is claimed by {len(files)} files ({', '.join(sorted(files))}); one gate "
        "name is one gate file: rename one of them"
    )


def exception_line(report: Any) -> str:
    """The one line that says why a test failed: pytest's crash message, else the last line."""
    crash = getattr(report.longrepr, "reprcrash", None)
    message = getattr(crash, "message", None)
    if not message:
        lines = [line for line in str(report.longrepr or "").splitlines() if line.strip()]
        message = lines[-1] if lines else "failed"
    first = message.strip().splitlines()[0] if message.strip() else "failed"
    return first[:500]


def _setting(config: pytest.Config, name: str) -> Any:
    value = config.getoption(name, None)
    return config.getini(name) if value is None else value


def setting_dir(config: pytest.Config, name: str) -> Path | None:
    """A directory setting: the ``--name`` option (relative to the invocation directory), or
    the ini value (relative to the ini file's directory); None when unset."""
    value = config.getoption(name, None)
    if value is not None:
        base = config.invocation_params.dir
    else:
        value = config.getini(name)
        base = config.inipath.parent if config.inipath else config.rootpath
    if not value:
        return None
    path = Path(value)
    return path if path.is_absolute() else base / path


def records_dir(config: pytest.Config) -> Path | None:
    """The folder a session renders its records into: ``gate_records``, else the folder holding
    the receipts folder; None when neither is set."""
    receipts = setting_dir(config, "gate_receipts")
    return setting_dir(config, "gate_records") or (receipts.parent if receipts else None)


def selection_options(config: pytest.Config) -> str:
    """The selection options in effect, for the reader (they decide nothing)."""
    option, shown = config.option, []
    if getattr(option, "keyword", ""):
        shown.append(f"-k {option.keyword!r}")
    if getattr(option, "markexpr", ""):
        shown.append(f"-m {option.markexpr!r}")
    if getattr(option, "deselect", None):
        shown.append("--deselect")
    if getattr(option, "lf", False):
        shown.append("--last-failed")
    if getattr(option, "stepwise", False):
        shown.append("--stepwise")
    return ", ".join(shown)


class GateSession:
    """Receipts of one session: selected and lost tests per gate, fragments, failures,
    publication."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.expected: dict[str, set[str]] | None = None  # selected tests per gate
        self.files: dict[str, set[str]] = {}  # gate -> its module files (one, unless a clash)
        self.raw: set[str] = set()  # collected from gate modules in this process
        self.lost: set[str] = set()  # collected but left out of the run
        self.done: dict[str, set[str]] = {}
        self.verdict: set[str] = set()  # tests that ran to a verdict
        self.again: set[str] = set()  # tests a rerun plugin will run once more
        self.fragments: dict[str, list[dict[str, Any]]] = {}
        self.failures: dict[str, list[dict[str, Any]]] = {}
        self.skipped: dict[str, list[dict[str, str]]] = {}
        self.published: set[str] = set()
        # a gate whose tests ran again after its receipt was written (xdist --dist each, a
        # conftest that repeats the run loop): the new declarations go in a second, partial
        # receipt at the end of the session, never nowhere
        self.late: set[str] = set()
        self.cut: dict[str, tuple[int, int, int]] = {}  # what earlier receipts already hold
        self.written: list[tuple[str, str]] = []
        self.shown: list[dict[str, Any]] = []  # the receipts written (or previewed), for the table
        self.problems: list[str] = []
        self.not_passing: list[str] = []  # claims written (or previewed) that did not pass
        self.tree: dict[str, Any] | None = None
        self.environment: dict[str, Any] | None = None
        from assay.qualify.plugin.environment import load_per_thread

        self.load_at_start = load_per_thread()  # before the gates load the machine themselves

    def expect(self, nodeids: list[str], lost: set[str] | None = None) -> None:
        """Record the selected tests (once) and those left out; take the tree state before
        anything is written."""
        if lost:
            self.lost |= {plain_nodeid(n) for n in lost}
        if self.expected is not None:
            return
        self.expected = {}
        plain = [plain_nodeid(n) for n in nodeids]
        for nodeid in plain:
            gate = gate_of(nodeid)
            if gate is not None:
                self.expected.setdefault(gate, set()).add(nodeid)
        for gate, files in gate_files([*plain, *self.lost]).items():
            self.files.setdefault(gate, set()).update(files)
        if self.expected and self.tree is None:
            from assay.qualify.plugin.environment import provenance_state, tree_state

            self.tree = tree_state(self.config.rootpath)
            provenance = self.config.getoption("gate_provenance", None)
            if self.tree["commit"] is None and provenance:
                self.tree = provenance_state(self.config.invocation_params.dir / provenance)

    def report(self, report: pytest.TestReport) -> None:
        """Take one test report: its fragment, its verdict or failure, and whether its gate
        is done (every selected test torn down for the last time)."""
        gate = gate_of(report.nodeid)
        if gate is None:
            return
        nodeid = plain_nodeid(report.nodeid)
        if gate in self.published and report.when == "setup":
            self.published.discard(gate)
            self.late.add(gate)
        verdict_phases = set()
        for key, value in list(report.user_properties):
            if key == FRAGMENT_KEY:
                report.user_properties.remove((key, value))
                self._fragment(gate, cast("dict[str, Any]", value))  # take()'s fragment
            elif key == LOST_KEY:  # from an xdist worker, which saw the collection
                report.user_properties.remove((key, value))
                self.lost |= set(cast("list[str]", value))  # the worker's sorted node ids
                for file_gate, files in gate_files(list(cast("list[str]", value))).items():
                    self.files.setdefault(file_gate, set()).update(files)
            elif key == VERDICT_KEY:
                verdict_phases.add(value)
        if report.when == "call" or (report.when == "setup" and not report.passed):
            self.verdict.add(nodeid)
        xfailed = report.skipped and getattr(report, "wasxfail", None) is not None
        if report.skipped and not (xfailed and _raised(report)):  # that one is a failure
            self.skipped.setdefault(gate, []).append(
                {"nodeid": nodeid, "reason": skip_reason(report)}
            )
        on_verdict = report.when in verdict_phases and exception_line(report).removeprefix(
            "Failed: "
        ).startswith(f"gate {gate!r}: ")
        # pytest-rerunfailures: this attempt failed, another runs ("rerun" is outside the
        # outcomes pytest's annotations allow)
        if report.outcome == "rerun":  # type: ignore[comparison-overlap]
            self.again.add(nodeid)
            self._failure(gate, nodeid, report, "failed, then run again: ", verdict=on_verdict)
        elif report.failed:
            self._failure(gate, nodeid, report, "", verdict=on_verdict)
        elif xfailed and _raised(report):  # it raised, as marked: still a failure here
            self._failure(gate, nodeid, report, "xfailed: ", verdict=on_verdict)
        if report.when == "teardown":
            if nodeid in self.again:  # the next attempt's teardown is the last one
                self.again.discard(nodeid)
                return
            self.done.setdefault(gate, set()).add(nodeid)
            expected = (self.expected or {}).get(gate)
            if expected is not None and expected <= self.done[gate] and gate not in self.late:
                self.write_gate(gate)

    def _fragment(self, gate: str, fragment: dict[str, Any]) -> None:
        if gate in self.published:  # declared after the receipt: it goes in a later one
            self.published.discard(gate)
            self.late.add(gate)
        self.fragments.setdefault(gate, []).append(fragment)

    def _failure(
        self, gate: str, nodeid: str, report: Any, prefix: str, *, verdict: bool = False
    ) -> None:
        entry: dict[str, Any] = {
            "nodeid": nodeid,
            "when": report.when,
            "message": (prefix + exception_line(report))[:500],
            "verdict": verdict,
        }
        self.failures.setdefault(gate, []).append(entry)

    def collect_error(self, report: Any) -> None:
        """A gate module that failed to collect: its gate fails, in a partial receipt."""
        nodeid = plain_nodeid(report.nodeid)
        gate = gate_of(nodeid)
        if gate is None:
            return
        self.failures.setdefault(gate, []).append(
            {
                "nodeid": nodeid,
                "when": "collect",
                "message": exception_line(report),
                "verdict": False,
            }
        )

    def partial_reason(self, gate: str) -> str | None:
        """Why this run does not stand for the whole gate, or None for a complete run."""
        from assay.qualify.plugin.completeness import never_collected, partial_reasons

        selected = (self.expected or {}).get(gate, set())
        lost = {n for n in self.lost if gate_of(n) == gate}
        collected = [*selected, *lost]
        reasons = partial_reasons(
            selected=selected,
            lost=lost,
            never=never_collected(self.config.rootpath, collected, self.config),
            without_verdict=selected - self.verdict,
            options=selection_options(self.config),
        )
        if any(f["when"] == "collect" for f in self.failures.get(gate, [])):
            reasons.append("the gate module failed to collect")
        if gate in self.late:
            reasons.append(
                "its tests ran again, or declared claims, after the gate's receipt of this "
                "session was written: this receipt holds what came after"
            )
        return "; ".join(reasons) or None

    def _unpublished(self, gate: str) -> tuple[list[Any], list[Any], list[Any]]:
        """The gate's fragments, failures and skips no receipt of this session holds yet; from
        now on, the receipt being written holds them."""
        start = self.cut.get(gate, (0, 0, 0))
        fragments = self.fragments.get(gate, [])
        failures = self.failures.get(gate, [])
        skipped = self.skipped.get(gate, [])
        self.cut[gate] = (len(fragments), len(failures), len(skipped))
        return fragments[start[0] :], failures[start[1] :], skipped[start[2] :]

    def write_gate(self, gate: str) -> None:
        """Write the gate's receipt and render its record (once per gate per session)."""
        if gate in self.published:
            return
        self.published.add(gate)
        if len(self.files.get(gate, ())) > 1:
            self.problems.append(f"receipt not written: {clash_line(gate, self.files[gate])}")
            return
        fragments, failures, skipped = self._unpublished(gate)
        seen = {f["nodeid"] for f in fragments}
        for failure in failures:
            if failure["nodeid"] not in seen:  # raised before declaring: still the gate's test
                seen.add(failure["nodeid"])
                fragments.append(_empty_fragment(gate, failure["nodeid"]))
        if not fragments:
            return
        from assay.qualify.core.source import module_constant
        from assay.qualify.plugin.environment import (
            describe_environment,
            describe_subject,
            resolve_device,
        )
        from assay.qualify.plugin.publish import Options, preview, publish

        config = self.config
        if self.environment is None:
            try:
                found = config.hook.pytest_gate_environment(config=config)
            except (
                Exception
            ) as err:  # a conftest's bug: the receipt is still written, the run fails
                self.problems.append(
                    f"pytest_gate_environment raised {type(err).__name__}: {err}; the receipts "
                    "of this session lack its fields"
                )
                found = []
            self.environment = describe_environment(
                [f for f in found if f], load=self.load_at_start
            )
        receipts = setting_dir(config, "gate_receipts")
        assert receipts is not None  # the ini default is records/receipts
        records = records_dir(config)
        assert records is not None
        device = next((f["device"] for f in fragments if f.get("device")), None)
        options = Options(
            receipts=receipts,
            records=records,
            baseline=setting_dir(config, "gate_baseline"),
            render=render_enabled(config),
            device=device or resolve_device(_setting(config, "gate_device") or "auto"),
            argv=[str(a) for a in config.invocation_params.args],
            root=config.rootpath,
            environment=self.environment,
            tree=self.tree,
            subject=describe_subject(config.rootpath, config.getini("gate_project") or None),
            project=config.getini("gate_project") or None,
            partial={gate: reason} if (reason := self.partial_reason(gate)) else {},
            failures={gate: failures} if failures else {},
        )
        gate_file = next(iter(seen)).split("::", 1)[0]
        headline = module_constant(config.rootpath / gate_file, "HEADLINE")
        options.extras[gate] = {
            "gate_file": gate_file,
            **({"headline_claim": headline} if isinstance(headline, str) else {}),
            **({"skipped": skipped} if skipped else {}),
        }
        if no_write(config):
            shown, not_passing = preview(fragments, options)
            self.written.extend(shown)
            self.not_passing.extend(not_passing)
            self.shown.extend(options.shown)
            return
        written, problems, not_passing = publish(fragments, options)
        self.shown.extend(options.shown)
        self.written.extend(written)
        self.problems.extend(problems)
        self.not_passing.extend(not_passing)

    def finish(self) -> None:
        """Publish the gates whose tests did not all finish (an early stop: partial)."""
        for gate in sorted({*self.fragments, *self.failures}):
            self.write_gate(gate)


def skip_reason(report: Any) -> str:
    """The reason pytest gives for a skip (``skip(reason)``, a mark, a collection hook)."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        reason = str(longrepr[2])
    else:
        reason = str(longrepr or "skipped")
    return reason.removeprefix("Skipped: ").strip()[:500] or "skipped"


def no_write(config: pytest.Config) -> bool:
    """True with ``--gate-no-write``: verdicts are printed, nothing is written."""
    return bool(config.getoption("gate_no_write", False))


def render_enabled(config: pytest.Config) -> bool:
    """False with ``--gate-no-render`` or ini ``gate_render = false``."""
    return not config.getoption("gate_no_render", False) and bool(config.getini("gate_render"))


def _empty_fragment(gate: str, nodeid: str) -> dict[str, Any]:
    from assay.qualify.plugin.gate import blank_fragment

    return {**blank_fragment(gate, nodeid), "outcome": "error", "duration_s": 0.0, "order": 1 << 30}


def _raised(report: pytest.TestReport) -> bool:
    """Whether an xfailed report is a test (or its fixture) that raised, rather than one
    ``xfail(run=False)`` kept from running (pytest marks that ``[NOTRUN]``)."""
    not_run = str(getattr(report, "wasxfail", "")).startswith("[NOTRUN]")
    return report.when in ("setup", "call") and not not_run
