"""gate-stream on a GPU box: streamed against resident on CUDA, written as a receipt.

Usage: python harness/stream_bitexact.py [--gate-receipts=records/receipts] [pytest args...]

Runs gates/gate_stream.py with ``--gate-device cuda`` so the CUDA copy stream, events and the
pinned RAM tier are what is measured; the receipt and record land where the gates' do.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

GATE = Path(__file__).resolve().parents[1] / "gates" / "gate_stream.py"


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print(
            "stream_bitexact: no CUDA device; run `nox -s gate-stream` for the CPU gate",
            file=sys.stderr,
        )
        return 2
    return int(pytest.main([str(GATE), "--gate-device", "cuda", *sys.argv[1:]]))


if __name__ == "__main__":
    sys.exit(main())
