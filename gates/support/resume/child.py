"""Child process for gate-resume's crash claim (not a gate module).

usage: resume/child.py CONFIG RUN_DIR KILL_AT

Runs the real Trainer (resuming from RUN_DIR's latest checkpoint when there is one) and
counts every fsync, rename and replace it performs; at event KILL_AT it prints PAUSE and
waits, so the parent can SIGKILL it at that exact point of a save. KILL_AT 0 never pauses.
"""

from __future__ import annotations

import sys
from pathlib import Path

from assay.qualify.plugin.child_imports import report_at_exit
from assay.settings.loader import load_train_config
from assay.train.loop import Trainer
from assay_testing.faults import pause_at_event


def main() -> None:
    report_at_exit()  # a gate's child: the gate counts the code it ran here
    config, run_dir, kill_at = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    trainer = Trainer(load_train_config(config), progress=False)
    if (run_dir / "latest").exists():
        trainer.resume(run_dir)
    print(f"START {trainer.step}", flush=True)
    pause_at_event(kill_at)
    trainer.train()
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
