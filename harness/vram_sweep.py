"""VRAM sweep on a GPU box: predicted against measured peak for every cohort row, as a receipt.

Usage: python harness/vram_sweep.py [--cohort gates/support/memory/cases.yaml] [--out DIR]

Predictions are frozen first (written, hashed) before any row runs. Each row then runs in a
fresh subprocess on CUDA: the model is built as in assay.memory.measure.build_plan_run, moved
to the device, and one warm-up step is taken; the measured step reports
``torch.cuda.max_memory_allocated`` / ``max_memory_reserved`` (after a reset) and polled NVML,
each with its scope. Without CUDA the sweep measures the CPU tensor-level scope instead.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, torch
from assay.memory import measure
plan = json.loads(sys.stdin.read())
if not torch.cuda.is_available():
    print(json.dumps(measure.measure_plan(plan)))
    raise SystemExit
torch.set_default_device("cuda")  # the run's tensors, optimizer state and slots on the GPU
step, static, facts = measure.build_plan_run(plan)
_, peaks = measure.cuda_peaks(step)
out = {"static_bytes": static, **facts}
for p in peaks:
    out[p.scope] = p.peak_bytes
out["device_peak_bytes"] = static + out["cuda-allocated"]
out["scope"] = "cuda-allocated"
print(json.dumps(out))
"""


def run_row(plan: dict) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD],
        input=json.dumps(plan),
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        return {"error": proc.stderr[-1500:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(ROOT / "gates"))
    from gate_memory import COHORT, freeze, load_cohort, summary

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("vram-sweep"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    cohort = load_cohort()
    frozen = freeze(cohort, args.out / "predictions.json")  # before any measurement
    rows = []
    for row in frozen["rows"]:
        measured = run_row(row["plan"])
        rows.append({"id": row["id"], "predicted": row["prediction"], "measured": measured})
        print(row["id"], row["prediction"]["total_bytes"], measured.get("device_peak_bytes"))
    ok = [r for r in rows if "device_peak_bytes" in r["measured"]]
    stats = summary(
        [r["predicted"]["total_bytes"] for r in ok],
        [r["measured"]["device_peak_bytes"] for r in ok],
        [cohort["budget_bytes"]] * len(ok),
    )
    body = {
        "schema": "assay.vram-sweep/1",
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "cohort_sha256": hashlib.sha256(COHORT.read_bytes()).hexdigest(),
        "predictions_sha256": frozen["sha256"],
        "rows": rows,
        "summary": {k: v for k, v in stats.items() if k != "errors"},
    }
    text = json.dumps(body, indent=2, sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()
    (args.out / f"vram-sweep-{digest[:12]}.json").write_text(text, encoding="utf-8")
    print(json.dumps(body["summary"], indent=2))
    return 0 if len(ok) == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
