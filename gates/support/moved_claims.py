"""Claims that moved from one gate to another: proved alive where they went, then retired.

When a gate is split, the claims it hands over would show as *missing* in the old gate's record
(an earlier complete receipt held them, the newest does not). A retirement is a ``gate.correct``
entry naming the last receipt that held each claim; it is only honest if the claim really lives
on. So this checks, from the published ledger of the gate the claims moved to, that its newest
complete receipt holds every moved claim with a passing verdict, and fails naming the first one
that does not, before any correction is written; and it corrects only what the ledger being
written has held and not yet retired, because a correction must name a receipt of its own ledger.
"""

from __future__ import annotations

from pathlib import Path

from assay.qualify.judging.loading import load_checked
from assay.qualify.judging.standing import gate_standing
from assay.qualify.ledger.receipt import SHA_FIELD
from assay.qualify.plugin.session import setting_dir

RECEIPTS = Path(__file__).resolve().parents[2] / "records" / "receipts"


def verdicts_in_head(gate_name: str, receipts_dir: Path = RECEIPTS) -> tuple[str, dict[str, str]]:
    """(sha256, {claim id: verdict}) of the newest complete CPU receipt of ``gate_name``.

    Raises AssertionError when the gate has no complete CPU run or its ledger is broken."""
    standing = gate_standing(receipts_dir, gate_name)
    assert not standing.problems, f"gate-{gate_name}: ledger problems {standing.problems[:1]}"
    heads = [d.head for d in standing.devices if d.device == "cpu" and d.head is not None]
    assert heads, f"gate-{gate_name} has no complete cpu receipt to hold the moved claims"
    head = heads[0]
    return head[SHA_FIELD], {c["id"]: c["verdict"] for c in head["claims"]}


def to_retire(
    receipts_dir: Path | None, gate_name: str, claim_ids: tuple[str, ...]
) -> list[tuple[str, str]]:
    """[(claim id, sha256 of the newest complete receipt that held it)] for each of
    ``claim_ids`` that ``gate_name``'s ledger in ``receipts_dir`` has held and does not yet
    retire (no later receipt corrects it). Empty for a ledger that never held them (a fresh
    receipts folder) or that already retires them."""
    if receipts_dir is None or not (Path(receipts_dir) / gate_name / "LEDGER").is_file():
        return []
    receipts, _ = load_checked(Path(receipts_dir), gate_name)
    found = []
    for claim_id in claim_ids:
        holders = [
            i
            for i, r in enumerate(receipts)
            if not r["run"].get("partial") and any(c["id"] == claim_id for c in r["claims"])
        ]
        if not holders:
            continue
        later = receipts[holders[-1] + 1 :]
        if not any(c["claim_id"] == claim_id for r in later for c in r["corrects"]):
            found.append((claim_id, receipts[holders[-1]][SHA_FIELD]))
    return found


def retire_moved_claims(
    gate, to_gate: str, claim_ids: tuple[str, ...], config, receipts_dir: Path = RECEIPTS
) -> str:
    """Check that gate ``to_gate``'s newest complete receipt (published) passes every one of
    ``claim_ids``, then retire those that the ledger this pytest session (``config``) writes
    has held and not yet retired; a line saying what was done.

    A correction must name a receipt of the ledger it is written to, so a session writing a
    fresh folder (CI's regression run) has nothing to retire, and a ledger that already
    retires them needs no second correction."""
    head_sha, verdicts = verdicts_in_head(to_gate, receipts_dir)
    for claim_id in claim_ids:
        verdict = verdicts.get(claim_id, "absent")
        assert verdict == "pass", (
            f"{claim_id}: gate-{to_gate}'s newest receipt {head_sha[:12]} has it {verdict}, "
            "so it cannot be retired here"
        )
    missing = to_retire(setting_dir(config, "gate_receipts"), gate.name, claim_ids)
    for claim_id, last_held_in in missing:
        gate.correct(
            last_held_in,
            claim_id,
            f"moved to gate-{to_gate}, whose receipt {head_sha[:12]} holds it (pass)",
        )
    return (
        f"the newest receipt of gate-{to_gate} ({head_sha[:12]}) passes all {len(claim_ids)} moved "
        f"claims; {len(missing)} retired here (the rest are already retired in, or were never "
        "held by, the ledger this run writes)"
    )


def retire_replaced_claims(gate, claim_ids: tuple[str, ...], reason: str, config) -> str:
    """Retire ``claim_ids`` that a rewrite of this gate replaced by other claims (``reason``
    says by which, and why), in the ledger this pytest session writes; a line saying what was
    done. As for moved claims, only a ledger that held them and does not yet retire them gets
    a correction."""
    missing = to_retire(setting_dir(config, "gate_receipts"), gate.name, claim_ids)
    for claim_id, last_held_in in missing:
        gate.correct(last_held_in, claim_id, reason)
    return f"{len(missing)} of {len(claim_ids)} replaced claims retired here: {reason}"
