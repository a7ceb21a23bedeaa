"""Run mutmut 3 over one or more core packages and write a per-package summary JSON.

Each package runs in its own scratch copy of the tree (src/, tests/, pyproject.toml with a
generated ``[tool.mutmut]`` section), so its mutants are exercised only by the tests selected
for it here and no ``mutants/`` folder lands in the checkout. The summary (per package:
killed, survived, timeout, not checked, total, score = (killed + timeout) / tested, and every
mutant's exit code) is merged into ``records/mutation/mutmut-summary.json``, which
``gates/gate_mutation.py`` reads.

    python harness/mutmut_run.py qualify train_losses --max-children 2
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from assay.testing.mutation import mutmut_score as score

ROOT = Path(__file__).resolve().parents[1]
SUMMARY = ROOT / "records" / "mutation" / "mutmut-summary.json"

# package -> (modules mutated, tests that exercise them). Targeted selections keep a run bounded.
SCOPES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "qualify": (
        (
            "src/assay/qualify/receipt.py",
            "src/assay/qualify/verify.py",
            "src/assay/qualify/threshold.py",
        ),
        (
            "tests/qualify/test_canonical_sha.py",
            "tests/qualify/test_verify.py",
            "tests/qualify/test_invalid_receipts.py",
            "tests/qualify/test_threshold.py",
        ),
    ),
    "train": (
        ("src/assay/train/losses.py", "src/assay/train/preference.py"),
        ("tests/train/test_losses.py", "tests/train/test_preference.py"),
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
        ("src/assay/stream/engine.py", "src/assay/stream/pool.py", "src/assay/stream/kept.py"),
        ("tests/stream",),
    ),
}


def _config(modules: tuple[str, ...], tests: tuple[str, ...]) -> str:
    quoted = lambda items: "[" + ", ".join(json.dumps(i) for i in items) + "]"  # noqa: E731
    return (
        "\n[tool.mutmut]\n"
        f"source_paths = {quoted(['src'])}\n"
        f"only_mutate = {quoted(modules)}\n"
        f"pytest_add_cli_args_test_selection = {quoted(tests)}\n"
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-p", "no:xdist", "-o", "addopts="]\n'
        'process_isolation = "forkserver"\n'
    )


def run_package(name: str, max_children: int, timeout_s: float) -> dict[str, object]:
    """mutmut run for one package in a scratch tree; returns its summary row."""
    modules, tests = SCOPES[name]
    with tempfile.TemporaryDirectory(prefix=f"mutmut-{name}-") as tmp:
        work = Path(tmp)
        # The whole tree (tests read examples/, gates/, schemas/), less history and outputs.
        skip = shutil.ignore_patterns(".git", ".nox", "records", "mutants", "__pycache__")
        shutil.copytree(ROOT, work, ignore=skip, dirs_exist_ok=True)
        text = (ROOT / "pyproject.toml").read_text("utf-8")
        # Drop the checkout's own [tool.mutmut] section (up to the next table) and add ours.
        rest = re.sub(r"(?ms)^\[tool\.mutmut\]\n.*?(?=^\[|\Z)", "", text)
        (work / "pyproject.toml").write_text(rest + _config(modules, tests), "utf-8")
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ASSAY_FAULTS")}
        env.setdefault("OMP_NUM_THREADS", "1")
        start = time.perf_counter()
        cmd = [sys.executable, "-m", "mutmut", "run", "--max-children", str(max_children)]
        try:
            done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True,
                                  timeout=timeout_s)  # fmt: skip
            log = done.stdout[-1500:] + done.stderr[-1500:]
        except subprocess.TimeoutExpired:
            log = f"stopped after {timeout_s:.0f} s; mutants not yet run count as not checked"
        wall = time.perf_counter() - start
        codes: dict[str, int | None] = {}
        for meta in sorted((work / "mutants").rglob("*.meta")):
            codes.update(json.loads(meta.read_text("utf-8")).get("exit_code_by_key", {}))
    row = {"modules": list(modules), "tests": list(tests), **score(codes), "wall_s": round(wall)}
    row["exit_codes"] = dict(sorted(codes.items()))
    if not codes or all(c is None for c in codes.values()):
        row["error"] = log[-800:]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("packages", nargs="*", default=sorted(SCOPES), choices=sorted(SCOPES))
    parser.add_argument("--max-children", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per package")
    parser.add_argument("--out", type=Path, default=SUMMARY)
    args = parser.parse_args(argv)
    import mutmut

    old = json.loads(args.out.read_text("utf-8")) if args.out.is_file() else {"packages": {}}
    packages = dict(old.get("packages", {}))
    for name in args.packages:
        packages[name] = run_package(name, args.max_children, args.timeout)
        print(name, {k: v for k, v in packages[name].items() if k != "exit_codes"}, flush=True)
    covered = ", ".join(f"{p} ({', '.join(Path(m).stem for m in packages[p]['modules'])})"
                        for p in sorted(packages))  # fmt: skip
    summary = {
        "tool": "mutmut",
        "tool_version": mutmut.__version__,
        "scope": f"packages run: {covered}",
        "packages": packages,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n", "utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
