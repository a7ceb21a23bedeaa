"""Run mutmut 3 over core packages on a seeded uniform sample of their mutants; write a summary.

Each package runs in its own scratch copy of the tree (pyproject.toml with a generated
``[tool.mutmut]`` section), so its mutants are exercised only by the tests selected for it here
and no ``mutants/`` folder lands in the checkout. Per package:

1. ``mutmut run <a name matching nothing>`` generates every mutant and collects mutmut's
   test-to-function stats, then stops at mutmut's "nothing matches" check (mutmut 3.8 has no
   generate-only command). The generated mutants are the population.
2. The population is put in a seeded random order (``assay_testing.mutation.sample_order``) and
   the first ``--sample`` names are run, in that order, ``--batch`` names per ``mutmut run``.
   A batch that would overrun the package's ``--cap`` is stopped and its results dropped, so the
   mutants tested are always a prefix of the seeded order: a uniform random sample.

The summary row (population, seed, the sampled names with their exit codes, counts, score =
(killed + timeout) / tested, its 95% Wilson interval, wall time, sha256 of the mutated modules
and of the selected tests) is merged into ``records/mutation/mutmut-summary.json``, which
``gates/gate_mutation.py`` reads and re-derives.

    python harness/mutmut_run.py qualify train --max-children 1 --sample 100
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from assay_testing.mutation import (
    MUTMUT_NO_TESTS,
    MUTMUT_SURVIVED,
    mutmut_score,
    sample_order,
    wilson_interval,
)

ROOT = Path(__file__).resolve().parents[1]
SUMMARY = ROOT / "records" / "mutation" / "mutmut-summary.json"
SEED = 20260415
# A mutant name no mutant has: step 1 stops right after mutant generation and stats.
NO_MUTANT = "assay_generate_only__no_such_mutant"

# package -> (modules mutated, tests that exercise them). Targeted, fast (not slow-marked)
# selections keep each mutant at a few seconds.
SCOPES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "qualify": (
        (
            "src/assay/qualify/ledger/receipt.py",
            "src/assay/qualify/publishing/verify.py",
            "src/assay/qualify/core/threshold.py",
        ),
        (
            "tests/qualify/test_canonical_sha.py",
            "tests/qualify/test_verify.py",
            "tests/qualify/test_verify_checks.py",
            "tests/qualify/test_invalid_receipts.py",
            "tests/qualify/test_threshold.py",
            "tests/qualify/test_judging_rules.py",
            "tests/qualify/test_receipt_files.py",
            "tests/qualify/test_tolerance_modes.py",
            "tests/qualify/test_stale.py",
            "tests/qualify/test_signatures.py",
        ),
    ),
    "train": (
        (
            "src/assay/train/losses.py",
            "src/assay/train/objective.py",
            "src/assay/train/checkpoint/directory.py",
        ),
        (
            "tests/train/test_losses.py",
            "tests/train/test_chunked_ce_frozen_head.py",
            "tests/train/test_preference.py",
            "tests/train/test_checkpoint.py",
            "tests/train/test_checkpoint_files_verified.py",
            "tests/train/test_objective.py",
        ),
    ),
    "storage": (
        ("src/assay/storage/nf4.py", "src/assay/storage/linear.py", "src/assay/storage/dense.py"),
        ("tests/storage",),
    ),
    "adapters": (
        (
            "src/assay/adapters/lora.py",
            "src/assay/adapters/dora.py",
            "src/assay/adapters/peft_io.py",
        ),
        ("tests/adapters",),
    ),
    "stream": (
        ("src/assay/stream/engine.py", "src/assay/stream/pool.py"),
        ("tests/stream",),
    ),
}
# mutmut runs the tests from mutants/, which holds only src/ and tests/ unless told otherwise;
# tests that find data relative to their own file (examples/, schemas/, the noxfile) need these too.
ALSO_COPY = ("examples", "schemas", "gates", "harness", "noxfile.py")


def _config(modules: tuple[str, ...], tests: tuple[str, ...]) -> str:
    quoted = lambda items: "[" + ", ".join(json.dumps(i) for i in items) + "]"  # noqa: E731
    # addopts is cleared (it may carry xdist options) and `-m "not slow"` restated: without it
    # slow tests (real model, long training) would join the selection.
    args = ["-p", "no:cacheprovider", "-p", "no:xdist", "-o", "addopts=", "-m", "not slow"]
    return (
        "\n[tool.mutmut]\n"
        f"source_paths = {quoted(['src'])}\n"
        f"only_mutate = {quoted(modules)}\n"
        f"also_copy = {quoted(ALSO_COPY)}\n"
        f"pytest_add_cli_args_test_selection = {quoted(tests)}\n"
        f"pytest_add_cli_args = {quoted(args)}\n"
        'process_isolation = "forkserver"\n'
    )


def sources_sha256(paths: tuple[str, ...], root: Path = ROOT) -> dict[str, str]:
    """sha256 of each file, a folder expanded to its .py files, keyed by path from ``root``."""
    files: list[Path] = []
    for item in paths:
        p = root / item
        files += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    return {
        f.relative_to(root).as_posix(): hashlib.sha256(f.read_bytes()).hexdigest() for f in files
    }


def _scratch(work: Path, modules: tuple[str, ...], tests: tuple[str, ...]) -> None:
    # The whole tree, less history and outputs, with our [tool.mutmut] replacing the checkout's.
    skip = shutil.ignore_patterns(".git", ".nox", "records", "mutants", "__pycache__")
    shutil.copytree(ROOT, work, ignore=skip, dirs_exist_ok=True)
    text = (ROOT / "pyproject.toml").read_text("utf-8")
    rest = re.sub(r"(?ms)^\[tool\.mutmut\]\n.*?(?=^\[|\Z)", "", text)
    (work / "pyproject.toml").write_text(rest + _config(modules, tests), "utf-8")


def _mutmut(work: Path, names: list[str], max_children: int, timeout_s: float) -> str | None:
    """One ``mutmut run`` on ``names``; its output tail, or None when it ran past timeout_s."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ASSAY_FAULTS")}
    env.setdefault("OMP_NUM_THREADS", "1")
    cmd = [sys.executable, "-m", "mutmut", "run", "--max-children", str(max_children), *names]
    try:
        done = subprocess.run(
            cmd, cwd=work, env=env, capture_output=True, text=True, timeout=max(timeout_s, 1.0)
        )
    except subprocess.TimeoutExpired:
        return None
    return (done.stdout[-2000:] + done.stderr[-2000:]).replace("\r", "\n")


def _diff(work: Path, name: str) -> str:
    """The mutant's diff as ``mutmut show`` prints it, so survivors can be read after the
    scratch copy is gone (and judged: a missing test, or an equivalent mutant)."""
    done = subprocess.run(
        [sys.executable, "-m", "mutmut", "show", name],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return (done.stdout or done.stderr)[-1500:]


def _exit_codes(work: Path) -> dict[str, int | None]:
    codes: dict[str, int | None] = {}
    for meta in sorted((work / "mutants").rglob("*.meta")):
        codes.update(json.loads(meta.read_text("utf-8")).get("exit_code_by_key", {}))
    return codes


def run_package(
    name: str, *, sample: int, seed: int, batch: int, max_children: int, cap_s: float
) -> dict[str, object]:
    """Generate the package's mutants, run a seeded uniform sample of them; its summary row."""
    modules, tests = SCOPES[name]
    row: dict[str, object] = {
        "modules": list(modules),
        "tests": list(tests),
        "seed": seed,
        "sample_planned": sample,
        "sources_sha256": sources_sha256(modules),
        "tests_sha256": sources_sha256(tests),
    }
    start = time.perf_counter()
    left = lambda: cap_s - (time.perf_counter() - start)  # noqa: E731
    with tempfile.TemporaryDirectory(prefix=f"mutmut-{name}-") as tmp:
        work = Path(tmp)
        _scratch(work, modules, tests)
        log = _mutmut(work, [NO_MUTANT], max_children, left())
        population = _exit_codes(work)
        stats = (work / "mutants" / "mutmut-stats.json").is_file()
        if log is None or not population or not stats or "nothing matches" not in log:
            row.update(population=len(population), sampled={}, wall_s=round(-left() + cap_s))
            row["error"] = (
                "mutant generation or stats failed: " + (log or "ran past the cap")[-800:]
            )
            return row
        order = sample_order(population, seed)[:sample]
        done: list[str] = []
        batches: list[dict[str, object]] = []
        for i in range(0, len(order), batch):
            names = order[i : i + batch]
            t0 = time.perf_counter()
            out = _mutmut(work, names, max_children, left())
            if out is None:  # over the cap: drop this batch so the sample stays a prefix
                row["stopped"] = f"cap of {cap_s:.0f} s reached after {len(done)} mutants"
                break
            batches.append({"size": len(names), "wall_s": round(time.perf_counter() - t0)})
            done += names
        codes = _exit_codes(work)
        survivors = {
            n: _diff(work, n) for n in done if codes.get(n) in MUTMUT_SURVIVED | MUTMUT_NO_TESTS
        }
    row.update(
        survivor_diffs=survivors,
        population=len(population),
        population_names=sorted(population),
        sampled={n: codes.get(n) for n in done},
        not_run=order[len(done) :],
        batches=batches,
        wall_s=round(time.perf_counter() - start),
    )
    counts = mutmut_score(row["sampled"])  # type: ignore[arg-type]
    low, high = wilson_interval(counts["killed"] + counts["timeout"], counts["tested"])
    row.update(counts, wilson95=[low, high])
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # Checked below, not by `choices`: Python 3.11's argparse tests an empty `*` list against
    # choices as one value and refuses it, so the no-argument default (all) would never run.
    parser.add_argument("packages", nargs="*", help=f"default: all of {', '.join(sorted(SCOPES))}")
    parser.add_argument("--max-children", type=int, default=1)
    parser.add_argument("--sample", type=int, default=100, help="mutants run per package")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--batch", type=int, default=20, help="mutants per `mutmut run`")
    parser.add_argument("--cap", type=float, default=720.0, help="seconds per package")
    parser.add_argument("--out", type=Path, default=SUMMARY)
    args = parser.parse_args(argv)
    unknown = sorted(set(args.packages) - set(SCOPES))
    if unknown:
        parser.error(f"unknown package {unknown[0]!r}; expected one of {', '.join(sorted(SCOPES))}")
    import mutmut

    old = json.loads(args.out.read_text("utf-8")) if args.out.is_file() else {"packages": {}}
    packages = dict(old.get("packages", {}))
    for name in args.packages or sorted(SCOPES):
        packages[name] = run_package(
            name,
            sample=args.sample,
            seed=args.seed,
            batch=args.batch,
            max_children=args.max_children,
            cap_s=args.cap,
        )
        short = (
            "population_names",
            "sampled",
            "sources_sha256",
            "tests_sha256",
            "not_run",
            "survivor_diffs",
        )
        print(name, {k: v for k, v in packages[name].items() if k not in short}, flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        summary = {
            "tool": "mutmut",
            "tool_version": mutmut.__version__,
            "method": "seeded uniform sample of each package's mutants (harness/mutmut_run.py)",
            "packages": packages,
        }
        # Written after each package, so a long run that is stopped keeps what it finished.
        args.out.write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n", "utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
