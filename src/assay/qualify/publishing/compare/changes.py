"""``assay compare OLD NEW``: what a change did to the claims, read from receipts alone.

For every gate and device on either side, the head receipt (newest complete, as a record
leads with; a receipt file is its own head) is compared claim by claim. Each claim gets the
worst change that applies, in this order:

``flipped to fail`` (passed in OLD, not now), ``regressed`` (worse than OLD by more than the
regression tolerance of either side, the stricter winning, so a side cannot widen its own way
past a regression, and not passing on both sides; a changed unit counts, as nothing then shows
the value is no worse), ``missing`` (in OLD, gone from NEW and not retired by a correction),
``new, not passing``, ``regressed, still passing`` (worse by more than the tolerance, passing
on both sides), ``bound changed`` (operator, bound or tolerance differ), ``retired``, ``new``,
``not comparable`` (a performance claim measured on machines that differ: CPU model, threads,
GPU, or load at the start of the run), ``flipped to pass``, ``improved`` (better by more than
the tolerance), ``within tolerance`` (moved, inside it), ``unchanged``.

A move below float noise (:data:`FLOAT_NOISE` of the larger value: the same number computed
twice, in another summation order) is ``within tolerance``, never a regression.

The first four fail the comparison (exit 1): each is evidence lost or worsened. ``regressed,
still passing`` fails it too when asked (``--fail-on-regression``). So does a gate whose
standing (the one every view shows, git history included) is worse in NEW than in OLD:
a ledger broken by removing a failing receipt cannot pass for an improvement. A gate, or a device of
a gate, with receipts on one side only is listed as unpaired. Arriving in NEW, its claims that do
not pass fail. Vanished from NEW, each of its claims is missing and its standing counts as
fallen, so a gate deleted whole fails the comparison even when it claimed nothing. A run of some
gates is compared as CI does (docs/ci.md): its receipts written on top of a copy of the ledger,
so the gates it left out stay as published.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from assay.errors import AssayError
from assay.qualify.core.threshold import margin, meets, tolerance_base, tolerance_of, worse_than
from assay.qualify.publishing.compare.sides import Side

CHANGES = (
    "flipped to fail",
    "regressed",
    "missing",
    "new, not passing",
    "regressed, still passing",
    "bound changed",
    "retired",
    "new",
    "not comparable",
    "flipped to pass",
    "improved",
    "within tolerance",
    "unchanged",
)
FAILING = frozenset(CHANGES[:4])
# a regression of a claim that passes on both sides: a warning, failing only when asked
WARNING = "regressed, still passing"
# Two floats closer than this fraction of the larger (8 units in the last place of an fp32)
# are one value computed twice; their difference is never a regression.
FLOAT_NOISE = 2.0**-20
# The most two runs' load per CPU thread (1-minute load average at the start of the session,
# over the threads) may differ for their timings to be compared.
LOAD_SPREAD = 0.5


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
    fail_on_regression: bool = False  # a regression still passing fails too

    @property
    def failing(self) -> list[ClaimChange]:
        failing = FAILING | {WARNING} if self.fail_on_regression else FAILING
        return [c for c in self.changes if c.change in failing]

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
            "fail_on_regression": self.fail_on_regression,
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
        "kind": claim.get("kind"),
        "value": value,
        "unit": claim["measurement"].get("unit", ""),
        "op": threshold["op"],
        "bound": threshold["value"],
        "tolerance": list(tolerance_of(threshold)),
        "margin": margin(threshold["op"], threshold["value"], value) if numeric else None,
    }


def float_noise(a: float, b: float) -> bool:
    """True when ``a`` and ``b`` are one float computed twice: not both integers, and apart by
    at most :data:`FLOAT_NOISE` of the larger magnitude."""
    if isinstance(a, int) and isinstance(b, int):
        return False
    return abs(b - a) <= FLOAT_NOISE * max(abs(a), abs(b))


def timing_difference(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """Why the timings of receipts ``old`` and ``new`` cannot be compared, or None: another CPU
    model, thread count, torch thread count or GPU, or loads per thread at the start of the
    run further apart than :data:`LOAD_SPREAD` (or not recorded on a side)."""
    a, b = old["environment"], new["environment"]
    gpus = [(env.get("gpu") or {}).get("name") for env in (a, b)]
    for what, first, second in (
        ("CPU", a["cpu"]["model"], b["cpu"]["model"]),
        ("CPU threads", a["cpu"]["threads"], b["cpu"]["threads"]),
        ("torch threads", a["cpu"]["torch_threads"], b["cpu"]["torch_threads"]),
        ("GPU", *gpus),
    ):
        if first != second:
            return f"{what} {first} in OLD, {second} in NEW"
    loads = [env["cpu"].get("load_per_thread") for env in (a, b)]
    if None in loads:
        unknown = " and ".join(
            side for side, load in zip(("OLD", "NEW"), loads, strict=True) if load is None
        )
        return f"the machine's load was not recorded in {unknown}"
    if abs(loads[0] - loads[1]) > LOAD_SPREAD:
        return f"load per CPU thread {loads[0]:g} in OLD, {loads[1]:g} in NEW"
    return None


def claim_change(
    gate: str,
    device: str,
    cid: str,
    old: dict[str, Any] | None,
    new: dict[str, Any] | None,
    retired: set[str],
    timings_differ: bool = False,
) -> ClaimChange:
    """How claim ``cid`` of ``gate`` on ``device`` changed from ``old`` to ``new`` (either None
    where that side lacks it; ``retired`` holds the ids a dated correction withdrew): the worst
    of :data:`CHANGES` that applies, judged under both sides' thresholds. With
    ``timings_differ`` (:func:`timing_difference`), a performance claim's value is not
    compared: only its verdict and bound are."""
    before = None if old is None else _side_view(old)
    after = None if new is None else _side_view(new)
    row = ClaimChange(gate, device, cid, "unchanged", before, after)
    if before is None or after is None:
        if before is None:  # a claim is on one side at least, so after is not None here
            passing = cast("dict[str, Any]", after)["verdict"] == "pass"
            row.change = "new" if passing else "new, not passing"
        else:
            row.change = "retired" if cid in retired else "missing"
        return row
    found = []
    a, b = before["value"], after["value"]
    timing = "performance" in (before["kind"], after["kind"])
    comparable = not (timing and timings_differ)
    # judged under OLD's bound too: loosening the bound in NEW cannot turn a fail into a pass
    same_unit = before["unit"] == after["unit"]
    fails_old_bound = (
        comparable and same_unit and _number(b) and not meets(before["op"], before["bound"], b)
    )
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
    both_pass = before["verdict"] == after["verdict"] == "pass"
    if not comparable:
        if a != b:
            found.append("not comparable")
    elif before["unit"] != after["unit"] and (a, b) != (None, None):
        found.append("regressed")  # another unit: nothing shows the value is no worse
    elif _number(a) and _number(b):
        # judged under each side's threshold; worse under either is worse: the side under
        # review cannot loosen its own tolerance past a regression
        sides = [(v["op"], *v["tolerance"], v["bound"]) for v in (before, after)]
        noise = float_noise(a, b)
        worse = not noise and any(
            worse_than(op, tol, a, b, bound, mode) for op, mode, tol, bound in sides
        )
        better = not noise and all(
            op != "==" and worse_than(op, tol, b, a, bound, mode) for op, mode, tol, bound in sides
        )
        mode, tol = after["tolerance"]
        base = tolerance_base(mode, a, after["bound"])
        moved = None if base == 0 else (b - a) / base
        row.moved = moved if moved is not None and math.isfinite(moved) else None
        row.tolerance, row.tolerance_mode = tol, mode
        if worse:
            found.append(WARNING if both_pass else "regressed")
        elif better:
            found.append("improved")
        elif a != b:
            found.append("within tolerance")
    elif a != b:
        found.append("regressed" if _number(a) else "within tolerance")
    row.change = min(found, key=CHANGES.index) if found else "unchanged"
    return row


class _Ledgers:
    """Each gate folder's ledger, read once per distinct content: a gate whose files are the
    same bytes on both sides (most gates, between adjacent commits) is loaded and checked once
    and judged under each side's own git history."""

    def __init__(self) -> None:
        self._by_content: dict[tuple[tuple[str, str], ...], Any] = {}

    def ledger(self, side: Side, gate: str) -> Any:
        """The gate's :class:`assay.qualify.judging.loading.Ledger` on ``side``; AssayError
        naming the first file that is not a valid receipt (a comparison never skips one)."""
        from assay.qualify.core.source import file_sha256
        from assay.qualify.judging.loading import load_ledger
        from assay.qualify.ledger.receipt import receipt_filename, receipt_paths

        assert side.receipts_dir is not None
        folder = side.receipts_dir / gate
        content = tuple(sorted((p.name, file_sha256(p)) for p in folder.iterdir() if p.is_file()))
        if content not in self._by_content:
            self._by_content[content] = (folder, load_ledger(side.receipts_dir, gate))
        read_from, found = self._by_content[content]
        if read_from != folder:  # the other side's copy of the same bytes: name this side's
            found = dataclasses.replace(
                found, problems=[p.replace(str(read_from), str(folder)) for p in found.problems]
            )
        valid = {receipt_filename(r) for r in found.receipts}
        for path in receipt_paths(side.receipts_dir, gate):
            if path.name not in valid:  # a comparison never skips a receipt
                why = [p for p in found.problems if p.startswith(f"{path}:")]
                raise AssayError(why[0] if why else f"{path}: not a valid receipt of {gate!r}")
        return found

    def heads(self, side: Side, gate: str) -> dict[str, dict[str, Any]]:
        """device -> the head receipt of ``gate`` on ``side`` (the newest complete one, as a
        record leads with; a receipt file is its own head)."""
        if side.receipt is not None:
            r = side.receipt
            return {r["run"]["device"]: r} if r["gate"] == gate else {}
        from assay.qualify.judging.standing import headline

        by_device: dict[str, list[dict[str, Any]]] = {}
        for receipt in self.ledger(side, gate).receipts:
            by_device.setdefault(receipt["run"]["device"], []).append(receipt)
        return {device: headline(found) for device, found in sorted(by_device.items())}

    def standing(self, side: Side, gate: str, history: Any = None) -> tuple[str | None, set[str]]:
        """(the gate's standing line, starting with its status word; the claims its
        corrections retired) on ``side``; ``history`` is the side's walk, done once for all
        its gates."""
        if side.receipt is not None:
            if side.receipt["gate"] != gate:
                return None, set()
            return f"{side.receipt['status']} (one receipt, not a ledger)", set()
        if gate not in side.gates():
            return None, set()
        from assay.qualify.judging.standing import standing_of
        from assay.qualify.ledger.history import gate_history

        assert side.receipts_dir is not None
        ledger = self.ledger(side, gate)
        walked = history if history is not None else gate_history(side.receipts_dir, gate)
        standing = standing_of(
            gate,
            ledger.receipts,
            [*ledger.problems, *walked.problems_for(gate)],
            erased=ledger.erased,
            acknowledged=ledger.acknowledged,
        )
        retired = {r.claim_id for d in standing.devices for r in d.retired}
        return standing.summary(), retired


def _rank(line: str) -> int:
    """Where a standing line's status word sits in STATUS_ORDER (0: broken, the worst)."""
    from assay.qualify.judging.standing import STATUS_ORDER

    word = next((w for w in STATUS_ORDER if line == w or line.startswith(f"{w}:")), None)
    if word is None:
        word = line.split(" ", 1)[0]  # a lone receipt's status: pass, fail, inconclusive
    return STATUS_ORDER.index(word) if word in STATUS_ORDER else 0


def compare_sides(old: Side, new: Side, *, fail_on_regression: bool = False) -> Comparison:
    """The comparison of ``old`` with ``new``; AssayError naming the file when a receipt on
    either side is invalid (a comparison never skips one). With ``fail_on_regression``, a
    regression of a claim that passes on both sides fails it too."""
    from assay.qualify.ledger.history import check_history

    result = Comparison(old.label, new.label, fail_on_regression=fail_on_regression)
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
    ledgers = _Ledgers()
    for gate in sorted(set(old.gates()) | set(new.gates())):
        old_line, _ = ledgers.standing(old, gate, walks.get("OLD"))
        new_line, retired = ledgers.standing(new, gate, walks.get("NEW"))
        result.standings[gate] = (old_line, new_line)
        if new_line and _rank(new_line) < _rank(old_line or "pass"):
            result.worse_standings.append(gate)  # fell, or arrived below pass
        elif old_line and not new_line:
            result.worse_standings.append(gate)  # vanished whole, claims or none
        before = ledgers.heads(old, gate) if gate in old.gates() else {}
        after = ledgers.heads(new, gate) if gate in new.gates() else {}
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
            differ = timing_difference(before[device], after[device])
            timed = [c for c in [*a.values(), *b.values()] if c.get("kind") == "performance"]
            if differ and timed:
                result.notes.append(f"{gate} ({device}): timings not compared: {differ}")
            for cid in [*a, *(c for c in b if c not in a)]:
                change = claim_change(
                    gate, device, cid, a.get(cid), b.get(cid), retired, differ is not None
                )
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
