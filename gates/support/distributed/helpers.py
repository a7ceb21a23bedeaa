"""gate-distributed's launch side (not a gate module): the run configs the children read
(written by :func:`_specification` into spec.json) and the runner of a child process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
TIMEOUT_S = 300


def _config(root: Path, name: str, **changes) -> str:
    config = {
        "model": str(root / "model"),
        "tokenizer": str(root / "bytes.gguf"),
        "adapter": {"method": "lora", "rank": 4, "alpha": 8, "targets": TARGETS},
        "data": {"train": str(root / "train.jsonl"), "format": "text", "seq_len": 64},
        "steps": 1,
        "seed": 3,
        "output": {"dir": str(root / name), "save_every": 100},
        **changes,
    }
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return str(path)


def _specification(root: Path, device: str) -> dict:
    # One update: a single micro-batch of 4 rows, split 2 + 2 over the ranks (each rank pads
    # its own rows). eps 1 and no clipping make AdamW's first update lr*g/(|g|+1), about
    # proportional to the gradient: with the default eps it is lr*sign(g), blind to scale.
    update = {
        "optim": {"lr": 1e-2, "eps": 1.0, "grad_clip": None},
        "batch": {"micro_batch": 4, "grad_accum": 1},
    }
    # Resume: 4 micro-batches of 1 per step, 2 per rank (accumulation without sync).
    resume = {
        "optim": {"lr": 1e-2, "schedule": "cosine", "warmup_steps": 1},
        "batch": {"micro_batch": 1, "grad_accum": 4},
        "steps": 4,
    }
    spec = {
        "device": device,
        "backend": "nccl" if device == "cuda" else "gloo",
        "update_ddp": _config(root, "u-ddp", **update, distributed={"strategy": "ddp"}),
        "update_stream": _config(
            root,
            "u-stream",
            **update,
            stream={"tier": "ram", "buffers": 2},
            distributed={"strategy": "ddp"},
        ),
        "update_fsdp": _config(root, "u-fsdp", **update, distributed={"strategy": "fsdp"}),
        "resume_ws2": _config(root, "ws2", **resume, distributed={"strategy": "ddp"}),
        "resume_ws1": _config(root, "ws1", **resume),
        "ws2_dir": str(root / "ws2"),
        "ws1_dir": str(root / "ws1"),
    }
    for control in ("fresh_optimizer", "per_rank_cursor"):
        spec[f"{control}_config"] = _config(root, control, **resume)
        spec[f"{control}_dir"] = str(root / control)
    return spec


def _run(args: list[str], what: str) -> float:
    env = {**os.environ, "ASSAY_DIST_TIMEOUT_S": "120", "OMP_NUM_THREADS": "1"}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=TIMEOUT_S, env=env
    )
    if done.returncode != 0:
        raise AssertionError(f"{what} exited {done.returncode}: {done.stderr[-3000:]}")
    return time.perf_counter() - started
