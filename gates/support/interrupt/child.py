"""Child process for gate-interrupt's second-signal claim (not a gate module).

usage: interrupt/child.py STEP WRITE CONFIG [--resume RUN_DIR]

Runs ``assay train CONFIG --json --no-progress`` in this process. After optimizer step STEP it
sends itself SIGINT (the first signal: stop after this step); the stop's checkpoint save then
gets the second SIGINT just before its WRITE-th file write (0 is the first), so the second
signal lands inside that save whatever the machine's load. A wall-clock timer could fire after
the save had ended on a fast disk. Nothing in the product is changed: the signals are real, only
their timing is chosen here.
"""

from __future__ import annotations

import os
import signal
import sys

import assay.train.checkpoint.directory as checkpoint
import assay.train.loop as loop
from assay.cli import main
from assay.qualify.plugin.child_imports import report_at_exit


def run() -> int:
    report_at_exit()  # a gate's child: the gate counts the code it ran here
    step, write, rest = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    save_writes: list[int] = []  # armed by the first signal: the stop's writes so far
    train_step, write_synced = loop.Trainer.train_step, checkpoint.write_synced

    def step_then_signal(self):
        record = train_step(self)
        if record.step == step:
            save_writes.append(0)
            os.kill(os.getpid(), signal.SIGINT)
        return record

    def write_with_second_signal(*args, **kwargs):
        if save_writes:
            if save_writes[0] == write:
                os.kill(os.getpid(), signal.SIGINT)  # Python runs the handler before the write
            save_writes[0] += 1
        return write_synced(*args, **kwargs)

    loop.Trainer.train_step = step_then_signal
    checkpoint.write_synced = write_with_second_signal
    return main(["train", *rest, "--json", "--no-progress"])


if __name__ == "__main__":
    sys.exit(run())
