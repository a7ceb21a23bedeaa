"""Staleness: a record whose claims' implementation files, or whose gate file, changed since.

A record is stale when a file the receipt it shows (each device's newest complete run, see
:mod:`assay.qualify.judging.standing`) hashed differs from the working tree (or is gone). Per claim,
the files are the claim's ``code_files`` (else the receipt's ``code.files``) together with the
``executed_files`` its test was measured to run, the ``import_files`` whose import-time code those
rely on and the ``read_files`` it opened (data tables, configs, fixtures). The gate file
``gates/gate_<gate>.py`` is checked on its own as well.

Gates that need a device or a quiet machine cannot be re-run by CI, so for them staleness is
reported without failing. A gate says so with a module-level ``GATE_NEEDS = "device"`` or
``GATE_NEEDS = "quiet-machine"`` in its file (read with ``ast``, never imported); a gate named
in the noxfile's ``TIMING_GATES`` or ``LONG_GATES`` tuple (left out of CI's gate run), or
whose newest receipt ran on CUDA, counts too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assay.qualify.core.git import git_output
from assay.qualify.core.layout import gate_file
from assay.qualify.core.portable import local_path
from assay.qualify.core.source import file_sha256, module_constant, tree_paths

STALE_OPEN = "<!--stale-->"
STALE_CLOSE = "<!--/stale-->"


@dataclass
class Staleness:
    """Why one gate's record is stale, and whether CI can re-run that gate."""

    gate: str
    receipt_sha256: str
    changed: dict[str, list[str]] = field(default_factory=dict)  # path -> claim ids
    gate_file_changed: bool = False
    since: str = "uncommitted changes"
    needs: str | None = None

    @property
    def ci_runs(self) -> bool:
        """True when CI re-runs this gate, so its staleness fails ``verify --stale``."""
        return self.needs is None

    def describe(self) -> str:
        """One line: the record, what changed, since when, and whether it fails."""
        parts = []
        if self.gate_file_changed:
            parts.append(f"gate file {gate_file(self.gate)} changed")
        for path, claims in sorted(self.changed.items()):
            shown = ", ".join(claims[:3]) + (
                f" and {len(claims) - 3} more" if len(claims) > 3 else ""
            )
            parts.append(f"{path} changed (claims: {shown or 'all'})")
        how = "reported only: needs " + self.needs if self.needs else "CI re-runs this gate"
        return (
            f"records/{self.gate}.md: stale since {self.since} "
            f"(receipt {self.receipt_sha256[:12]}): {'; '.join(parts)} [{how}]"
        )


def gate_needs(root: Path, gate: str, receipt: dict[str, Any] | None = None) -> str | None:
    """``device``, ``quiet-machine`` or ``long-run`` when CI does not re-run ``gate``; None when
    it does."""
    source = Path(root) / gate_file(gate)
    found = module_constant(source, "GATE_NEEDS")
    if isinstance(found, str):
        return found
    noxfile = Path(root) / "noxfile.py"
    timing = module_constant(noxfile, "TIMING_GATES")
    if isinstance(timing, (tuple, list)) and gate in timing:
        return "quiet-machine"
    long_running = module_constant(noxfile, "LONG_GATES")
    if isinstance(long_running, (tuple, list)) and gate in long_running:
        return "long-run"
    if receipt is not None and receipt["run"]["device"] == "cuda":
        return "device"
    return None


def _differs(root: Path, entry: dict[str, str]) -> bool:
    target = local_path(entry["path"], root)  # ~/..., <site-packages>/... mapped onto this machine
    return not target.is_file() or file_sha256(target) != entry["sha256"]


def _since(root: Path, commit: str | None, paths: list[str]) -> str:
    """The first commit after ``commit`` touching ``paths``; else 'uncommitted changes'."""
    if commit and paths:
        found = git_output(root, "rev-list", "--reverse", f"{commit}..HEAD", "--", *paths)
        first = (found or "").split()
        if first:
            return first[0][:12]
    return "uncommitted changes"


_LISTS = ("code_files", "executed_files", "import_files", "read_files")


def check_receipt(root: Path, receipt: dict[str, Any]) -> Staleness | None:
    """Staleness of the record headed by ``receipt`` against ``root``; None when current.

    Per claim it checks declared ∪ executed: ``code_files`` (else ``code.files``) and the
    measured ``executed_files`` when the receipt recorded them."""
    gate = receipt["gate"]
    result = Staleness(gate, receipt["receipt_sha256"], needs=gate_needs(root, gate, receipt))
    module = gate_file(gate)
    shared = receipt["code"]["files"]
    # a file no clean checkout holds (a tool's cache, a git-ignored file) is not the tree's:
    # checking it would make the record's standing depend on the machine that reads it
    recorded = {e["path"] for c in receipt["claims"] for k in _LISTS for e in c.get(k) or []}
    in_tree = tree_paths(root, sorted(recorded | {e["path"] for e in shared}))
    for claim in receipt["claims"]:
        # what the claim's test executed (measured, when recorded) on top of what it declared;
        # receipts from before measuring carry no executed_files and keep declared-only
        checked: set[str] = set()
        relied = [claim.get(k, []) for k in _LISTS[1:]]
        for entry in [*(claim.get("code_files") or shared), *(e for r in relied for e in r)]:
            if entry["path"] == module or entry["path"] in checked:
                continue
            if entry["path"] not in in_tree:
                continue
            checked.add(entry["path"])
            if _differs(root, entry):
                result.changed.setdefault(entry["path"], []).append(claim["id"])
    if not receipt["claims"]:
        for entry in shared:
            if entry["path"] != module and entry["path"] in in_tree and _differs(root, entry):
                result.changed.setdefault(entry["path"], [])
    for entry in shared:
        if entry["path"] == module and _differs(root, entry):
            result.gate_file_changed = True
    if not result.changed and not result.gate_file_changed:
        return None
    paths = sorted(result.changed) + ([module] if result.gate_file_changed else [])
    result.since = _since(root, receipt["code"]["commit"], paths)
    return result


def banner(stale: Staleness | None) -> str:
    """The record banner for a stale gate that CI cannot re-run ('' otherwise).

    It is wrapped in STALE_OPEN/STALE_CLOSE to mark it as read from the working tree;
    ``verify`` re-derives it and compares.
    """
    if stale is None or stale.ci_runs:
        return ""
    return (
        f"{STALE_OPEN}\n> **Stale since {stale.since}**: implementation files changed after "
        f"this record's newest receipt; it needs a {stale.needs} run to refresh.\n"
        f"{STALE_CLOSE}\n\n"
    )


def cell(stale: Staleness | None) -> str:
    """The index's stale column for one gate, marked as read from the working tree."""
    if stale is None:
        shown = "current"
    else:
        shown = f"stale since {stale.since}" + ("" if stale.ci_runs else f" (needs {stale.needs})")
    return f"{STALE_OPEN}{shown}{STALE_CLOSE}"


TREE_OPEN = "<!--tree-->"
TREE_CLOSE = "<!--/tree-->"


def from_tree(text: str) -> str:
    """``text`` marked as read from the working tree rather than the receipts; ``verify``
    re-derives every marked span from the tree and compares."""
    return f"{TREE_OPEN}{text}{TREE_CLOSE}"
