"""A receipt's status, derived from its claims and its tests: never taken on a writer's word.

Every writer of a receipt computes ``status`` with :func:`derive_status`, and every reader
(schema validation, ``verify``, ``import-gpu``, ``attest --verify``, the standing) recomputes
it and refuses a receipt whose recorded status disagrees.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

STATUSES = ("pass", "fail", "inconclusive")


def gate_status(claims: Iterable[dict[str, Any]], outcomes: Iterable[str]) -> str:
    """``fail`` if a claim failed or a test's own code failed or errored; ``inconclusive`` if
    a claim is inconclusive or nothing was claimed; ``pass`` otherwise."""
    claims = list(claims)
    verdicts = {c["verdict"] for c in claims}
    if "fail" in verdicts or any(o in ("failed", "error") for o in outcomes):
        return "fail"
    if "inconclusive" in verdicts or not claims:
        return "inconclusive"
    return "pass"


def own_failures(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The recorded failures of a run that are the tests' own, not a claim's verdict: the
    plugin fails a test whose claim did not pass and says so (``verdict`` true), and the claim
    speaks for it; every other failure is the test's (``verdict`` false: a strict XPASS, a
    teardown error). Receipts from before the mark: a call-phase failure of a test whose own
    code passed was a verdict."""
    passed = {t["nodeid"] for t in run.get("tests") or [] if t["outcome"] == "passed"}
    return [
        f
        for f in run.get("failures") or []
        if (
            not f["verdict"]
            if "verdict" in f
            else not (f["when"] == "call" and f["nodeid"] in passed)
        )
    ]


def run_outcomes(run: dict[str, Any]) -> list[str]:
    """How each test of a run ended, plus ``failed`` for each of its own failures."""
    return [t["outcome"] for t in run.get("tests") or []] + ["failed" for _ in own_failures(run)]


def derive_status(receipt: dict[str, Any]) -> str:
    """The status a receipt's claims and run give (see :func:`gate_status`)."""
    return gate_status(receipt.get("claims") or [], run_outcomes(receipt.get("run") or {}))
