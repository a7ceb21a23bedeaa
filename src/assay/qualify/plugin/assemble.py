"""Merge the fragments that each gate test declared into one unsealed receipt."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

from assay.qualify.core.source import file_sha256
from assay.qualify.core.status import derive_status
from assay.qualify.core.threshold import judge
from assay.qualify.ledger.receipt import SCHEMA_ID
from assay.qualify.plugin.provenance import attach as attach_executed


def _unique(items: list[Any]) -> list[Any]:
    seen: list[Any] = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen


def judged_claim(claim: dict[str, Any], nodeid: str) -> dict[str, Any]:
    """A declared claim in receipt form: measurement, threshold, verdict, margin, controls."""
    measurement = claim["measurement"] or {"value": None, "unit": claim["unit"]}
    verdict = judge(claim)
    derived = {"derived": True} if claim.get("derived") else {}
    return {
        **derived,
        "id": claim["id"],
        "statement": claim["statement"],
        "kind": claim["kind"],
        "measurement": measurement,
        "threshold": claim["threshold"],
        "verdict": verdict["verdict"],
        "margin": verdict["margin"],
        "controls": verdict["controls"],
        "test": nodeid,
        **({"code_files": claim["code_files"]} if claim.get("code_files") else {}),
        **{k: claim[k] for k in PROVENANCE if k in claim},
    }


PROVENANCE = ("code_source", "executed_files", "import_files", "read_files", "device")


def figure_name(source: Path, sha: str) -> str:
    """A content-addressed, filesystem-safe name so a figure is never overwritten by another."""
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", source.stem)[:80] or "figure"
    return f"{stem}-{sha[:12]}.png"


def plan_figures(gate: str, fragments: list[dict[str, Any]]) -> list[tuple[Path, dict[str, str]]]:
    """Pairs (source PNG, receipt entry) with entry paths relative to the records directory."""
    planned: list[tuple[Path, dict[str, str]]] = []
    for fragment in fragments:
        for fig in fragment["figures"]:
            source = Path(fig["source"])
            sha = file_sha256(source)
            entry = {
                "path": f"figures/{gate}/{figure_name(source, sha)}",
                "caption": fig["caption"],
                "sha256": sha,
            }
            if fig.get("derived"):
                entry["derived"] = True
            if entry not in [e for _, e in planned]:
                planned.append((source, entry))
    return planned


_WORST_VERDICT = ("fail", "inconclusive", "pass")
_WORST_OUTCOME = ("error", "failed", "skipped", "passed")


def _worst(options: list[str], order: tuple[str, ...]) -> str:
    return min(options, key=lambda o: order.index(o) if o in order else -1)


def _outcome(fragment: dict[str, Any], failures: list[dict[str, Any]] | None) -> str:
    """How a test ended, at least ``failed`` when pytest reported a failure of its own (a
    subtest, a teardown error, an attempt a rerun plugin repeated) after its code returned."""
    own = any(f["nodeid"] == fragment["nodeid"] and not f.get("verdict") for f in failures or [])
    return _worst([fragment["outcome"], "failed"], _WORST_OUTCOME) if own else fragment["outcome"]


def merge_attempts(fragments: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One fragment per test: a test that ran several times in one session (a rerun plugin,
    ``--dist each``) keeps each claim from its worst attempt and the worst way its own code
    ended, so a failure is never erased by trying again; the receipt notes how often it ran."""
    by_node: dict[str, list[dict[str, Any]]] = {}
    for fragment in fragments:
        by_node.setdefault(fragment["nodeid"], []).append(fragment)
    merged = []
    for nodeid, attempts in by_node.items():
        if len(attempts) == 1:
            merged.append(attempts[0])
            continue
        first = dict(attempts[0])
        claims: dict[str, dict[str, Any]] = {}
        for attempt in attempts:
            for claim in attempt["claims"]:
                kept = claims.get(claim["id"])
                verdicts = [judge(claim)["verdict"]] + ([judge(kept)["verdict"]] if kept else [])
                if kept is None or _worst(verdicts, _WORST_VERDICT) != verdicts[-1]:
                    claims[claim["id"]] = claim
        first["claims"] = list(claims.values())
        for key in ("not_tested", "inputs", "figures", "notes", "seeds", "files", "corrects"):
            first[key] = _unique([x for a in attempts for x in a[key]])
        first["notes"].append(
            f"{nodeid} ran {len(attempts)} times in this session; each claim is recorded from "
            "its worst attempt"
        )
        first["outcome"] = _worst([a["outcome"] for a in attempts], _WORST_OUTCOME)
        first["duration_s"] = sum(a["duration_s"] for a in attempts)
        merged.append(first)
    return merged


def duplicate_claims(fragments: list[dict[str, Any]]) -> list[str]:
    """One line per claim id declared by more than one test of the same gate."""
    where: dict[str, list[str]] = {}
    for fragment in fragments:
        for claim in fragment["claims"]:
            where.setdefault(claim["id"], []).append(fragment["nodeid"])
    return [
        f"claim {cid!r} is declared by several tests: {', '.join(nodes)}"
        for cid, nodes in sorted(where.items())
        if len(nodes) > 1
    ]


def build_receipt(
    gate: str,
    fragments: list[dict[str, Any]],
    *,
    figures: list[dict[str, str]],
    code: dict[str, Any],
    environment: dict[str, Any],
    run: dict[str, Any],
    created: str,
    subject: dict[str, Any] | None = None,
    partial: str | None = None,
    failures: list[dict[str, str]] | None = None,
    provenance: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The unsealed receipt for ``gate`` from its tests' fragments (ordered by node id).

    ``run`` supplies argv, nox_session, device; seeds, duration and tests come from the
    fragments. ``baseline`` is left None for the caller to fill. ``subject`` is the project
    under test; ``partial`` says why the run left tests of this gate out (``run.partial``);
    ``failures`` lists tests that failed or raised, each with its exception line; any makes
    the status ``fail``. ``provenance`` (``root``, ``packages``, ``outside``) lets each claim
    record the modules it relied on and the files it read
    (:func:`assay.qualify.plugin.executed.attach`).
    """
    ordered = sorted(fragments, key=lambda f: (f.get("order", 0), f["nodeid"]))
    attach_executed(ordered, **(provenance or {}))  # per claim: what it ran, relied on, read
    claims = [judged_claim(c, f["nodeid"]) for f in ordered for c in f["claims"]]
    extra_run: dict[str, Any] = {}
    if partial:
        extra_run.update(partial=True, partial_reason=partial)
    if failures:
        extra_run["failures"] = failures
    receipt = {
        "schema": SCHEMA_ID,
        "gate": gate,
        "receipt_id": str(uuid.uuid4()),
        "created": created,
        "status": "pending",  # derived below from the claims and the run, never asserted
        "claims": claims,
        "corrects": _unique([c for f in ordered for c in f["corrects"]]),
        "not_tested": _unique([n for f in ordered for n in f["not_tested"]]),
        "inputs": _unique([i for f in ordered for i in f["inputs"]]),
        "figures": figures,
        "notes": _unique([n for f in ordered for n in f["notes"]]),
        "code": code,
        "environment": environment,
        "run": {
            **run,
            "seeds": _unique([s for f in ordered for s in f["seeds"]]),
            "duration_s": round(sum(f["duration_s"] for f in ordered), 6),
            "tests": [{"nodeid": f["nodeid"], "outcome": _outcome(f, failures)} for f in ordered],
            **extra_run,
        },
        "baseline": None,
    }
    if subject is not None:
        receipt["subject"] = subject
    receipt["status"] = derive_status(receipt)
    return receipt
