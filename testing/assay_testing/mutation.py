"""Runs curated mutants: pytest on a mutant's killing node ids in a child process with the fault
armed through ``ASSAY_FAULTS``, and classifies the outcome.

A mutant is ``killed`` only when its killers fail with the fault armed AND pass without it (the
clean run); a killer that fails without any fault makes the mutant ``invalid``, never killed, so
a broken test cannot inflate the kill rate. ``survived``: the killers passed with the fault
armed. ``timeout``: the budget ran out (not counted as killed). ``error``: pytest could not run
the node ids (usage error, nothing collected), also not counted as killed.
"""

from __future__ import annotations

import math
import os
import random
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from assay_testing.defects import child_env

# pytest exit codes: 0 all passed, 1 some failed; anything else means the run itself went wrong.
_PASSED, _FAILED = 0, 1
_OUTCOME = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+)", re.MULTILINE)


def gate_options(scratch: Path) -> list[str]:
    """Options that keep any gate run by a killer from writing under records/ (one place, so a
    rename of the plugin's options is a one-line change here)."""
    return [
        f"--gate-receipts={scratch / 'receipts'}",
        f"--gate-records={scratch / 'records'}",
        "--gate-no-render",
    ]


@dataclass(frozen=True)
class PytestRun:
    """What one child pytest did: exit code (None on timeout), wall time, outcome per node id."""

    returncode: int | None
    wall_s: float
    outcomes: dict[str, str]
    tail: str


def run_pytest(
    nodeids: Sequence[str],
    *,
    faults: str,
    root: Path,
    scratch: Path,
    timeout_s: float,
    first_failure: bool = True,
) -> PytestRun:
    """pytest on ``nodeids`` in a fresh interpreter with ``ASSAY_FAULTS=faults`` (empty: none).

    No xdist, no cache, the project's ``addopts`` cleared (killers may be marked slow), and gate
    receipts redirected to ``scratch``.
    """
    env = child_env(faults)
    env.setdefault("OMP_NUM_THREADS", "1")
    tree = [str(root / "src"), str(root / "testing")]  # this checkout's product and machinery
    env["PYTHONPATH"] = os.pathsep.join([*tree, *filter(None, [env.get("PYTHONPATH")])])
    command = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider"]
    command += ["-p", "no:xdist", "-o", "addopts="]
    if first_failure:
        command.append("-x")
    if any(n.startswith("gates/") for n in nodeids):
        command += gate_options(scratch)
    command += list(nodeids)
    start = time.perf_counter()
    try:
        done = subprocess.run(
            command, cwd=root, env=env, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout if isinstance(exc.stdout, str) else ""
        return PytestRun(None, time.perf_counter() - start, {}, out[-2000:])
    output = done.stdout + done.stderr
    outcomes = {m.group(2): m.group(1) for m in _OUTCOME.finditer(done.stdout)}
    return PytestRun(done.returncode, time.perf_counter() - start, outcomes, output[-2000:])


def covered(outcomes: dict[str, str], killer: str) -> list[str]:
    """Outcomes of the tests a killer node id selects (itself, its parameters, a whole file)."""
    return [
        v
        for k, v in outcomes.items()
        if k == killer or k.startswith(killer + "[") or k.startswith(killer + "::")
    ]


def clean_killers(run: PytestRun, killers: Iterable[str]) -> bool:
    """True when every killer ran in the clean run and none of its tests failed or errored."""
    for killer in killers:
        found = covered(run.outcomes, killer)
        if not found or any(v in ("FAILED", "ERROR") for v in found):
            return False
    return True


def classify(run: PytestRun, clean: bool) -> str:
    """killed | survived | timeout | error | invalid for one mutant run."""
    if not clean:
        return "invalid"
    if run.returncode is None:
        return "timeout"
    if run.returncode == _FAILED:
        return "killed"
    if run.returncode == _PASSED:
        return "survived"
    return "error"


@dataclass(frozen=True)
class MutantResult:
    """One mutant's verdict with what the child pytest printed last."""

    name: str
    verdict: str
    wall_s: float
    returncode: int | None
    tail: str


def run_mutants(
    mutants: Sequence[tuple[str, Sequence[str], float]],
    *,
    root: Path,
    scratch: Path,
    clean: PytestRun,
    jobs: int = 2,
    on_result: Callable[[MutantResult], None] | None = None,
) -> list[MutantResult]:
    """Run each ``(fault name, killers, budget_s)`` with its fault armed, ``jobs`` at a time;
    ``on_result`` sees each result as it finishes (progress)."""

    def one(item: tuple[str, Sequence[str], float]) -> MutantResult:
        name, killers, budget = item
        run = run_pytest(killers, faults=name, root=root, scratch=scratch, timeout_s=budget)
        verdict = classify(run, clean_killers(clean, killers))
        result = MutantResult(name, verdict, run.wall_s, run.returncode, run.tail)
        if on_result is not None:
            on_result(result)
        return result

    with ThreadPoolExecutor(max_workers=max(jobs, 1)) as pool:
        return list(pool.map(one, mutants))


# mutmut 3.8's exit-code meanings (mutmut.stats.status_by_exit_code), the ones counted here.
MUTMUT_KILLED = frozenset({1, 3})
MUTMUT_SURVIVED = frozenset({0})
MUTMUT_TIMEOUT = frozenset({36, -24, 24, 152, 255})
MUTMUT_NO_TESTS = frozenset({5, 33})


def mutmut_score(exit_codes: dict[str, int | None]) -> dict[str, float | int]:
    """Counts and score from mutmut's per-mutant exit codes (None: not checked).

    score = (killed + timeout) / (killed + survived + timeout + no_tests). A mutant that no
    selected test reaches ("no tests") counts as not killed, as in mutmut's own badge: the
    selected tests let it through. Not checked, skipped, suspicious and segfault are counted
    apart (``not_checked``, ``other``) and left out of the score.
    """
    codes = list(exit_codes.values())
    killed = sum(c in MUTMUT_KILLED for c in codes)
    survived = sum(c in MUTMUT_SURVIVED for c in codes)
    timeout = sum(c in MUTMUT_TIMEOUT for c in codes)
    no_tests = sum(c in MUTMUT_NO_TESTS for c in codes)
    not_checked = sum(c is None for c in codes)
    tested = killed + survived + timeout + no_tests
    return {
        "killed": killed,
        "survived": survived,
        "timeout": timeout,
        "no_tests": no_tests,
        "not_checked": not_checked,
        "other": len(codes) - tested - not_checked,
        "tested": tested,
        "total": len(codes),
        "score": round((killed + timeout) / tested, 4) if tested else 0.0,
    }


def sample_order(population: Iterable[str], seed: int) -> list[str]:
    """The mutant names in a seeded uniformly random order, the same for the same set and seed.

    Sorting first makes the order independent of how the names were listed. Every prefix of
    the result is a uniform random sample without replacement of the population, so a run
    that stops early (a time cap) still leaves an unbiased sample: the prefix it finished.
    """
    names = sorted(set(population))
    random.Random(seed).shuffle(names)
    return names


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a proportion ``successes / n`` (z = 1.96: 95%).

    Unlike the normal approximation it stays within [0, 1] and is usable for small n and for
    proportions near 0 or 1. It treats the sample as drawn with replacement, so for a sample
    taken without replacement from a finite population it is slightly conservative (wider).
    n = 0 gives (0, 1): no information.
    """
    if not 0 <= successes <= n:
        raise ValueError(f"wilson_interval: need 0 <= successes <= n, got {successes}, {n}")
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, round(centre - half, 4)), min(1.0, round(centre + half, 4)))
