"""Helpers for gate-matrix and gate-axes (not a gate module): the tiny workspace a cell trains
in, running a cell as a user would launch it, and comparing it with its reference.

A cell runs in this process when it is one process straight through. A resumed cell stops
after step ``STOP`` and a NEW process (``python -m assay.cli train --resume``) finishes it; a
distributed cell runs its first leg under ``torchrun`` with 2 gloo ranks (a resumed one then
finishes in one plain process: checkpoints resume at any world size). Defects for the controls
are armed from outside: patched into this process (``inject``) and into every child through
``child_env``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml
from safetensors.torch import load_file

from assay_testing.defects import arm, child_env
from assay_testing.matrix import AXES, Cell, Workspace, reference_of, train_config

STOP = 2
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
PROMPTS = ("Hi.", "NF4 stores four bits.", "Resume.", "Rank zero logs.")
CHOSEN = (" A gate holds.", " Bitwise.", " Exact.", " One line.")
REJECTED = (" Maybe.", " Close enough, roughly.", " No.", " Later, perhaps never.")


@dataclass(frozen=True)
class Outcome:
    """What a run ended with: the loss of every step (metrics.jsonl) and its last trainables."""

    losses: list[float]
    trainables: dict[str, torch.Tensor]


def build_workspace(root: Path) -> Workspace:
    """Tiny random models of every architecture assay reads (written by transformers), the byte
    tokenizer and rows in the three formats the losses train on."""
    from assay.model.families import NAMES as FAMILY_NAMES
    from assay_testing.byte_tokenizer import save_byte_tokenizer
    from assay_testing.text_run import ROWS
    from assay_testing.tiny import family_of, save_tiny

    models = {
        arch: save_tiny(family_of(arch), root, seed=i, gguf=False)["hf"]
        for i, arch in enumerate(FAMILY_NAMES)
    }
    save_byte_tokenizer(root / "bytes.gguf")
    rows = {
        "text": [{"text": t} for t in ROWS],
        "preference": [
            {"prompt": p, "chosen": c, "rejected": r}
            for p, c, r in zip(PROMPTS * 2, CHOSEN * 2, REJECTED[::-1] * 2, strict=True)
        ],
        "kto": [
            {"prompt": p, "completion": c, "label": i % 3 != 0}
            for i, (p, c) in enumerate(zip(PROMPTS * 2, (*CHOSEN, *REJECTED), strict=True))
        ],
    }
    paths = {}
    for name, items in rows.items():
        paths[name] = root / f"{name}.jsonl"
        paths[name].write_text("".join(json.dumps(row) + "\n" for row in items))
    return Workspace(models=models, tokenizer=root / "bytes.gguf", rows=paths, runs=root / "runs")


def cell_name(cell: Cell) -> str:
    return "-".join(cell[axis.name] for axis in AXES)


@contextlib.contextmanager
def _environment(space: Workspace) -> Iterator[None]:
    """This process as a child would see it: the disk tier's cache in the workspace."""
    before = os.environ.get("ASSAY_CACHE")
    os.environ["ASSAY_CACHE"] = str(space.runs / "cache")
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("ASSAY_CACHE", None)
        else:
            os.environ["ASSAY_CACHE"] = before


def _child(command: list[str], space: Workspace, faults: str) -> None:
    threads = str(torch.get_num_threads())  # the same intra-op pool as this process: same sums
    env = child_env(
        faults,
        {
            **os.environ,
            "ASSAY_CACHE": str(space.runs / "cache"),
            "OMP_NUM_THREADS": threads,
            "ASSAY_DIST_TIMEOUT_S": "120",
        },
    )
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:
        raise AssertionError(f"{command[-4:]} exited {done.returncode}: {done.stderr[-1500:]}")


def run_cell(cell: Cell, space: Workspace, name: str, faults: str = "") -> Outcome:
    """Train ``cell`` as a user would launch it, with ``faults`` armed; fresh output folder."""
    out = space.runs / name
    shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    config = out.parent / f"{out.name}.yaml"
    config.write_text(yaml.safe_dump(train_config(cell, space, out)))
    cli = [sys.executable, "-m", "assay.cli", "train", str(config), "--no-progress"]
    stop = ["--stop-at", str(STOP)] if cell["interruption"] == "resumed" else []
    if cell["distributed"] != "single":
        _child([*TORCHRUN, *cli[1:], *stop], space, faults)
    else:
        _in_process(config, faults, STOP if stop else None, space)
    if stop:
        _child([*cli, "--resume", str(out)], space, faults)
    return read_outcome(out)


def _in_process(config: Path, faults: str, stop_at: int | None, space: Workspace) -> None:
    from assay.cli import main

    # each run compiles afresh, as its own process would: no graph, guard or recompile count
    # carried over from the last run in this process
    torch._dynamo.reset()
    stop = ["--stop-at", str(stop_at)] if stop_at else []
    with _environment(space), arm(faults):
        code = main(["train", str(config), "--no-progress", *stop])
    if code != 0:
        raise AssertionError(f"assay train {config.name} exited {code}")


def read_outcome(out: Path) -> Outcome:
    lines = (out / "metrics.jsonl").read_text().splitlines()
    losses = [json.loads(line)["loss"] for line in lines]
    latest = (out / "latest").read_text().strip()
    return Outcome(losses, load_file(str(out / latest / "trainables.safetensors")))


def reference_run(cell: Cell, space: Workspace, cache: dict[str, Outcome]) -> Outcome:
    """The resident, straight-through, one-process run with the cell's numerics (run once per
    distinct reference)."""
    reference = reference_of(cell)
    key = cell_name(reference)
    if key not in cache:
        cache[key] = run_cell(reference, space, f"ref-{key}")
    return cache[key]


def unequal(a: Outcome, b: Outcome) -> int:
    """Tensors and losses that are not bitwise equal: each step's loss counts as one, each
    trainable tensor as one."""
    if a.trainables.keys() != b.trainables.keys() or len(a.losses) != len(b.losses):
        return len(a.losses) + len(a.trainables)
    losses = sum(x != y for x, y in zip(a.losses, b.losses, strict=True))
    return losses + sum(not torch.equal(a.trainables[k], b.trainables[k]) for k in a.trainables)


def largest_difference(a: Outcome, b: Outcome) -> float:
    """The largest absolute difference over every step's loss and every trainable element."""
    if a.trainables.keys() != b.trainables.keys() or len(a.losses) != len(b.losses):
        return float("inf")
    gaps = [abs(x - y) for x, y in zip(a.losses, b.losses, strict=True)]
    gaps += [float((a.trainables[k] - b.trainables[k]).abs().max()) for k in a.trainables]
    return max(gaps)


def tensors(outcome: Outcome) -> int:
    return len(outcome.losses) + len(outcome.trainables)
