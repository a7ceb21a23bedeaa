"""Subprocess for the one-writer tests (not a test module).

usage: _paused_train_child.py GATE_DIR assay-train-args...

Runs ``assay train`` whose first checkpoint save waits: it writes GATE_DIR/holding, then
waits until GATE_DIR/release exists. The pause is patched in here, from outside the product.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from assay.cli import main
from assay.train.loop import Trainer

gate = Path(sys.argv[1])
real_save = Trainer.save


def paused_save(self):
    if not (gate / "release").exists():
        (gate / "holding").write_text("1")
        while not (gate / "release").exists():
            time.sleep(0.05)
    return real_save(self)


Trainer.save = paused_save
sys.exit(main(sys.argv[2:]))
