"""gate-mutation: the curated semantic mutants are killed by the tests named for them, and the
mutmut score per core package, as measured by ``nox -s mutants``.

Each curated mutant is a named fault point (``assay.faultpoints``) armed in a child pytest run
over its killing node ids (``assay.testing.mutants``). A mutant counts as killed only when its
killers fail with the fault armed and pass without it. Controls: the same runner with no fault
armed (it must report no kills), and the runner with its clean-run check removed, fed a subject
whose test always fails (it must then report a false kill). The mutmut scores are read from
``records/mutation/mutmut-summary.json``; a package missing there is written as not tested.

Long: about 60 child interpreters. ``nox -s gates`` leaves this gate out (like the timing gates);
run it alone with ``nox -s gate-mutation``. ``ASSAY_MUTATION_JOBS`` sets how many run at once
(default 2); ``ASSAY_MUTANTS`` (comma-separated names) limits the run to some mutants.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from assay.qualify import Threshold
from assay.testing.mutants import MUTANTS, declared_fault_points
from assay.testing.mutation import classify, mutmut_score, run_mutants, run_pytest

ROOT = Path(__file__).resolve().parents[1]
SUMMARY = Path(
    os.environ.get("ASSAY_MUTMUT_SUMMARY", ROOT / "records/mutation/mutmut-summary.json")
)
CORE_PACKAGES = ("storage", "adapters", "train", "stream", "qualify")
KILL_RATE = 0.90
MUTMUT_FLOOR = 0.50  # a package whose tests miss half of the operator mutants is not gated
RUNNER = ("assay.faultpoints", "assay.testing.mutants", "assay.testing.mutation")


def _selected() -> list:
    wanted = [n for n in os.environ.get("ASSAY_MUTANTS", "").split(",") if n]
    return [m for m in MUTANTS if not wanted or m.name in wanted]


def _progress(result) -> None:
    # Seen with `pytest -s`: one line per mutant as it finishes.
    print(f"[mutant] {result.verdict:8} {result.wall_s:6.1f}s {result.name}", flush=True)


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    """Clean run over every killer, then each countable mutant with its fault armed."""
    scratch = tmp_path_factory.mktemp("mutation")
    chosen = _selected()
    runnable = [m for m in chosen if m.counted]
    killers = sorted({k for m in runnable for k in m.killers})
    start = time.perf_counter()
    clean = run_pytest(
        killers, faults="", root=ROOT, scratch=scratch, timeout_s=1200, first_failure=False
    )
    jobs = int(os.environ.get("ASSAY_MUTATION_JOBS", "2"))
    results = run_mutants(
        [(m.name, m.killers, m.budget_s) for m in runnable],
        root=ROOT,
        scratch=scratch,
        clean=clean,
        jobs=jobs,
        on_result=_progress,
    )
    return {
        "chosen": chosen,
        "clean": clean,
        "results": results,
        "wall_s": time.perf_counter() - start,
        "jobs": jobs,
    }


def test_curated_mutants_are_killed(gate, campaign):
    chosen, results, clean = campaign["chosen"], campaign["results"], campaign["clean"]
    gate.uses(*RUNNER, *sorted({m.module for m in chosen}))
    catalog = declared_fault_points()
    counted = [m for m in chosen if m.counted]
    killed = [r for r in results if r.verdict == "killed"]
    # The no-fault control: what the runner reports for every mutant when nothing is armed.
    no_fault = [classify(clean, True) for _ in counted]
    claim = gate.claim(
        "curated.kill_rate",
        f"At least {KILL_RATE:.0%} of the {len(counted)} non-equivalent curated mutants "
        "(named fault points) are killed by the tests named for them",
        kind="correctness",
        threshold=Threshold(">=", KILL_RATE),
        unit="killed / non-equivalent",
    )
    claim.measure(len(killed) / max(len(counted), 1))
    claim.control(
        "the same runner with no fault armed (clean run of every killer)",
        sum(v == "killed" for v in no_fault) / max(len(counted), 1),
    )
    gate.note(
        f"{len(catalog)} fault points declared, {len(chosen)} in this run, {len(counted)} "
        f"counted, {len(killed)} killed; {campaign['jobs']} at a time, "
        f"{campaign['wall_s']:.0f} s in all (clean run {clean.wall_s:.0f} s)."
    )
    for m in chosen:
        if not m.counted:
            gate.note(f"not counted: {m.name} ({m.status}): {m.reason}")
    table = {m.name: m for m in chosen}
    for r in results:
        if r.verdict != "killed":
            gate.note(
                f"survivor: {r.name} ({r.verdict}, exit {r.returncode}, {r.wall_s:.0f} s): "
                f"{catalog.get(r.name, '?')}; not caught by {', '.join(table[r.name].killers)}"
            )


def _always_failing_subject(root: Path) -> str:
    (root / "test_subject.py").write_text("def test_always_fails():\n    assert False\n")
    return "test_subject.py::test_always_fails"


def test_runner_kills_only_against_a_clean_run(gate, tmp_path):
    gate.uses(*RUNNER)
    node = _always_failing_subject(tmp_path)
    args = {"root": tmp_path, "scratch": tmp_path, "timeout_s": 120}
    clean = run_pytest([node], faults="", **args)
    armed = run_pytest([node], faults="storage.nf4.nibble_order", **args)
    claim = gate.claim(
        "runner.false_kills",
        "The mutant runner reports no kill for a subject whose test fails without any fault",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="kills",
    )
    claim.measure(int(classify(armed, clean.outcomes.get(node) == "PASSED") == "killed"))
    claim.control("the runner without its clean-run check", int(classify(armed, True) == "killed"))


def test_mutmut_score_per_package(gate):
    gate.uses(*RUNNER)
    if not SUMMARY.is_file():
        for package in CORE_PACKAGES:
            gate.not_tested(f"mutmut.{package}", f"{SUMMARY.name} absent: run `nox -s mutants`")
        return
    gate.input("mutmut summary", SUMMARY)
    summary = json.loads(SUMMARY.read_text("utf-8"))
    packages = summary["packages"]
    for package, row in sorted(packages.items()):
        claim = gate.claim(
            f"mutmut.{package}",
            f"mutmut {summary['tool_version']} score of {package} "
            f"({', '.join(row['modules'])}) is at least {MUTMUT_FLOOR:.0%}",
            kind="correctness",
            threshold=Threshold(">=", MUTMUT_FLOOR),
            unit="(killed + timeout) / tested",
        )
        counts = mutmut_score(row["exit_codes"])  # recomputed from every mutant's exit code
        assert counts["score"] == row["score"], f"{package}: summary score disagrees with its codes"
        claim.measure(counts["score"])
        unrun = mutmut_score(dict.fromkeys(row["exit_codes"], 0))
        claim.control("the same mutants with every exit code read as survived", unrun["score"])
        gate.note(
            f"mutmut {package}: {row['killed']} killed, {row['survived']} survived, "
            f"{row['timeout']} timeout, {row['not_checked']} not checked of {row['total']}; "
            f"tests: {', '.join(row['tests'])}"
        )
    for package in CORE_PACKAGES:
        if package not in packages:
            gate.not_tested(
                f"mutmut.{package}", "not in the committed mutmut run: " + summary["scope"]
            )
