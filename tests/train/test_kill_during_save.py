"""SIGKILL at any moment of a checkpoint save leaves the last good checkpoint loadable."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from assay.train.checkpoint.directory import load_checkpoint

CHILD = Path(__file__).with_name("_save_child.py")
PRINTS = {"config": "c" * 64, "dataset": "d" * 64, "model": "m" * 64}


def _spawn(*args: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(CHILD), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _run(*args: object) -> list[str]:
    child = _spawn(*args)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    return out.splitlines()


def _assert_consistent(run_dir: Path, allowed: set[int]) -> int:
    """latest loads, verifies, and its content is exactly the step it claims."""
    ckpt = load_checkpoint(run_dir, fingerprints=PRINTS)
    assert ckpt.step in allowed
    for i, name in enumerate(sorted(ckpt.trainables)):
        assert torch.equal(ckpt.trainables[name], torch.full((256, 512), float(ckpt.step + i)))
    assert ckpt.cursor == {"n": ckpt.step} and ckpt.scheduler_state == {"step": ckpt.step}
    return ckpt.step


def _kill_at_events(tmp_path: Path, iterations: int, seed: int) -> list[tuple[int, int]]:
    run_dir = tmp_path / "run"
    _run(run_dir, 1, -1)
    events = sum(line.startswith("EVENT") for line in _run(tmp_path / "count", 2, -1))
    assert events >= 10  # one fsync per file, renames, the pointer: the save has many moments
    rng = random.Random(seed)
    outcomes = []
    for i in range(iterations):
        good = _assert_consistent(run_dir, {1} | set(range(2, 2 + i)))
        step = good + 1
        kill_at = rng.randint(1, events)
        child = _spawn(run_dir, step, kill_at)
        assert child.stdout is not None
        for line in child.stdout:
            if line.strip() == "PAUSE":
                break
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
        assert child.returncode == -signal.SIGKILL
        now = _assert_consistent(run_dir, {good, step})
        assert load_checkpoint(run_dir / f"step-{good:06d}").step == good  # previous one too
        outcomes.append((kill_at, now))
    return outcomes


def test_sigkill_at_random_save_events_keeps_last_good_checkpoint(tmp_path: Path) -> None:
    outcomes = _kill_at_events(tmp_path, iterations=5, seed=20260)
    assert len(outcomes) == 5


@pytest.mark.slow
def test_sigkill_at_every_save_event_and_at_random_times(tmp_path: Path) -> None:
    _kill_at_events(tmp_path / "events", iterations=20, seed=7)
    run_dir = tmp_path / "timed"
    rng = random.Random(11)
    first = 1
    for _ in range(15):
        child = _spawn(run_dir, first, "loop")
        assert child.stdout is not None
        assert child.stdout.readline().strip() == f"SAVED {first}"  # one complete save
        time.sleep(rng.uniform(0.0, 0.5))
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
        step = _assert_consistent(run_dir, set(range(1, first + 1000)))
        assert step >= first
        first = step + 1
