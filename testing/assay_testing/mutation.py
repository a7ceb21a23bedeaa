"""Runs curated mutants: pytest on a mutant's killing node ids in a child process with the fault
armed through ``ASSAY_FAULTS``, and classifies the outcome.

A mutant is ``killed`` only when its killers fail with the fault armed AND pass without it (the
clean run); a killer that fails without any fault makes the mutant ``invalid``, never killed, so
a broken test cannot inflate the kill rate. ``survived``: the killers passed with the fault
armed. ``timeout``: the budget ran out (not counted as killed). ``error``: pytest could not run
the node ids (usage error, nothing collected), also not counted as killed.

The same mutants are measured against the gates (:func:`run_gate_mutants`): the gate tests
whose claims read the mutant's module (:func:`covering_tests`) run with the fault armed, and
the mutant is ``killed`` only when a gate claim fails in the receipts they write and the failing
tests pass without the fault. A gate test that fails with no claim failing (its own code raised)
is ``errored``, reported apart and not counted as a kill.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from assay_testing.defects import MUTANT_ENV, child_env
from assay_testing.gate_verdicts import StoredVerdict, VerdictStore, claim_files, now, verdict_key

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
    extra_env: Mapping[str, str] | None = None,
    plugins: Sequence[str] = (),
) -> PytestRun:
    """pytest on ``nodeids`` in a fresh interpreter with ``ASSAY_FAULTS=faults`` (empty: none)
    and ``extra_env`` set (``ASSAY_MUTANT`` there arms a mutant in every child it starts too),
    and ``plugins`` loaded.

    No xdist, no cache, the project's ``addopts`` cleared (killers may be marked slow), and gate
    receipts redirected to ``scratch``.
    """
    env = child_env(faults, {**os.environ, **(extra_env or {})})
    env.setdefault("OMP_NUM_THREADS", "1")
    env = _tree_env(root, env)
    command = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider"]
    command += ["-p", "no:xdist", "-o", "addopts="]
    if first_failure:
        command.append("-x")
    for plugin in plugins:
        command += ["-p", plugin]
    if any(n.startswith("gates/") for n in nodeids):
        command += gate_options(scratch)
    command += list(nodeids)
    start = time.perf_counter()
    # a timeout stops what the tests started too (torchrun ranks, trainer children), which
    # would otherwise take the cores from the next mutant
    child = subprocess.Popen(
        command,
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        for pid in [*_descendants(child.pid), child.pid]:  # torchrun starts its own sessions
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        stdout, _ = child.communicate()
        return PytestRun(None, time.perf_counter() - start, {}, stdout[-2000:])
    outcomes = {m.group(2): m.group(1) for m in _OUTCOME.finditer(stdout)}
    tail = (stdout + stderr)[-2000:]
    return PytestRun(child.returncode, time.perf_counter() - start, outcomes, tail)


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux /proc), children before their own children."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, frontier = [], [pid]
    while frontier:
        children = [c for p in frontier for c in parents.get(p, [])]
        found += children
        frontier = children
    return found


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


@functools.cache  # read once per gate for all the mutants (the ledger does not change)
def _receipts(folder: Path) -> tuple[dict, ...]:
    """The gate's receipts, oldest first (their names start with the time)."""
    return tuple(json.loads(p.read_text("utf-8")) for p in sorted(folder.glob("*.json")))


def _fullest_receipt(folder: Path) -> dict | None:
    """The gate's newest receipt among those that ran the most tests (the order to run them in)."""
    receipts = _receipts(folder)
    if not receipts:
        return None
    return max(reversed(receipts), key=lambda r: len(r["run"].get("tests", [])))


@functools.cache  # the campaign asks once per mutant and gate; receipts do not change under it
def newest_claims(folder: Path) -> dict[str, list[dict]]:
    """For each test any receipt under ``folder`` ran, the claims of the newest receipt that ran
    it. Per test, not per receipt: a run narrowed to some tests (``-k``, stale claims only) says
    nothing of the others, and a gate whose tests moved to another gate keeps fuller, older
    receipts that name tests which no longer exist (the caller keeps only collected tests)."""
    newest: dict[str, list[dict]] = {}
    for receipt in _receipts(folder):  # oldest first: later ones overwrite
        made: dict[str, list[dict]] = {t["nodeid"]: [] for t in receipt["run"].get("tests", [])}
        for claim in receipt["claims"]:
            made.setdefault(claim["test"], []).append(claim)
        newest.update(made)
    return newest


def _tree_env(root: Path, base: Mapping[str, str]) -> dict[str, str]:
    """``base`` with this checkout's product and machinery first on PYTHONPATH."""
    tree = [str(root / "src"), str(root / "testing")]
    return {**base, "PYTHONPATH": os.pathsep.join([*tree, *filter(None, [base.get("PYTHONPATH")])])}


def collected_tests(root: Path, gate_files: Sequence[str]) -> set[str]:
    """Node ids pytest collects now from ``gate_files`` (slow ones included): a selection taken
    from receipts is checked against the tree as it is."""
    env = _tree_env(root, os.environ)
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    command += ["-p", "no:xdist", "-o", "addopts=", *gate_files]
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, check=False)
    if done.returncode != _PASSED:
        raise RuntimeError(f"collecting {' '.join(gate_files)} failed:\n{done.stdout[-2000:]}")
    return {line.strip() for line in done.stdout.splitlines() if "::" in line}


def covering_tests(
    path: str, receipts: Path, gates: Sequence[str], collected: Collection[str]
) -> list[str]:
    """Node ids of the ``collected`` tests of ``gates`` whose claims, as the newest receipt that
    ran each test recorded them (:func:`newest_claims`), executed or declared ``path`` (relative
    to the repository): the gate selection that covers a file. In the order of ``gates``
    (cheapest first, so a kill usually comes early; receipts time a test's call, not the
    fixtures that do most gates' work), each gate's tests in the order its fullest newest
    receipt ran them."""
    chosen: list[str] = []
    for gate in gates:
        claims = newest_claims(receipts / gate)
        reading = {
            test
            for test, made in claims.items()
            if test in collected
            and any(
                f["path"] == path
                for claim in made
                for f in [*(claim.get("executed_files") or []), *claim.get("code_files", [])]
            )
        }
        fullest = _fullest_receipt(receipts / gate)
        ran = [t["nodeid"] for t in fullest["run"].get("tests", [])] if fullest else []
        chosen += sorted(
            reading, key=lambda node: (ran.index(node) if node in ran else len(ran), node)
        )
    return chosen


def selection_key(
    name: str, selected: Sequence[str], receipts: Path, root: Path, versions: dict[str, str]
) -> str:
    """The key of mutant ``name``'s gate verdict (:func:`assay_testing.gate_verdicts.verdict_key`)
    over the selected tests as a set (their order decides how soon a kill comes, not whether),
    with the files their claims read as the newest receipt that ran each test recorded them."""
    read: set[str] = set()
    for gate in sorted(
        {node.split("::")[0].removeprefix("gates/gate_").removesuffix(".py") for node in selected}
    ):
        claims = newest_claims(receipts / gate)
        made = [claim for test in selected for claim in claims.get(test, [])]
        read |= claim_files({"claims": made}, selected)
    return verdict_key(name, sorted(selected), read, root, versions)


# Claims whose failure is evidence of a defect; a performance claim (seconds, throughput) also
# fails on a loaded machine, and the mutants run two at a time.
EVIDENCE_KINDS = ("correctness", "memory")


def failing_claims(receipts: Path) -> list[str]:
    """``gate: claim`` for every correctness or memory claim in a receipt under ``receipts``
    that did not pass on its evidence: judged fail, or measured within its bound while a
    control no longer failed (the mutant blinded the check, and the gate does not pass; such
    claims end in `` (inconclusive)``). A claim never measured (its test raised first) is not
    here: that test errored."""
    found = []
    for path in sorted(receipts.glob("*/*.json")):
        receipt = json.loads(path.read_text("utf-8"))
        for claim in receipt["claims"]:
            if claim.get("kind") not in EVIDENCE_KINDS:
                continue
            measured = (claim.get("measurement") or {}).get("value") is not None
            if claim.get("verdict") == "fail":
                found.append(f"{receipt['gate']}: {claim['id']}")
            elif claim.get("verdict") == "inconclusive" and measured:
                found.append(f"{receipt['gate']}: {claim['id']} (inconclusive)")
    return found


@dataclass(frozen=True)
class GateKill:
    """One mutant measured against the gates: its verdict, the gate tests that ran, and the
    claims that failed (what killed it)."""

    name: str
    verdict: str  # killed | errored | survived | timeout | invalid | error | unreached
    wall_s: float
    selected: tuple[str, ...]
    failed_tests: tuple[str, ...]
    failed_claims: tuple[str, ...]
    tail: str
    reused_from: str | None = None  # when the verdict came from the store: when it was measured


# Gates run as a regression, for speed: no per-claim coverage (what ran is not the question).
GATE_RUN_ENV = {"ASSAY_GATE_COVERAGE": "0"}
STOP_AT_CLAIM = "assay_testing.stop_at_claim"


class _CleanRuns:
    """Gate tests run with no fault armed, once per set; ``verdicts`` holds what the runner
    makes of each such run as if a mutant had been armed (the control: never ``killed``)."""

    def __init__(self, root: Path, scratch: Path, timeout_s: float) -> None:
        self.root, self.scratch, self.timeout_s = root, scratch, timeout_s
        self.verdicts: dict[tuple[str, ...], str] = {}
        self.lock = threading.Lock()

    def __call__(self, nodeids: Sequence[str]) -> bool:
        """Whether ``nodeids`` pass with no fault armed."""
        key = tuple(sorted(nodeids))
        with self.lock:
            if key in self.verdicts:
                return self.verdicts[key] == "survived"
        where = self.scratch / hashlib.sha256("\n".join(key).encode()).hexdigest()[:12]
        run = run_pytest(
            key,
            faults="",
            root=self.root,
            scratch=where,
            timeout_s=self.timeout_s,
            first_failure=False,
            extra_env=GATE_RUN_ENV,
        )
        failed = tuple(n for n, o in run.outcomes.items() if o in ("FAILED", "ERROR"))
        verdict = gate_verdict(run, failed, failing_claims(where / "receipts"), lambda _: True)
        with self.lock:
            self.verdicts[key] = verdict
        return verdict == "survived"


def gate_verdict(
    run: PytestRun,
    failed: Sequence[str],
    claims: Sequence[str],
    clean: Callable[[Sequence[str]], bool],
) -> str:
    """killed | errored | survived | timeout | invalid | error for one mutant's gate run, whose
    ``failed`` tests failed and ``claims`` failed; ``clean(failed)`` says whether those tests
    pass without the fault (asked only when they failed)."""
    if run.returncode is None:
        return "timeout"
    if run.returncode == _PASSED:
        return "survived"
    if run.returncode != _FAILED or not failed:
        return "error"
    if not clean(failed):
        return "invalid"
    return "killed" if claims else "errored"


def run_gate_mutants(
    mutants: Sequence[tuple[str, Sequence[str]]],
    *,
    root: Path,
    scratch: Path,
    budget_s: float,
    jobs: int = 2,
    on_result: Callable[[GateKill], None] | None = None,
    confirm: Callable[[Sequence[str]], bool] | None = None,
    store: VerdictStore | None = None,
    keys: dict[str, str] | None = None,
) -> tuple[list[GateKill], dict[tuple[str, ...], str]]:
    """Run each ``(fault name, covering gate tests)`` with its fault armed, stopping after the
    first test whose claim failed, ``jobs`` at a time. A kill is confirmed by
    ``confirm(failing tests)``, by default those tests run once with no fault armed. Returns the
    results and, for each set of failing tests, the runner's verdict on its clean run (the
    control's data).

    With a ``store`` and each mutant's input ``keys``, a verdict stored under the same key is
    reused (with the verdict of its clean run) instead of measured, and each verdict measured
    is stored as soon as it is known."""
    clean = _CleanRuns(root, scratch / "clean", budget_s)

    def reused(name: str) -> GateKill | None:
        found = store.get(name, keys[name]) if store is not None and keys else None
        if found is None:
            return None
        if found.clean is not None:
            with clean.lock:
                clean.verdicts[tuple(sorted(found.failed_tests))] = found.clean
        return GateKill(
            name,
            found.verdict,
            found.wall_s,
            found.selected,
            found.failed_tests,
            found.failed_claims,
            found.tail,
            reused_from=found.measured,
        )

    def keep(result: GateKill) -> None:
        if store is None or not keys:
            return
        checked = clean.verdicts.get(tuple(sorted(result.failed_tests)))
        store.put(
            result.name,
            StoredVerdict(
                keys[result.name],
                result.verdict,
                round(result.wall_s, 1),
                result.selected,
                result.failed_tests,
                result.failed_claims,
                checked if result.failed_tests else None,
                now(),
                result.tail,
            ),
        )

    def one(item: tuple[int, tuple[str, Sequence[str]]]) -> GateKill:
        index, (name, selected) = item
        again = reused(name)
        if again is not None:
            result = again
        elif not selected:
            result = GateKill(name, "unreached", 0.0, (), (), (), "no gate test covers it")
        else:
            where = scratch / f"{index:03d}-{name}"  # its own receipts: what it alone failed
            # armed in every process the gates start, whatever faults they arm or clear there;
            # stopped at the first failing claim, not at a gate test that raised
            run = run_pytest(
                selected,
                faults="",
                root=root,
                scratch=where,
                timeout_s=budget_s,
                first_failure=False,
                extra_env={**GATE_RUN_ENV, MUTANT_ENV: name},
                plugins=(STOP_AT_CLAIM,),
            )
            failed = tuple(n for n, o in run.outcomes.items() if o in ("FAILED", "ERROR"))
            claims = tuple(failing_claims(where / "receipts"))
            verdict = gate_verdict(run, failed, claims, confirm or clean)
            result = GateKill(name, verdict, run.wall_s, tuple(selected), failed, claims, run.tail)
        if result.reused_from is None:
            keep(result)
        if on_result is not None:
            on_result(result)
        return result

    with ThreadPoolExecutor(max_workers=max(jobs, 1)) as pool:
        return list(pool.map(one, enumerate(mutants))), clean.verdicts


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
