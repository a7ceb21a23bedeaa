"""Child process for gate-interrupt's before-training claim (not a gate module).

usage: interrupt/early_child.py PHASE SIGNAL CONFIG [ARG ...]

Runs ``assay train CONFIG --json --no-progress [ARG ...]`` in this process and sends itself
SIGNAL (``SIGINT`` or ``SIGTERM``) from inside PHASE: once the command's modules are imported,
as numpy's first import starts (torch's C code imports it), once the config is loaded, at the
first check made under the run folder's claim, once the model and data are loaded, or once a
resumed checkpoint is checked. A timer from outside could land anywhere; this lands in the
phase on any machine. Nothing in the product is changed: the signal is real, only its moment is
chosen here.
"""

from __future__ import annotations

import functools
import importlib
import os
import signal
import sys
import time

from assay.cli import main
from assay.qualify.plugin.child_imports import report_at_exit

# phase -> (module, attribute path) of the function whose return the signal follows, or
# (module, None): the signal is sent as the import system first looks for that module
PHASES = {
    "command_modules": ("assay.cli.dispatch", "build_parser"),
    "numpy_import": ("numpy", None),  # torch's C code imports it and clears what it raised
    "config": ("assay.settings.loader", "load_train_config"),
    "claimed": ("assay.cli.train", "_check_events_folder"),  # the first work under the claim
    "model": ("assay.train.loop", "Trainer.__init__"),
    "resume": ("assay.train.loop", "Trainer.checked_checkpoint"),
}


def _signal_after(function, signum: int):
    @functools.wraps(function)
    def signalled(*args, **kwargs):
        function(*args, **kwargs)
        os.kill(os.getpid(), signum)
        time.sleep(10)  # the handler raises before this returns
        raise AssertionError(f"signal {signum} did not stop the phase")

    return signalled


class _SignalOnImport:
    """A finder that finds nothing: it sends the signal the first time ``name`` is looked
    for, so the signal lands inside that module's first import."""

    def __init__(self, name: str, signum: int) -> None:
        self.name, self.signum, self.fired = name, signum, False

    def find_spec(self, name, path=None, target=None):
        if name == self.name and not self.fired:
            self.fired = True
            os.kill(os.getpid(), self.signum)
        return None


def run() -> int:
    report_at_exit()  # a gate's child: the gate counts the code it ran here
    phase, name, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    module, path = PHASES[phase]
    signum = signal.Signals[name]
    if path is None:
        sys.meta_path.insert(0, _SignalOnImport(module, signum))
    else:
        owner = importlib.import_module(module)
        *parents, attribute = path.split(".")
        for parent in parents:
            owner = getattr(owner, parent)
        setattr(owner, attribute, _signal_after(getattr(owner, attribute), signum))
    return main(["train", *rest, "--json", "--no-progress"])


if __name__ == "__main__":
    sys.exit(run())
