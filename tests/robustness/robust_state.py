"""States the crash harness writes and checks: each one identifies its step, so a torn or
stale write is visible. Shared by the kill child, the tests and the gate."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

PRINTS = {"config": "c" * 64, "dataset": "d" * 64, "model": "m" * 64}
NAIVE_CHUNK = 4096


def write_checkpoint(run_dir: Path, step: int) -> Path:
    """Save checkpoint ``step``: two trainables filled with ``step`` and an AdamW over them."""
    import torch

    from assay.train.checkpoint.directory import save_checkpoint

    params = {f"w{i}": torch.nn.Parameter(torch.full((64, 256), float(step))) for i in range(2)}
    optimizer = torch.optim.AdamW(params.values(), lr=1e-3)
    return save_checkpoint(run_dir, step, params, optimizer, {}, {"position": step}, PRINTS)


def checkpoint_step(run_dir: Path) -> int:
    """The step of the latest checkpoint, after checking its values; raises if unusable."""
    from assay.train.checkpoint.directory import load_checkpoint

    checkpoint = load_checkpoint(run_dir)
    for tensor in checkpoint.trainables.values():
        if not bool((tensor == float(checkpoint.step)).all()):
            raise ValueError(f"{checkpoint.path}: values do not match step {checkpoint.step}")
    return checkpoint.step


def receipt_bytes(step: int) -> bytes:
    """A receipt-like JSON document that carries its own sha256 (so a torn one shows)."""
    body = {"step": step, "pad": "x" * 20000}
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    return json.dumps({**body, "sha256": digest}, sort_keys=True).encode()


def receipts_step(directory: Path) -> int:
    """The highest step among receipts; raises if any visible receipt or the index is torn."""
    steps = []
    for path in sorted(directory.glob("r*.json")):
        data = json.loads(path.read_bytes())
        body = {k: v for k, v in data.items() if k != "sha256"}
        if hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest() != data["sha256"]:
            raise ValueError(f"{path}: torn receipt")
        steps.append(data["step"])
    count = json.loads((directory / "index.json").read_bytes())["count"]
    if count not in steps:
        raise ValueError(f"index names receipt {count}, which is missing")
    return max(steps)


def naive_write(path: Path, step: int) -> None:
    """The control: overwrite in place, chunk by chunk, no temp file and no rename."""
    data = receipt_bytes(step)
    with open(path, "wb") as handle:
        for start in range(0, len(data), NAIVE_CHUNK):
            handle.write(data[start : start + NAIVE_CHUNK])
            handle.flush()
            os.fsync(handle.fileno())


def naive_step(directory: Path) -> int:
    """The step in ``state.json``; raises if the file is torn."""
    data = json.loads((directory / "state.json").read_bytes())
    body = {k: v for k, v in data.items() if k != "sha256"}
    if hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest() != data["sha256"]:
        raise ValueError("torn state")
    return data["step"]
