"""Which gates must qualify again: a gate whose record is current on this device, for this
tree and this environment, need not run; every other gate does.

:func:`why_run` decides for one gate and is the one rule ``pytest --gate-select=stale`` (and
``nox -s gates-changed``) applies. It reads staleness through
:func:`assay.qualify.judging.stale.check_receipt`, the function ``assay verify --stale`` uses,
so the two never disagree about a file. A gate runs when any of these holds:

- its ledger does not verify, or the project is no git checkout or a shallow clone (its
  history cannot be checked, so whether the record stands cannot be decided);
- it has no complete run on the device, or its record there does not stand at ``pass``;
- a file its newest complete run on the device read differs from the tree or is gone: a
  claim's code, the files its test executed or imported, the data it opened, the gate file
  and its helpers (dirty changes count: the tree is read, not a commit);
- the installed torch, bitsandbytes or transformers, or python's major.minor, differs from
  what that run recorded (a package it recorded as absent is one it does not use).

A gate runs whole or not at all: a gate left out writes no receipt, so completeness and
standing rules are the same as for a gate not named on the command line.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from assay.qualify.core.git import git_output

# environment fields a receipt records that change what a gate measures
VERSIONED = ("torch", "bitsandbytes", "transformers")


@dataclass(frozen=True)
class Decision:
    """One gate's selection: ``reason`` says why it runs (None: current, not run), and
    ``receipt`` names the receipt that keeps it current, or the one it was judged against."""

    gate: str
    reason: str | None
    receipt: str | None = None

    @property
    def runs(self) -> bool:
        return self.reason is not None

    def describe(self) -> str:
        """One line for the session summary."""
        if self.reason is None:
            return f"gate-{self.gate}: current (receipt {self.receipt}), not run"
        return f"gate-{self.gate}: runs: {self.reason}"


def _installed(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _minor(python: str) -> str:
    """``CPython 3.11`` from ``CPython 3.11.7``."""
    name, _, version = python.partition(" ")
    return f"{name} {'.'.join(version.split('.')[:2])}"


def environment_changes(recorded: dict[str, Any]) -> list[str]:
    """What differs between the environment a receipt recorded and this process's: the
    installed versions of :data:`VERSIONED` it recorded, and python's major.minor."""
    changes = []
    for dist in VERSIONED:
        was = recorded.get(dist)
        if was is None:
            continue
        now = _installed(dist)
        if now != was:
            changes.append(f"{dist} {was} -> {now or 'not installed'}")
    here = f"{platform.python_implementation()} {platform.python_version()}"
    was = recorded.get("python")
    if isinstance(was, str) and _minor(was) != _minor(here):
        changes.append(f"python {was} -> {here}")
    return changes


def history_undecidable(root: Path) -> str | None:
    """Why the ledger's git history cannot be checked at ``root`` (no git checkout, a shallow
    clone), or None."""
    shallow = git_output(root, "rev-parse", "--is-shallow-repository")
    if shallow is None:
        return "no git checkout: its ledger's history cannot be checked"
    if shallow.strip() == "true":
        return "a shallow clone: its ledger's history cannot be checked"
    return None


def why_run(receipts_dir: Path, root: Path, gate: str, device: str) -> Decision:
    """Whether ``gate`` must run on ``device`` against the ledger in ``receipts_dir`` and the
    tree at ``root`` (see the module docstring for the rule); never raises for a bad ledger,
    which selects the gate. Records and figures are not read: a run draws them afresh, so a
    copy of the receipts alone (CI's) is judged as the ledger it copies."""
    from assay.qualify.judging.standing import gate_standing

    undecidable = history_undecidable(root)
    if undecidable:
        return Decision(gate, undecidable)
    try:
        standing = gate_standing(receipts_dir, gate, None, root)
    except Exception as exc:  # a ledger that cannot even be read selects its gate
        return Decision(gate, f"its ledger cannot be read ({exc})")
    if standing.problems:
        return Decision(gate, f"its ledger does not verify ({standing.problems[0]})")
    found = next((d for d in standing.devices if d.device == device), None)
    if found is None or found.head is None:
        return Decision(gate, f"no complete run on {device}")
    receipt = found.head["receipt_sha256"][:12]
    if found.status != "pass":
        return Decision(gate, f"its record on {device} stands at {found.status}", receipt)
    if found.stale is not None:
        return Decision(gate, found.stale.describe(), receipt)
    changes = environment_changes(found.head["environment"])
    if changes:
        return Decision(gate, "environment changed: " + "; ".join(changes), receipt)
    return Decision(gate, None, receipt)
