"""``assay compare OLD NEW``: what a change did to the claims, read from receipts alone.

For every gate and device on either side, the head receipt (newest complete, as a record
leads with; a receipt file is its own head) is compared claim by claim. Each claim gets the
worst change that applies, in this order:

``flipped to fail`` (passed in OLD, not now), ``regressed`` (worse than OLD by more than the
regression tolerance of either side, the stricter winning, so a side cannot widen its own way
past a regression; a changed unit counts, as nothing then shows the value is no worse),
``missing`` (in OLD, gone from NEW and not retired by a correction), ``new, not passing``,
``bound changed`` (operator, bound or tolerance differ), ``retired``, ``new``, ``flipped to
pass``, ``improved`` (better by more than the tolerance), ``within tolerance`` (moved, inside
it), ``unchanged``.

The first four fail the comparison (exit 1): each is evidence lost or worsened. So does a gate
whose standing (the one every view shows, git history included) is worse in NEW than in OLD:
a ledger broken by removing a failing receipt cannot pass for an improvement. A gate, or a device of
a gate, with receipts on one side only is listed as unpaired. Arriving in NEW, its claims that do
not pass fail. Vanished from NEW, each of its claims is missing and its standing counts as
fallen, so a gate deleted whole fails the comparison even when it claimed nothing. A run of some
gates is compared as CI does (docs/ci.md): its receipts written on top of a copy of the ledger,
so the gates it left out stay as published.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assay.errors import AssayError
from assay.qualify.core.threshold import margin, meets, tolerance_base, tolerance_of, worse_than
from assay.qualify.publishing.compare_sides import Side

CHANGES = (
    "flipped to fail",
    "regressed",
    "missing",
    "new, not passing",
    "bound changed",
    "retired",
    "new",
    "flipped to pass",
    "improved",
    "within tolerance",
    "unchanged",
)
FAILING = frozenset(CHANGES[:4])


@dataclass
class ClaimChange:
    """One claim of one gate on one device, on both sides."""

    gate: str
    device: str
    claim_id: str
    change: str
    old: dict[str, Any] | None
    new: dict[str, Any] | None
    moved: float | None = None  # (new - old) over the tolerance's base, as --gate-baseline
    tolerance: float | None = None
    tolerance_mode: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass
class Comparison:
    """Every claim change (worst first) and each gate's standing on both sides."""

    old_label: str
    new_label: str
    changes: list[ClaimChange] = field(default_factory=list)
    standings: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    # gate/device runs on one side only (a CI run of some gates against a full ledger): not
    # compared claim by claim, and never counted as claims gone missing
    unpaired: list[str] = field(default_factory=list)
    worse_standings: list[str] = field(default_factory=list)  # gates whose standing fell
    notes: list[str] = field(default_factory=list)  # what could not be checked, per side

    @property
    def failing(self) -> list[ClaimChange]:
        return [c for c in self.changes if c.change in FAILING]

    @property
    def ok(self) -> bool:
        """No claim change that fails and no gate whose standing fell."""
        return not self.failing and not self.worse_standings

    def counts(self) -> dict[str, int]:
        found = {name: 0 for name in CHANGES}
        for c in self.changes:
            found[c.change] += 1
        return {k: v for k, v in found.items() if v}

    def as_dict(self) -> dict[str, Any]:
        return {
            "old": self.old_label,
            "new": self.new_label,
            "ok": self.ok,
            "worse_standings": self.worse_standings,
            "counts": self.counts(),
            "claims": [c.as_dict() for c in self.changes],
            "gates": {g: {"old": o, "new": n} for g, (o, n) in sorted(self.standings.items())},
            "unpaired": self.unpaired,
            "notes": self.notes,
        }


def _number(value: Any) -> bool:
    """A measured value or bound arithmetic can use: an int or float that is a finite float
    (a 400-digit integer is not: it overflows every comparison)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _side_view(claim: dict[str, Any]) -> dict[str, Any]:
    value = claim["measurement"].get("value")
    threshold = claim["threshold"]
    for what, number in (("measured value", value), ("bound", threshold["value"])):
        kind = isinstance(number, int | float) and not isinstance(number, bool)
        if kind and not _number(number):
            raise AssayError(
                f"claim {claim['id']!r}: its {what} is not a finite number a comparison can use"
            )
    numeric = _number(value)
    return {
        "verdict": claim["verdict"],
        "value": value,
        "unit": claim["measurement"].get("unit", ""),
        "op": threshold["op"],
        "bound": threshold["value"],
        "tolerance": list(tolerance_of(threshold)),
        "margin": margin(threshold["op"], threshold["value"], value) if numeric else None,
    }


def claim_change(
    gate: str, device: str, cid: str, old: dict | None, new: dict | None, retired: set[str]
) -> ClaimChange:
    """How claim ``cid`` of ``gate`` on ``device`` changed from ``old`` to ``new`` (either None
    where that side lacks it; ``retired`` holds the ids a dated correction withdrew): the worst
    of :data:`CHANGES` that applies, judged under both sides' thresholds."""
    before = None if old is None else _side_view(old)
    after = None if new is None else _side_view(new)
    row = ClaimChange(gate, device, cid, "unchanged", before, after)
    if before is None or after is None:
        if before is None:
            row.change = "new" if after["verdict"] == "pass" else "new, not passing"
        else:
            row.change = "retired" if cid in retired else "missing"
        return row
    found = []
    a, b = before["value"], after["value"]
    # judged under OLD's bound too: loosening the bound in NEW cannot turn a fail into a pass
    same_unit = before["unit"] == after["unit"]
    fails_old_bound = same_unit and _number(b) and not meets(before["op"], before["bound"], b)
    if before["verdict"] == "pass" and (after["verdict"] != "pass" or fails_old_bound):
        found.append("flipped to fail")
    elif before["verdict"] != "pass" and after["verdict"] == "pass":
        found.append("flipped to pass")
    if (before["op"], before["bound"], before["tolerance"], before["unit"]) != (
        after["op"],
        after["bound"],
        after["tolerance"],
        after["unit"],
    ):
        found.append("bound changed")
    if before["unit"] != after["unit"] and (a, b) != (None, None):
        found.append("regressed")  # another unit: nothing shows the value is no worse
    elif _number(a) and _number(b):
        # judged under each side's threshold; worse under either is worse: the side under
        # review cannot loosen its own tolerance past a regression
        sides = [(v["op"], *v["tolerance"], v["bound"]) for v in (before, after)]
        worse = any(worse_than(op, tol, a, b, bound, mode) for op, mode, tol, bound in sides)
        better = all(
            op != "==" and worse_than(op, tol, b, a, bound, mode) for op, mode, tol, bound in sides
        )
        mode, tol = after["tolerance"]
        base = tolerance_base(mode, a, after["bound"])
        moved = None if base == 0 else (b - a) / base
        row.moved = moved if moved is not None and math.isfinite(moved) else None
        row.tolerance, row.tolerance_mode = tol, mode
        if worse:
            found.append("regressed")
        elif better:
            found.append("improved")
        elif a != b:
            found.append("within tolerance")
    elif a != b:
        found.append("regressed" if _number(a) else "within tolerance")
    row.change = min(found, key=CHANGES.index) if found else "unchanged"
    return row


def _heads(side: Side, gate: str) -> dict[str, dict[str, Any]]:
    """device -> the head receipt of ``gate`` on ``side``."""
    if side.receipt is not None:
        r = side.receipt
        return {r["run"]["device"]: r} if r["gate"] == gate else {}
    from assay.qualify.judging.baseline import find_baseline
    from assay.qualify.ledger.receipt import read_receipt, receipt_paths

    assert side.receipts_dir is not None
    paths = receipt_paths(side.receipts_dir, gate)
    devices = sorted({read_receipt(p)["run"]["device"] for p in paths})
    heads = {}
    for device in devices:
        found = find_baseline(side.receipts_dir, gate, device)
        if found is not None:
            heads[device] = found[1]
    return heads


def _standing(side: Side, gate: str, history: Any = None) -> tuple[str | None, set[str]]:
    """(the gate's standing line, starting with its status word; the claims its corrections
    retired) on ``side``; ``history`` is the side's walk, done once for all its gates."""
    if side.receipt is not None:
        if side.receipt["gate"] != gate:
            return None, set()
        return f"{side.receipt['status']} (one receipt, not a ledger)", set()
    if gate not in side.gates():
        return None, set()
    from assay.qualify.judging.standing import gate_standing

    assert side.receipts_dir is not None
    standing = gate_standing(side.receipts_dir, gate, history=history)
    retired = {r.claim_id for d in standing.devices for r in d.retired}
    return standing.summary(), retired


def _rank(line: str) -> int:
    """Where a standing line's status word sits in STATUS_ORDER (0: broken, the worst)."""
    from assay.qualify.judging.standing import STATUS_ORDER

    word = next((w for w in STATUS_ORDER if line == w or line.startswith(f"{w}:")), None)
    if word is None:
        word = line.split(" ", 1)[0]  # a lone receipt's status: pass, fail, inconclusive
    return STATUS_ORDER.index(word) if word in STATUS_ORDER else 0


def compare_sides(old: Side, new: Side) -> Comparison:
    """The comparison of ``old`` with ``new``; AssayError naming the file when a receipt on
    either side is invalid (a comparison never skips one)."""
    from assay.qualify.ledger.history import check_history

    result = Comparison(old.label, new.label)
    walks: dict[str, Any] = {}  # one history walk per side, shared by its gates' standings
    for which, side in (("OLD", old), ("NEW", new)):
        if side.receipts_dir is not None:
            walked = walks[which] = check_history(side.receipts_dir)
            if not walked.checked:  # a shallow clone, say: a rewrite would not show
                shallow = "shallow" in walked.reason
                fix = " (fetch the whole history: fetch-depth: 0)" if shallow else ""
                result.notes.append(
                    f"{which} {side.label}: git history not checked ({walked.reason}); a "
                    f"rewritten ledger would not show{fix}"
                )
    for gate in sorted(set(old.gates()) | set(new.gates())):
        old_line, _ = _standing(old, gate, walks.get("OLD"))
        new_line, retired = _standing(new, gate, walks.get("NEW"))
        result.standings[gate] = (old_line, new_line)
        if new_line and _rank(new_line) < _rank(old_line or "pass"):
            result.worse_standings.append(gate)  # fell, or arrived below pass
        elif old_line and not new_line:
            result.worse_standings.append(gate)  # vanished whole, claims or none
        before, after = _heads(old, gate), _heads(new, gate)
        for device in sorted(set(before) | set(after)):
            if device not in before or device not in after:
                only = "OLD" if device in before else "NEW"
                result.unpaired.append(f"{gate} ({device}): only in {only}")
                for claim in after.get(device, {}).get("claims", []):
                    if claim["verdict"] != "pass":  # arriving failing fails, paired or not
                        row = claim_change(gate, device, claim["id"], None, claim, retired)
                        result.changes.append(row)
                # a gate (or device) that vanished took its claims with it: each is missing
                # unless NEW's corrections retired it, as when one claim is dropped
                for claim in before.get(device, {}).get("claims", []) if only == "OLD" else []:
                    row = claim_change(gate, device, claim["id"], claim, None, retired)
                    result.changes.append(row)
                continue
            a = {c["id"]: c for c in before[device]["claims"]}
            b = {c["id"]: c for c in after[device]["claims"]}
            for cid in [*a, *(c for c in b if c not in a)]:
                change = claim_change(gate, device, cid, a.get(cid), b.get(cid), retired)
                result.changes.append(change)
    result.changes.sort(key=lambda c: (CHANGES.index(c.change), c.gate, c.device, c.claim_id))
    return result


def check_same_kind(old: Side, new: Side) -> None:
    """Two receipt files must be of one gate: otherwise nothing would be compared."""
    if (
        old.receipt is not None
        and new.receipt is not None
        and (old.receipt["gate"] != new.receipt["gate"])
    ):
        raise AssayError(
            f"OLD {old.label} is a receipt of gate {old.receipt['gate']!r} and NEW "
            f"{new.label} one of {new.receipt['gate']!r}: compare receipts of one gate"
        )


def root_of(path: Path) -> Path:
    """The git work tree holding ``path`` (where revisions are looked up), else ``path``."""
    from assay.qualify.core.git import git_output

    found = git_output(path, "rev-parse", "--show-toplevel")
    return Path(found.strip()) if found else path
