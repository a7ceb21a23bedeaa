"""Generated ledgers for gate-robustness' history claims (not a gate module), from issue 52's
rule 4: every run of a ledger has a mark in every view, and receipts no commit holds yet are
named as unchecked.

A ledger here is one claim of gate ``demo`` measured over runs, each run one of: a passing
value, a failing value, ``null`` (a NaN is written as null: no finite value) or the claim
absent. The oracle is written from the rule alone: from the first run with a finite value on,
the claim's figure has one mark per run (a cross for a run with no finite value) and its
sparkline one character per run (``x`` for any run not passing)."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

from assay.qualify.ledger.chain import write_receipt
from support.faults.tamper_cases import synthetic_receipt

BOUND = 1e-3  # synthetic_receipt's claim passes at or under it
RUN_KINDS = ("pass", "fail", "null", "absent")
GIT_IDENTITY = ("user.name=gate", "user.email=gate@example.invalid", "commit.gpgsign=false")


def write_ledger(receipts: Path, runs: list[str | float]) -> None:
    """One receipt per run, in order: a float is the claim's value; ``"null"`` a run with no
    finite value; ``"absent"`` a run without the claim."""
    for i, run in enumerate(runs):
        receipt = synthetic_receipt(f"2026-01-01T00:00:{i:02d}Z", 1e-4, "0" * 64)
        claim = receipt["claims"][0]
        if run == "absent":
            receipt["claims"] = [{**claim, "id": "other"}]
        elif run == "null":
            claim["measurement"]["value"] = None
            claim["verdict"], claim["margin"] = "inconclusive", None
        else:
            claim["measurement"]["value"] = run
            claim["verdict"] = "pass" if run <= BOUND else "fail"
            claim["margin"] = BOUND - run
        receipt["status"] = receipt["claims"][0]["verdict"]
        write_receipt(receipt, receipts)


def generate(rng: random.Random) -> list[str | float]:
    """1 to 12 runs, each a kind of RUN_KINDS, with at least one finite value."""
    runs: list[str | float] = []
    for _ in range(rng.randint(1, 12)):
        kind = rng.choice(RUN_KINDS)
        if kind == "pass":
            runs.append(BOUND * rng.uniform(0.01, 0.99))
        elif kind == "fail":
            runs.append(BOUND * rng.uniform(1.5, 9.0))
        else:
            runs.append(kind)
    if not any(isinstance(r, float) for r in runs):
        runs[rng.randrange(len(runs))] = BOUND / 2
    return runs


def unmarked(receipts: Path, runs: list[str | float]) -> list[str]:
    """What the claim's figure and sparkline show differently from the rule (empty: each run
    from the first finite value on has its mark, at its place)."""
    from assay.qualify.judging.standing import gate_standing
    from assay.qualify.publishing.history import figure_path, history_figures, sparkline

    finite = [i for i, r in enumerate(runs) if isinstance(r, float)]
    standing = gate_standing(receipts, "demo")
    figures = history_figures(standing)
    if not finite:
        return (
            ["a figure for a claim never measured"]
            if figure_path("demo", "diff") in figures
            else []
        )
    shown = runs[finite[0] :]
    problems = []
    svg = figures.get(figure_path("demo", "diff"), "")
    marks = [line for line in svg.splitlines() if line.startswith(("<circle", "<text x"))]
    crosses = sum("no finite value" in m for m in marks)
    circles = sum(m.startswith("<circle") for m in marks)
    if circles + crosses != len(shown):
        problems.append(f"figure: {circles + crosses} marks for {len(shown)} runs")
    if crosses != sum(not isinstance(r, float) for r in shown):
        problems.append(f"figure: {crosses} crosses for the runs without a finite value")
    line = sparkline(standing, "diff")
    expected = ["x" if not isinstance(r, float) or r > BOUND else "" for r in shown[-12:]]
    if len(shown) >= 2 and [c if c == "x" else "" for c in line] != expected:
        problems.append(f"sparkline {line!r} for runs {shown[-12:]}")
    return problems


def misdrawn(root: Path, count: int, seed: int) -> list[str]:
    """``count`` generated ledgers under ``root``; one line per ledger drawn against the rule."""
    rng, wrong = random.Random(seed), []
    for index in range(count):
        runs = generate(rng)
        receipts = root / f"{index}" / "receipts"
        write_ledger(receipts, runs)
        problems = unmarked(receipts, runs)
        if problems:
            wrong.append(f"ledger {index} {runs}: {'; '.join(problems)}")
    return wrong


def _git(root: Path, *args: str) -> None:
    config = [part for setting in GIT_IDENTITY for part in ("-c", setting)]
    subprocess.run(["git", *config, *args], cwd=root, check=True, capture_output=True, timeout=60)


def uncommitted_unnamed(root: Path, fresh: int) -> list[str]:
    """A committed one-run ledger with ``fresh`` later receipts no commit holds; what the
    history check fails to say about them (empty: one note names the gate, their number and
    the newest file)."""
    from assay.qualify.ledger.history import check_history

    receipts = root / "records" / "receipts"
    write_ledger(receipts, [BOUND / 2])
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "the published ledger")
    committed = {p.name for p in (receipts / "demo").glob("*.json")}
    write_ledger(receipts, [BOUND / 2] * fresh)
    # the newest of the uncommitted ones, by name, as the note names it (the committed receipt
    # may share their time stamp and sort after them)
    newest = sorted({p.name for p in (receipts / "demo").glob("*.json")} - committed)[-1]
    notes = [n for n in check_history(receipts).notes if "not committed" in n]
    named = [n for n in notes if "demo" in n and f"{fresh} receipt" in n and newest in n]
    return [] if len(named) == 1 else [f"notes on {fresh} uncommitted receipts: {notes}"]
