"""What a reader may be shown about one gate, written from the invariants of docs/records.md alone
(never from assay.qualify.judging): the oracle the state machine checks every view against.

A run is a :class:`Run`: its device, whether it was complete, whether it was later erased under
an acknowledged correction, its claims (id -> verdict and bound), the tests whose own code failed
or passed, and the corrections it declares (claim id, the run it cites).
"""

from __future__ import annotations

from dataclasses import dataclass, field

WORST = ("broken", "fail", "incomplete", "inconclusive", "no complete run", "pass")


@dataclass
class Run:
    device: str
    complete: bool
    claims: dict[str, tuple[str, float]]  # id -> (verdict, upper bound: measured <= bound)
    failed_tests: set[str] = field(default_factory=set)
    passed_tests: set[str] = field(default_factory=set)
    corrects: list[tuple[str, int]] = field(default_factory=list)  # (claim id, cited run index)
    erased: bool = False
    erased_text_kept: bool = True


@dataclass
class Verdict:
    status: str
    facts: set[tuple[str, str]]  # (what, claim id or ""): each must show in every status cell


def _passes_as_strictly(run: Run, claim: str, bound: float) -> bool:
    """I1: a later complete run passes the claim with the same or a stricter bound."""
    verdict = run.claims.get(claim)
    return verdict is not None and verdict[0] == "pass" and verdict[1] <= bound


def _retired(claim: str, runs: list[Run]) -> bool:
    """A claim is retired when, after the last run holding it, a kept run (which no longer
    holds it) declares a correction of it."""
    holding = [i for i, r in enumerate(runs) if claim in r.claims]
    if not holding:
        return False
    later = runs[holding[-1] + 1 :]
    return any(not r.erased and any(c == claim for c, _ in r.corrects) for r in later)


def _device(device: str, runs: list[Run], facts: set[tuple[str, str]]) -> str | None:
    """This device's status (None when it has nothing to say: no complete run and no failure)."""
    mine = [(i, r) for i, r in enumerate(runs) if r.device == device]
    complete = [r for _, r in mine if r.complete and not r.erased]
    head = complete[-1] if complete else None
    unexplained = False
    for n, (i, run) in enumerate(mine):  # I1: failures are never erased
        later = [r for _, r in mine[n + 1 :] if r.complete and not r.erased]
        for claim, (verdict, bound) in run.claims.items():
            if verdict != "fail" or any(_passes_as_strictly(r, claim, bound) for r in later):
                continue
            in_head = head is not None and claim in head.claims
            if not in_head and _retired(claim, runs):
                facts.add(("retired after failing", claim))
            elif (
                in_head
                and head.claims[claim][0] == "pass"
                and any(not r.erased and (claim, i) in r.corrects for r in runs)
            ):
                facts.add(("loosened after failing", claim))
            else:
                unexplained = True
        for test in run.failed_tests:
            if any(test in r.passed_tests and test not in r.failed_tests for r in later):
                continue
            if head is not None and test not in head.passed_tests | head.failed_tests:
                facts.add(("removed after failing", test))
            else:
                unexplained = True
    if unexplained:
        return "fail"
    if head is None:
        return None
    held_before = {c for r in complete[:-1] for c in r.claims}
    missing = False
    for claim in sorted(held_before - set(head.claims)):
        if _retired(claim, runs):
            if ("retired after failing", claim) not in facts:
                facts.add(("retired", claim))
        else:
            missing = True
    if missing:
        return "incomplete"
    if not head.claims or any(v == "inconclusive" for v, _ in head.claims.values()):
        return "inconclusive"
    order = [r for _, r in mine]
    earlier = order[: next(k for k, r in enumerate(order) if r is head)]
    for claim, (_, bound) in head.claims.items():  # I8: a bound change shows
        before = next((r.claims[claim] for r in reversed(earlier) if claim in r.claims), None)
        if before is not None and before[1] != bound:
            facts.add(("bound changed", claim))
    return "pass"


def oracle(runs: list[Run], acknowledged: int = 0, broken: bool = False) -> Verdict:
    """The status and the facts every view must show, from the runs in ledger order."""
    facts: set[tuple[str, str]] = set()
    if broken:
        return Verdict("broken", facts)
    if any(r.erased and not r.erased_text_kept for r in runs):
        facts.add(("text is not kept", ""))  # unknowable, so never a plain pass
    # a run erased without its text is unknowable: it keeps its place, with nothing in it
    runs = [r if r.erased_text_kept else Run(r.device, False, {}, erased=True) for r in runs]
    found = [_device(d, runs, facts) for d in sorted({r.device for r in runs})]
    shown = [s for s in found if s is not None]
    status = min(shown, key=WORST.index) if shown else "no complete run"
    if acknowledged:  # I9: acknowledged changes show in the status cell
        facts.add(("acknowledged ledger rewrite", ""))
    kept = [r for r in runs if not r.erased]
    if any(c in r.claims for r in kept for c, _ in r.corrects):
        facts.add(("correction", ""))
    return Verdict(status, facts)
