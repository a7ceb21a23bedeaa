"""Subprocess for the export kill harness (not a test module).

usage: export_child.py OUT FIRST KILL_AT

Exports steps FIRST, FIRST+1, ... to OUT (``--force``) until killed; at filesystem event
KILL_AT it prints PAUSE and sleeps so the parent can kill it there.
"""

from __future__ import annotations

import sys
from pathlib import Path

from export_faults import adapted_model

from assay_testing.faults import pause_at_event


def main() -> None:
    out, step, kill_at = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    from assay.adapters.export import export

    models = [adapted_model(s) for s in (step, step + 1, step + 2, step + 3)]
    pause_at_event(kill_at)
    for offset, model in enumerate(models):
        export(model, out, "peft", force=True)
        print(f"SAVED {step + offset}", flush=True)
    print("PAUSE", flush=True)  # ran out of exports before the event: park for the kill


if __name__ == "__main__":
    main()
