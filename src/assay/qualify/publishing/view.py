"""What a reader sees of one gate, as plain text fields built once from its :class:`Standing`.

The Markdown record and the HTML site page both render this view, so one cannot show a fact
the other leaves out: each template only escapes and lays out the same strings.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from assay.qualify.judging.evidence import bound_text
from assay.qualify.judging.standing import Standing
from assay.qualify.publishing.wording import (
    check_text,
    commit_text,
    counts_text,
    cpu_text,
    date_of,
    gpu_text,
    headline_text,
    measured_text,
    number_text,
    pct,
    plural,
    subject_text,
    threshold_text,
    value_text,
)

if TYPE_CHECKING:
    from assay.qualify.judging.standing import StandingFailure

ENV_COLUMNS = (
    ("torch", "torch"),
    ("bitsandbytes", "bitsandbytes"),
    ("transformers", "transformers"),
    ("cuda", "CUDA"),
    ("cudnn", "cuDNN"),
)


def _env_rows(receipt: dict[str, Any]) -> list[tuple[str, str]]:
    env = receipt["environment"]
    rows = [("Device", receipt["run"]["device"]), ("CPU", cpu_text(env))]
    if env.get("gpu"):
        rows.append(("GPU", gpu_text(env)))
    rows.append(("Python", env["python"]))
    rows += [(label, str(env[key])) for key, label in ENV_COLUMNS if env.get(key) is not None]
    rows.append(("OS", env["os"]))
    return rows


def _verdict(standing: Standing, claim: dict[str, Any], receipt: dict[str, Any]) -> str:
    shown = claim["verdict"]
    if claim["margin"] is not None:
        shown += f" (margin {'+' if claim['margin'] >= 0 else ''}{number_text(claim['margin'])})"
    parts = [shown]
    device = standing.device(receipt["run"]["device"])
    for b in device.bounds if device is not None and device.head is receipt else []:
        if b.claim_id == claim["id"]:
            parts.append(f"bound changed from {b.before} (receipt {b.receipt[:12]})")
    for c in receipt["corrects"]:
        if c["claim_id"] == claim["id"]:
            parts.append(f"corrects receipt {c['receipt_sha256'][:12]}: {c['reason']}")
    for later in standing.receipts:
        for c in later["corrects"]:
            if c["receipt_sha256"] == receipt["receipt_sha256"] and c["claim_id"] == claim["id"]:
                parts.append(
                    f"corrected {date_of(later['created'])} by receipt "
                    f"{later['receipt_sha256'][:12]}: {c['reason']}"
                )
    return "; ".join(parts)


def _corrections(standing: Standing) -> list[dict[str, str]]:
    by_sha = {r["receipt_sha256"]: r for r in standing.receipts}
    rows = []
    for r in standing.receipts:  # oldest correction first
        for c in r["corrects"]:
            original = by_sha.get(c["receipt_sha256"])
            old = None
            if original is not None:
                old = next((x for x in original["claims"] if x["id"] == c["claim_id"]), None)
            new = next((x for x in r["claims"] if x["id"] == c["claim_id"]), None)
            now = (
                " Now: absent (retired)."
                if new is None
                else f" Now: {measured_text(new)}, {new['verdict']}."
            )
            rows.append(
                {
                    "original": c["receipt_sha256"][:12]
                    + ("" if original is None else f" {date_of(original['created'])}"),
                    "check": f"{c['claim_id']} (receipt not in this ledger)"
                    if old is None
                    else check_text(old),
                    "threshold": "" if old is None else threshold_text(old),
                    "measured": "" if old is None else measured_text(old),
                    "verdict": "" if old is None else old["verdict"],
                    "correction": f"{date_of(r['created'])}, receipt {r['receipt_sha256'][:12]}: "
                    f"{c['reason']}.{now}",
                }
            )
    return rows


def _baseline(receipt: dict[str, Any]) -> dict[str, Any] | None:
    b = receipt.get("baseline")
    if not b:
        return None

    def in_base(row: dict[str, Any], key: str) -> str:
        if row.get("tolerance_mode") == "absolute":
            return "n/a" if row[key] is None else f"{row[key]:+.6g}"
        return pct(row[key])

    rows = [
        {
            "claim": r["claim_id"],
            "baseline": f"{number_text(r['baseline_value'])} ({value_text(r['baseline_verdict'])})",
            "now": f"{number_text(r['value'])} ({value_text(r['verdict'])})",
            "change": in_base(r, "change"),
            "tolerance": in_base(r, "tolerance")
            + (f" {r['tolerance_mode']}" if "tolerance_mode" in r else ""),
            "regressed": "YES" if r["regressed"] else "no",
        }
        for r in b["comparisons"]
    ]
    against = (
        f"Against receipt {b['receipt_sha256'][:12]} of {b['created']}."
        if b["receipt_sha256"]
        else "The baseline directory held no receipt for this gate."
    )
    return {"against": against, "rows": rows, "regressions": list(b["regressions"])}


def _device_rows(standing: Standing) -> list[dict[str, str]]:
    rows = []
    for d in standing.devices:
        head = d.head
        rows.append(
            {
                "device": d.device,
                "status": d.status,
                "why": "; ".join(d.reasons()) or "every claim passed",
                "head": "none (partial runs only)"
                if head is None
                else f"{head['receipt_sha256'][:12]} of {head['created']}",
                "partial": plural(len(d.partial_after), "partial run") + " after it"
                if d.partial_after
                else "none",
            }
        )
    return rows


def _standing_failures(standing: Standing) -> list[dict[str, str]]:
    """One row per device and claim (or test) for the failures that no later complete run
    passed: how many, the first and the last run, every bound they failed under, the claim's
    bound now, and what explains them (each explanation with how many failures it covers)."""
    groups: dict[tuple[str, str], list[StandingFailure]] = {}
    bound_now: dict[tuple[str, str], str] = {}
    for d in standing.devices:
        for c in d.head["claims"] if d.head is not None else []:
            bound_now[(d.device, "claim " + c["id"])] = bound_text(c)
        for sf in d.failures:
            what = ("test " if sf.failure.is_test else "claim ") + sf.failure.key
            groups.setdefault((d.device, what), []).append(sf)
    rows = []
    for (device, what), group in groups.items():
        first, last = group[0].failure, group[-1].failure
        why = Counter(sf.explained or "stands: it fails the gate" for sf in group)
        rows.append(
            {
                "device": device,
                "what": what,
                "count": str(len(group)),
                "first": f"{first.receipt[:12]} of {first.created} ({first.kind})",
                "last": f"{last.receipt[:12]} of {last.created} ({last.kind})"
                if len(group) > 1
                else "the same",
                "bound": " -> ".join(dict.fromkeys(sf.failure.bound or "n/a" for sf in group)),
                "bound_now": bound_now.get(
                    (device, what), "n/a" if what.startswith("test ") else "not claimed now"
                ),
                "now": "; ".join(
                    reason + (f" ({n} of {len(group)})" if len(why) > 1 else "")
                    for reason, n in why.items()
                ),
            }
        )
    return rows


def _acknowledged(standing: Standing) -> list[dict[str, str]]:
    return [
        {
            "line": f"CORRECTIONS:{c.line}",
            "date": c.date,
            "change": f"{c.change} {c.file} in commit {c.commit[:12]}",
            "text": "kept, and weighed"
            if c.content is not None
            else ("not kept" if c.erases_receipt else "n/a"),
            "reason": c.reason,
        }
        for c in standing.acknowledged
    ]


def _history(standing: Standing) -> list[dict[str, str]]:
    from assay.qualify.publishing.history import claim_points, figure_path

    return [
        {"claim": cid, "path": figure_path(standing.gate, cid)}
        for cid in sorted(claim_points(standing))
    ]


def gate_view(standing: Standing) -> dict[str, Any]:
    """Every fact a gate page shows, as plain strings (escaping is the template's job)."""
    head = standing.head
    if head is None:
        raise ValueError(f"gate {standing.gate!r}: no receipts to show")
    partial = [
        {
            "device": d.device,
            "sha": r["receipt_sha256"][:12],
            "created": r["created"],
            "status": r["status"],
            "reason": r["run"].get("partial_reason", "partial"),
        }
        for d in standing.devices
        for r in d.partial_after
    ]
    why = {s["nodeid"]: s["reason"] for s in head["run"].get("skipped") or []}
    claims = [
        {
            "n": i,
            "id": c["id"],
            "check": check_text(c),
            "threshold": threshold_text(c),
            "measured": measured_text(c),
            "verdict": _verdict(standing, c, head),
            "test": c.get("test", ""),
            "code": _code_of(c),
            "device": _device_of(c, head["run"]["device"]),
            "controls": [
                {
                    "name": k["name"],
                    "measured": k.get("non_finite", number_text(k["measured"])),
                    "failed": k["failed"],
                }
                for k in c["controls"]
            ],
        }
        for i, c in enumerate(head["claims"], 1)
    ]
    return {
        "gate": standing.gate,
        "status": standing.status,
        "summary": standing.summary(),
        "problems": list(standing.problems),
        "head_is_partial": bool(head["run"].get("partial")),
        "head_partial_reason": head["run"].get("partial_reason", ""),
        "head_sha": head["receipt_sha256"][:12],
        "head_created": head["created"],
        "head_status": head["status"],
        "counts": counts_text(head),
        "n_receipts": plural(len(standing.receipts), "receipt"),
        "headline": headline_text(head),
        "devices": _device_rows(standing),
        "partial": partial,
        "missing": [
            {
                "device": m.device,
                "claim": m.claim_id,
                "last_seen": f"{m.last_seen[:12]} of {m.last_seen_created}",
                "verdict": m.last_verdict,
                "test": m.test,
            }
            for d in standing.devices
            for m in d.missing
        ],
        "retired": [
            {
                "device": r.device,
                "claim": r.claim_id + (" (after failing)" if r.after_failing else ""),
                "by": f"{r.by[:12]} of {r.created}",
                "reason": r.reason,
            }
            for d in standing.devices
            for r in d.retired
        ],
        "standing_failures": _standing_failures(standing),
        "n_standing_failures": sum(len(d.failures) for d in standing.devices),
        "bounds": [
            {
                "device": d.device,
                "claim": b.claim_id,
                "before": f"{b.before} (receipt {b.receipt[:12]})",
                "after": b.after,
            }
            for d in standing.devices
            for b in d.bounds
        ],
        "acknowledged": _acknowledged(standing),
        "qualifiers": standing.qualifiers(),
        "gate_file": head.get("gate_file", ""),
        "skipped": [
            f"{d.device}: {n}" + (f" ({why[n]})" if n in why else "")
            for d in standing.devices
            for n in d.skipped
        ],
        "subject": subject_text(head),
        "failures": [
            {"nodeid": f["nodeid"], "when": f["when"], "message": f["message"]}
            for f in head["run"].get("failures") or []
        ],
        "environment": _env_rows(head),
        "commit": commit_text(head["code"]),
        "plugin_version": value_text(head["code"]["package_version"]),
        "run": (
            f"{plural(len(head['run']['tests']), 'test')}, {head['run']['duration_s']:.1f} s of "
            "test time, seeds "
            + (", ".join(str(s) for s in head["run"]["seeds"]) or "none recorded")
            + (f", nox session {head['run']['nox_session']}" if head["run"]["nox_session"] else "")
        ),
        "inputs": head["inputs"],
        "files": head["code"]["files"],
        "claims": claims,
        "corrections": _corrections(standing),
        "not_tested": head["not_tested"],
        "notes": head["notes"],
        "figures": head["figures"],
        "history": _history(standing),
        "baseline": _baseline(head),
        "ledger": [
            {
                "created": r["created"],
                "device": r["run"]["device"],
                "machine": gpu_text(r["environment"])
                if r["environment"]["gpu"]
                else r["environment"]["cpu"]["model"],
                "torch": value_text(r["environment"].get("torch")),
                "status": r["status"] + (" (partial)" if r["run"].get("partial") else ""),
                "pass": sum(c["verdict"] == "pass" for c in r["claims"]),
                "fail": sum(c["verdict"] == "fail" for c in r["claims"]),
                "inconclusive": sum(c["verdict"] == "inconclusive" for c in r["claims"]),
                "corrects": ", ".join(sorted({c["receipt_sha256"][:12] for c in r["corrects"]})),
                "link": _link(r),
                "sha": r["receipt_sha256"],
            }
            for r in reversed(standing.receipts)  # newest first, in ledger order
        ],
        "erased": [
            {
                "device": d.device,
                "sha": e.receipt["receipt_sha256"],
                "created": e.receipt["created"],
                "status": e.receipt["status"],
                "by": f"CORRECTIONS:{e.erased_by.line} ({e.erased_by.date})",
            }
            for d in standing.devices
            for e in d.erased
            if e.erased_by is not None
        ],
    }


def _device_of(claim: dict[str, Any], run_device: str) -> str:
    """Where the claim's tensors were: what its test reported; on a CPU run an unreported
    device says nothing (everything there is the CPU)."""
    if claim.get("device"):
        return f"ran on {claim['device']}"
    return "" if run_device == "cpu" else f"device not reported (the run's is {run_device})"


def _code_of(claim: dict[str, Any]) -> str:
    """The claim's declared files, and how many more files its test was measured to run."""
    declared = [f["path"] for f in claim.get("code_files", [])]
    shown = ", ".join(declared)
    if claim.get("code_source") == "declared":
        return shown + " (declared and imported only: measured without the coverage tracer)"
    executed = [f["path"] for f in claim.get("executed_files", []) if f["path"] not in declared]
    if executed:
        shown += f"; measured: {plural(len(executed), 'more file')} executed (see the receipt)"
    return shown


def _link(receipt: dict[str, Any]) -> str:
    link = receipt.get("previous_receipt_sha256", "legacy (ledger order)")
    return "genesis" if link is None else link[:12] if len(link) == 64 else link
