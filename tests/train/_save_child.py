"""Subprocess for the kill-during-save tests (not a test module).

usage: _save_child.py RUN_DIR STEP KILL_AT      save STEP; pause forever at event KILL_AT
       _save_child.py RUN_DIR FIRST loop        save FIRST, FIRST+1, ... until killed

An "event" is every fsync, rename or replace the save performs; printing it and pausing lets
the parent kill the process at an exact point of the save.
"""

from __future__ import annotations

import sys

import torch

from assay.train.checkpoint.directory import save_checkpoint
from assay_testing.faults import pause_at_event

PRINTS = {"config": "c" * 64, "dataset": "d" * 64, "model": "m" * 64}


def state_for(step: int) -> tuple[dict[str, torch.nn.Parameter], torch.optim.AdamW]:
    """Trainables whose values identify the step, and an AdamW with state over them."""
    params = {
        f"layer{i}.weight": torch.nn.Parameter(torch.full((256, 512), float(step + i)))
        for i in range(4)
    }
    opt = torch.optim.AdamW(params.values(), lr=1e-3)
    for p in params.values():
        p.grad = torch.ones_like(p)
    opt.step()
    with torch.no_grad():  # undo the update so the values still identify the step
        for i, p in enumerate(params.values()):
            p.fill_(float(step + i))
    return params, opt


def main() -> None:
    run_dir, step, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if mode == "loop":
        while True:
            params, opt = state_for(step)
            save_checkpoint(run_dir, step, params, opt, {"step": step}, {"n": step}, PRINTS)
            print(f"SAVED {step}", flush=True)
            step += 1
    pause_at_event(int(mode), ("fsync", "rename", "replace"), announce=True)
    params, opt = state_for(step)
    save_checkpoint(run_dir, step, params, opt, {"step": step}, {"n": step}, PRINTS)
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
