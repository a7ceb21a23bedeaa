"""What measuring executed code costs: the same gates run with and without the tracer.

    python harness/coverage_cost.py gates/gate_stream.py gates/gate_logits.py [--json]

Runs ``pytest -p no:cacheprovider GATES`` twice in fresh interpreters, first with
``ASSAY_GATE_COVERAGE=0`` (the plugin measures nothing; every claim records declared code),
then measured, each writing receipts and records to its own temporary folder (never to
``records/``). Prints both wall times and their ratio. Wall time on a shared machine is noisy:
run it on a quiet one, and more than once (``--repeat``), before quoting a ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_once(gates: list[str], measured: bool, extra: list[str]) -> dict[str, float | int]:
    """One pytest run of ``gates``; its wall seconds and exit status."""
    env = dict(os.environ)
    env.pop("ASSAY_GATE_COVERAGE", None)
    if not measured:
        env["ASSAY_GATE_COVERAGE"] = "0"
    with tempfile.TemporaryDirectory(prefix="assay-coverage-cost-") as scratch:
        argv = [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            f"--gate-receipts={scratch}/receipts",
            f"--gate-records={scratch}/records",
            *extra,
            *gates,
        ]
        started = time.perf_counter()
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        return {"wall_s": time.perf_counter() - started, "exit": done.returncode}


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; exit 1 if any run failed, else 0."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("gates", nargs="+", help="gate modules or node ids")
    parser.add_argument("--repeat", type=int, default=1, help="pairs of runs (default 1)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--pytest-arg", action="append", default=[], help="passed to pytest")
    args = parser.parse_args(argv)
    pairs = []
    for _ in range(args.repeat):  # alternate, so drift in the machine's load hits both
        plain = run_once(args.gates, False, args.pytest_arg)
        measured = run_once(args.gates, True, args.pytest_arg)
        pairs.append({"without": plain, "with": measured})
    without = min(p["without"]["wall_s"] for p in pairs)
    with_ = min(p["with"]["wall_s"] for p in pairs)
    result = {
        "gates": args.gates,
        "runs": pairs,
        "without_s": round(without, 2),
        "with_s": round(with_, 2),
        "ratio": round(with_ / without, 3),
        "cpus": os.cpu_count(),
        "load_avg": os.getloadavg(),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"without coverage {without:.1f} s, with {with_:.1f} s: {result['ratio']:.2f}x")
    failed = any(r["exit"] != 0 for p in pairs for r in p.values())
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
