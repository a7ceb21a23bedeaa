"""A LoRA+ run stopped and resumed in a new process ends bitwise where it ends straight through:
its B group keeps lr_ratio times the schedule's learning rate across the resume."""

from __future__ import annotations

import subprocess
import sys

import torch
import yaml
from safetensors.torch import load_file

from assay.cli import main
from assay_testing.text_run import save_text_run


def _config(root, name: str) -> str:
    config = {
        **save_text_run(root, seed=4),
        "adapter": {"method": "loraplus", "rank": 2, "alpha": 4, "lr_ratio": 8},
        "optim": {"lr": 1e-2, "schedule": "cosine", "warmup_steps": 1},
        "batch": {"micro_batch": 2},
        "steps": 4,
        "seed": 3,
        "output": {"dir": str(root / name)},
    }
    (root / f"{name}.yaml").write_text(yaml.safe_dump(config))
    return str(root / f"{name}.yaml")


def _final(run_dir) -> dict[str, torch.Tensor]:
    latest = (run_dir / "latest").read_text().strip()
    return load_file(str(run_dir / latest / "trainables.safetensors"))


def test_a_resumed_loraplus_run_is_bitwise_exact(tmp_path):
    straight = _config(tmp_path, "straight")
    assert main(["train", straight, "--no-progress"]) == 0
    resumed = _config(tmp_path, "resumed")
    assert main(["train", resumed, "--no-progress", "--stop-at", "2"]) == 0
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "assay.cli",
            "train",
            resumed,
            "--resume",
            str(tmp_path / "resumed"),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    a, b = _final(tmp_path / "straight"), _final(tmp_path / "resumed")
    assert a.keys() == b.keys() and [k for k in a if not torch.equal(a[k], b[k])] == []
