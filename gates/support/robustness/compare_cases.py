"""Generated ledger pairs for gate-robustness' compare claim (not a gate module): OLD holds one
complete run of a demo gate, NEW holds OLD's run and a later one in which exactly one thing
happened to one claim, or NEW holds only another gate's run (the demo gate deleted whole). The
oracle is written from docs/ci.md's rule alone: `assay compare` exits 1 when a claim flipped to
fail or went missing (with its gate or alone), and 0 when every claim is unchanged or improved,
moved by float noise only, regressed while still passing (a warning), or is a timing measured on
a machine at another load (not comparable); the claim that changed is named with that change."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from assay.qualify.ledger.chain import write_receipt
from support.faults.tamper_cases import synthetic_receipt

# what happens to the chosen claim in NEW's later run, the change compare must name, and the
# exit code the rule gives
KINDS = {
    "unchanged": ("unchanged", 0),
    "flips": ("flipped to fail", 1),
    "goes": ("missing", 1),
    "improves": ("improved", 0),
    "vanishes": ("missing", 1),  # the whole gate: NEW holds another gate's receipts only
    "noise": ("within tolerance", 0),  # worse by under 2^-20 of itself, tolerance 0
    "sags": ("regressed, still passing", 0),  # worse beyond tolerance 0, inside its bound
    "timing": ("not comparable", 0),  # a timing gone worse, NEW's run at another load
}
QUIET, BUSY = 0.1, 2.0  # load per CPU thread as the runs started


@dataclass(frozen=True)
class Case:
    kind: str
    old: Path
    new: Path
    claim: str


def _claim(cid: str, op: str, bound: float, value: float) -> dict:
    passes = value <= bound if op == "<=" else value >= bound
    return {
        "id": cid,
        "statement": f"generated claim {cid}",
        "kind": "correctness",
        "measurement": {"value": value, "unit": "units"},
        "threshold": {"op": op, "value": bound, "tolerance": 0.0},
        "verdict": "pass" if passes else "fail",
        "margin": bound - value if op == "<=" else value - bound,
        "controls": [
            {
                "name": "broken subject",
                "measured": bound * 10 if op == "<=" else 0.0,
                "failed": True,
            }
        ],
        "test": f"gates/gate_demo.py::test_{cid.replace('.', '_')}",
    }


def _write(
    receipts: Path, second: int, claims: list[dict], gate: str = "demo", load: float = QUIET
) -> None:
    receipt = synthetic_receipt(f"2026-01-01T00:00:{second:02d}Z", 0.0, "0" * 64)
    receipt["environment"]["cpu"]["load_per_thread"] = load
    receipt["gate"] = gate
    receipt["claims"] = claims
    receipt["corrects"] = []
    receipt["run"]["tests"] = [{"nodeid": c["test"], "outcome": "passed"} for c in claims]
    receipt["status"] = "pass" if all(c["verdict"] == "pass" for c in claims) else "fail"
    write_receipt(receipt, receipts)


def _changed(claim: dict, kind: str, rng: random.Random) -> dict | None:
    op, bound = claim["threshold"]["op"], claim["threshold"]["value"]
    value = claim["measurement"]["value"]
    if kind == "goes":
        return None
    if kind == "unchanged":
        return dict(claim)
    if kind == "flips":  # past the bound by 10% to 3x
        factor = rng.uniform(1.1, 3.0)
        return _claim(claim["id"], op, bound, bound * factor if op == "<=" else bound / factor)
    if kind == "noise":  # the same number computed twice: its last bits moved the worse way
        return _claim(
            claim["id"], op, bound, value * (1 + 2.0**-23 if op == "<=" else 1 - 2.0**-23)
        )
    if kind in ("sags", "timing"):  # a fifth to four fifths of the way to its bound
        worse = value + (bound - value) * rng.uniform(0.2, 0.8)
        changed = _claim(claim["id"], op, bound, worse)
        changed["kind"] = claim["kind"]
        return changed
    # improves: half way from its value to the best side, by more than float noise
    better = value * rng.uniform(0.2, 0.6) if op == "<=" else value * rng.uniform(1.5, 3.0)
    return _claim(claim["id"], op, bound, better)


def generate(root: Path, count: int, seed: int) -> list[Case]:
    """``count`` cases, kinds in turn, each a fresh pair of ledgers with 2 to 6 passing claims
    of random bounds, operators and values."""
    rng, cases = random.Random(seed), []
    for index in range(count):
        kind = sorted(KINDS)[index % len(KINDS)]
        claims = []
        for c in range(rng.randint(2, 6)):
            op, bound = rng.choice(("<=", ">=")), 10 ** rng.uniform(-6, 3)
            value = bound * (rng.uniform(0.05, 0.95) if op == "<=" else rng.uniform(1.05, 5))
            claims.append(_claim(f"c{c}.gen", op, bound, value))
        chosen = rng.randrange(len(claims))
        if kind == "timing":
            claims[chosen]["kind"] = "performance"
        later = [c if i != chosen else _changed(c, kind, rng) for i, c in enumerate(claims)]
        old, new = root / f"{index}-old", root / f"{index}-new"
        _write(old, 1, claims)
        if kind == "vanishes":
            _write(new, 1, [_claim("other.gen", "<=", 1.0, 0.5)], gate="other")
        else:
            _write(new, 1, claims)
            load = BUSY if kind == "timing" else QUIET
            _write(new, 2, [c for c in later if c is not None], load=load)
        cases.append(Case(kind, old, new, claims[chosen]["id"]))
    return cases


def misjudged(cases: list[Case], compare) -> list[str]:
    """The cases whose exit code or named change differ from the oracle's; ``compare(old,
    new)`` returns (exit code, the report as ``assay compare --json`` gives it)."""
    wrong = []
    for case in cases:
        code, report = compare(case.old, case.new)
        changes = {c["claim_id"]: c["change"] for c in report.get("claims", [])}
        change, exit_code = KINDS[case.kind]
        if code != exit_code or changes.get(case.claim) != change:
            wrong.append(f"{case.kind}: exit {code}, {case.claim} {changes.get(case.claim)}")
    return wrong


def compare_json(old: Path, new: Path) -> tuple[int, dict]:
    """`assay compare OLD NEW --json` in this process: its exit code and report."""
    import contextlib
    import io

    from assay.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["compare", str(old), str(new), "--json"])
    text = out.getvalue()
    return code, json.loads(text) if text.strip() else {}
