"""A graceful stop under torchrun: one rank signalled, every rank stops after the same step, the
checkpoint is whole, and a plain process resumes it to the end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from assay.train.checkpoint.directory import load_checkpoint
from assay_testing.text_run import save_text_run

STEPS = 200


def _rank_of(pid: int) -> str | None:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    found = [e for e in environ if e.startswith(b"RANK=")]
    return found[0].decode().split("=", 1)[1] if found else None


def _workers(parent: int) -> dict[str, int]:
    """rank -> pid of torchrun's worker processes (children of its agent)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
                rank = _rank_of(int(entry.name))
                if rank is not None:
                    found[rank] = int(entry.name)
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds worker processes through /proc")
def test_one_signalled_rank_stops_every_rank_after_the_same_step(tmp_path):
    run = tmp_path / "run"
    body = {
        **save_text_run(tmp_path, seed=4),
        "storage": "float32",
        "steps": STEPS,
        "seed": 3,
        "adapter": {"method": "lora", "rank": 2, "alpha": 4, "targets": ["q_proj"]},
        "batch": {"micro_batch": 2},
        "distributed": {"strategy": "ddp"},
        "output": {"dir": str(run), "save_every": 1000},
    }
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(body))
    env = {**os.environ, "ASSAY_DIST_TIMEOUT_S": "120", "OMP_NUM_THREADS": "1"}
    launcher = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            "-m",
            "assay.cli",
            "train",
            str(config),
            "--no-progress",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    metrics, deadline = run / "metrics.jsonl", time.monotonic() + 300
    while launcher.poll() is None and time.monotonic() < deadline:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 5:
            break
        time.sleep(0.02)
    workers = _workers(launcher.pid)
    assert set(workers) == {"0", "1"}, workers
    os.kill(workers["1"], signal.SIGTERM)  # one rank only: rank 0 must stop with it
    _out, err = launcher.communicate(timeout=300)
    lines = [json.loads(x) for x in metrics.read_text().splitlines()]
    saved = load_checkpoint(run)  # whole: its manifest and every file verify
    assert saved.step == len(lines) == lines[-1]["step"] < STEPS, err[-2000:]
    assert "stopped at step" in err and "another rank was signalled" in err, err[-2000:]
    plain = {**body, "distributed": None}
    config.write_text(yaml.safe_dump(plain))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "assay.cli",
            "train",
            str(config),
            "--resume",
            str(run),
            "--no-progress",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["steps"] == STEPS
