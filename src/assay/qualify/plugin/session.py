"""One pytest session's gate bookkeeping, in the process that writes receipts.

Tracks which tests of each gate module were collected, gathers the fragments and failures
their reports carry (from xdist workers too), and publishes a gate's receipt as soon as its
last test has finished, so a long gate run keeps what it measured if a later gate crashes.
Imported only once a session shows a gate test, so plain pytest sessions never load it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

GATE_FILE = re.compile(r"^gate_([A-Za-z0-9_]+)\.py$")


XDIST_GROUP = re.compile(r"@[^\]/:@]+$")
# user property an xdist worker puts on each gate test: the node ids deselected from its gate
DESELECTED_KEY = "assay_gate_deselected"


def plain_nodeid(nodeid: str) -> str:
    """``nodeid`` without the ``@group`` suffix pytest-xdist's ``--dist loadgroup`` appends, so
    receipts name a test the same way whichever scheduler ran it."""
    return XDIST_GROUP.sub("", nodeid)


def gate_of(nodeid: str) -> str | None:
    """The gate a test node id belongs to (``gate_<name>.py`` module), or None."""
    match = GATE_FILE.match(nodeid.split("::", 1)[0].rsplit("/", 1)[-1])
    return match.group(1) if match else None


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


class GateSession:
    """Receipts of one session: expected tests per gate, fragments, failures, publication."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.expected: dict[str, set[str]] | None = None
        self.done: dict[str, set[str]] = {}
        self.fragments: dict[str, list[dict[str, Any]]] = {}
        self.failures: dict[str, list[dict[str, str]]] = {}
        self.skipped: dict[str, list[dict[str, str]]] = {}
        self.published: set[str] = set()
        self.deselected: set[str] | None = None  # known only where collection ran here
        self.written: list[tuple[str, str]] = []
        self.problems: list[str] = []
        self.tree: dict[str, Any] | None = None
        self.environment: dict[str, Any] | None = None

    def expect(self, nodeids: list[str]) -> None:
        """Record the collected tests (once); take the tree state before anything is written."""
        if self.expected is not None:
            return
        self.expected = {}
        for nodeid in map(plain_nodeid, nodeids):
            gate = gate_of(nodeid)
            if gate is not None:
                self.expected.setdefault(gate, set()).add(nodeid)
        if self.expected and self.tree is None:
            from assay.qualify.plugin.environment import provenance_state, tree_state

            self.tree = tree_state(self.config.rootpath)
            provenance = self.config.getoption("gate_provenance", None)
            if self.tree["commit"] is None and provenance:
                self.tree = provenance_state(self.config.invocation_params.dir / provenance)

    def report(self, report: pytest.TestReport) -> None:
        """Take one test report: its fragment, its failure, and whether its gate is done."""
        gate = gate_of(report.nodeid)
        if gate is None:
            return
        for key, value in list(report.user_properties):
            if key == "assay_gate_fragment":
                report.user_properties.remove((key, value))
                self.fragments.setdefault(gate, []).append(value)
            elif key == DESELECTED_KEY:  # from an xdist worker, which saw the deselection
                report.user_properties.remove((key, value))
                self.deselected = (self.deselected or set()) | set(value)
        nodeid = plain_nodeid(report.nodeid)
        if report.skipped:
            self.skipped.setdefault(gate, []).append(
                {"nodeid": nodeid, "reason": skip_reason(report)}
            )
        if report.failed:
            self.failures.setdefault(gate, []).append(
                {"nodeid": nodeid, "when": report.when, "message": exception_line(report)}
            )
        if report.when == "teardown":
            self.done.setdefault(gate, set()).add(nodeid)
            expected = (self.expected or {}).get(gate)
            if expected is not None and expected <= self.done[gate]:
                self.publish(gate)

    def partial_reason(self, gate: str) -> str | None:
        """Why this run does not stand for the whole gate, or None for a complete run."""
        option, reasons = self.config.option, []
        lost = self.deselected is None or any(gate_of(n) == gate for n in self.deselected)
        if lost and getattr(option, "keyword", ""):
            reasons.append(f"-k {option.keyword!r}")
        if lost and getattr(option, "deselect", None):
            reasons.append("--deselect")
        args = [str(a) for a in self.config.invocation_params.args]
        if lost and getattr(option, "markexpr", "") and any(a.startswith("-m") for a in args):
            reasons.append(f"-m {option.markexpr!r}")
        if getattr(option, "lf", False):
            reasons.append("--last-failed")
        picked = [a for a in self.config.args if "::" in a and gate_of(a) == gate]
        if picked:
            reasons.append("selected by node id: " + ", ".join(sorted(picked)))
        expected = (self.expected or {}).get(gate, set())
        missing = len(expected - self.done.get(gate, set()))
        if missing:
            reasons.append(f"stopped early: {missing} of its {len(expected)} tests did not run")
        return "; ".join(reasons) or None

    def publish(self, gate: str) -> None:
        """Write the gate's receipt and render its record (once per gate per session)."""
        if gate in self.published:
            return
        self.published.add(gate)
        fragments = self.fragments.get(gate, [])
        seen = {f["nodeid"] for f in fragments}
        for failure in self.failures.get(gate, []):
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
            found = config.hook.pytest_gate_environment(config=config)
            self.environment = describe_environment([f for f in found if f])
        receipts = setting_dir(config, "gate_receipts")
        assert receipts is not None  # the ini default is records/receipts
        records = setting_dir(config, "gate_records") or receipts.parent
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
            partial={gate: reason} if (reason := self.partial_reason(gate)) else {},
            failures={gate: self.failures[gate]} if self.failures.get(gate) else {},
        )
        headline = module_constant(config.rootpath / next(iter(seen)).split("::", 1)[0], "HEADLINE")
        options.extras[gate] = {
            **({"headline_claim": headline} if isinstance(headline, str) else {}),
            **({"skipped": self.skipped[gate]} if self.skipped.get(gate) else {}),
        }
        if no_write(config):
            self.written.extend(preview(fragments, options))
            return
        written, problems = publish(fragments, options)
        self.written.extend(written)
        self.problems.extend(problems)

    def finish(self) -> None:
        """Publish the gates whose tests did not all finish (an early stop: partial)."""
        for gate in sorted({*self.fragments, *self.failures}):
            self.publish(gate)


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
