"""gate-distributed on a multi-GPU box: the same measurements over NCCL, the same receipt.

usage: python harness/distributed_nccl.py [--gate-receipts=DIR] [--gate-no-render] [PYTEST ARGS...]

Runs ``pytest gates/gate_distributed.py --gate-device cuda``: the gate then launches its two
ranks on ``cuda:0`` and ``cuda:1`` with the NCCL backend (and its single-process side on
``cuda:0``) and writes its receipt to ``DIR/distributed/`` (default ``records/receipts``),
rendering ``records/distributed.md`` unless ``--gate-no-render``. Pick the GPUs with
``CUDA_VISIBLE_DEVICES``. Exits 2 with one line when fewer than 2 GPUs are visible.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GATE = ROOT / "gates" / "gate_distributed.py"


def main(argv: list[str]) -> int:
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count < 2:
        print(f"distributed_nccl: needs 2 CUDA GPUs, this box has {count}", file=sys.stderr)
        return 2
    if not any(a == "--gate-receipts" or a.startswith("--gate-receipts=") for a in argv):
        argv = [f"--gate-receipts={ROOT / 'records' / 'receipts'}", *argv]
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        str(GATE),
        "--gate-device",
        "cuda",
        *argv,
    ]
    print(" ".join(command), flush=True)
    return subprocess.run(command, cwd=ROOT, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
