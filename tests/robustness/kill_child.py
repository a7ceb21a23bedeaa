"""Subprocess for the kill -9 harness (not a test module).

usage: kill_child.py MODE DIR FIRST KILL_AT

Writes states FIRST, FIRST+1, ... into DIR until killed. MODE ``checkpoint`` uses
``save_checkpoint``; ``receipt`` writes append-only receipt files with ``write_atomic`` and an
index with ``atomic_write_json``; ``naive`` rewrites ``state.json`` in place (the control).
Every fsync, rename, replace or link is an event; at event KILL_AT it prints PAUSE and sleeps so
the parent can kill it at that exact point.
"""

from __future__ import annotations

import sys
from pathlib import Path

from robust_state import naive_write, receipt_bytes, write_checkpoint

from assay_testing.faults import pause_at_event


def main() -> None:
    mode, directory, first, kill_at = sys.argv[1], Path(sys.argv[2]), *map(int, sys.argv[3:5])
    pause_at_event(kill_at)
    step = first
    while True:
        if mode == "checkpoint":
            write_checkpoint(directory, step)
        elif mode == "receipt":
            from assay.atomic import atomic_write_json
            from assay.qualify.ledger.receipt import write_atomic

            write_atomic(directory / f"r{step:06d}.json", receipt_bytes(step), overwrite=False)
            atomic_write_json(directory / "index.json", {"count": step})
        else:
            naive_write(directory / "state.json", step)
        print(f"SAVED {step}", flush=True)
        step += 1


if __name__ == "__main__":
    main()
