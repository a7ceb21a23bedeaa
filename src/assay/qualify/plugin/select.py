"""``--gate-select=stale`` in one pytest process: which gate modules run.

Each process judges the gates it needs with :func:`assay.qualify.judging.select.why_run`,
once per gate, against the ledger as it stood before the run wrote anything: a worker (or a
single process) while it collects, the controlling process at configure time for every gate
module the command line names (for the summary, and for the exit status when nothing was
left to run). Every process reads the same ledger, tree and environment, so they agree.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from assay.qualify.core.layout import GATE_MODULE, RECEIPTS_FOLDER
from assay.qualify.judging.select import Decision, why_run


class Selection:
    """The gates of one session judged current (not run) or not, with the reason."""

    def __init__(self, config: pytest.Config) -> None:
        from assay.qualify.plugin.environment import resolve_device
        from assay.qualify.plugin.session import setting_dir

        self.config = config
        self.receipts = setting_dir(config, "gate_receipts") or config.rootpath / RECEIPTS_FOLDER
        choice = config.getoption("gate_device", None) or config.getini("gate_device") or "auto"
        self.device = resolve_device(choice)
        # the gates the command line names: pytest also shows this hook the siblings of a file
        # named by path, which are not this session's to judge
        self.named = {
            m.group(1) for p in named_gate_modules(config) if (m := GATE_MODULE.match(p.name))
        }
        self._decisions: dict[str, Decision] = {}

    def decide(self, gate: str) -> Decision:
        """Whether ``gate`` runs in this session (judged once, then remembered)."""
        if gate not in self._decisions:
            self._decisions[gate] = why_run(self.receipts, self.config.rootpath, gate, self.device)
        return self._decisions[gate]

    def leaves_out(self, gate: str) -> bool:
        """True when ``gate`` is named by the command line and current (not run)."""
        return gate in self.named and not self.decide(gate).runs

    def decide_named(self) -> None:
        """Judge every gate module the command line names (folders searched, ``--ignore``
        paths left out)."""
        for gate in self.named:
            self.decide(gate)

    def decided(self) -> list[Decision]:
        """The decisions on the named gates, by gate name."""
        return [self.decide(g) for g in sorted(self.named)]

    def all_current(self) -> bool:
        """True when the command line names gates and none of them runs."""
        return bool(self.named) and not any(d.runs for d in self.decided())


def named_gate_modules(config: pytest.Config) -> list[Path]:
    """The ``gate_<name>.py`` files the session's arguments name or hold (their folders
    searched, hidden folders and ``--ignore`` paths skipped)."""
    here = config.invocation_params.dir
    ignored = [(here / p).resolve() for p in config.getoption("ignore", None) or []]
    found: list[Path] = []
    for arg in config.args:
        path = (here / str(arg).split("::", 1)[0]).resolve()
        candidates = [path] if path.is_file() else sorted(path.rglob("gate_*.py"))
        for candidate in candidates:
            relative = candidate.relative_to(path) if candidate != path else Path()
            if any(part.startswith(".") for part in relative.parts[:-1]):
                continue
            if any(candidate == i or i in candidate.parents for i in ignored):
                continue
            if GATE_MODULE.match(candidate.name) and candidate not in found:
                found.append(candidate)
    return found
