"""`assay train` on a model larger than the memory it is given: the workspace (byte tokenizer
and rows), a user's config, and one run inside a memory cgroup (assay_testing.memory_limit),
as gate-scale and harness/bench_scale.py run them. Nothing here judges a number."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]
SEQ = 256
# rows of a little over SEQ bytes, so every step sees SEQ byte tokens
TEXT = "Layer streaming keeps two layers in memory and reads the others from disk. " * 4


def workspace(root: Path) -> dict[str, Path]:
    """The byte tokenizer and the training rows `assay train` reads."""
    from assay_testing.byte_tokenizer import save_byte_tokenizer

    root.mkdir(parents=True, exist_ok=True)
    save_byte_tokenizer(root / "bytes.gguf")
    rows = "".join(json.dumps({"text": f"{i}. {TEXT}"}) + "\n" for i in range(8))
    (root / "train.jsonl").write_text(rows)
    return {"tokenizer": root / "bytes.gguf", "train": root / "train.jsonl", "root": root}


def train_config(
    space: dict[str, Path], model: Path, name: str, *, storage: str, streamed: bool, steps: int = 2
) -> Path:
    """A user's config: LoRA r8 on attention, seq 256, micro-batch 1, chunked CE, ``steps``
    optimizer steps, and (``streamed``) the disk tier with 2 buffers, whose backward recomputes
    each layer from its input: the activation checkpointing the predictor asks for."""
    body: dict[str, Any] = {
        "model": str(model),
        "tokenizer": str(space["tokenizer"]),
        "data": {
            "train": str(space["train"]),
            "format": "text",
            "seq_len": SEQ,
            "truncate": True,
        },
        "storage": storage,
        "steps": steps,
        "seed": 0,
        "adapter": {"method": "lora", "rank": 8, "alpha": 16, "targets": ATTENTION},
        "batch": {"micro_batch": 1},
        "loss": {"type": "chunked_ce"},
        "output": {"dir": str(space["root"] / f"run-{name}"), "save_every": 1000},
    }
    if streamed:
        body["stream"] = {"tier": "disk", "buffers": 2, "recompute": True}
    path = space["root"] / f"{name}.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def drop_page_cache() -> str | None:
    """Empty the page cache; None when done, else why not."""
    import os

    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("1")
    except OSError as error:
        return f"/proc/sys/vm/drop_caches: {error.strerror}"
    return None


def limited_train(
    config: Path, limit_bytes: int, *, cache: Path, force: bool = False, timeout: float = 7200
) -> dict[str, Any]:
    """`assay train CONFIG --json` inside a memory cgroup of ``limit_bytes``: how it ended
    (``run``, assay_testing.memory_limit.LimitedRun), the steps it completed (0 unless it
    exited 0) and, from its metrics, the seconds of each step.

    The page cache is emptied first (``page_cache``: None when done, else why not): a file
    page already cached is charged to whichever group read it first, so a model file another
    process had read would not count against this run's limit at all. Emptied, every page the
    run maps or reads is charged to it (and reclaimed, not killed for, when clean)."""
    from assay_testing.memory_limit import run_limited

    page_cache = drop_page_cache()
    argv = ["assay", "train", str(config), "--json", *(["--force"] if force else [])]
    env = {"ASSAY_CACHE": str(cache), "ASSAY_PROGRESS": "0"}
    run = run_limited(argv, limit_bytes, env=env, timeout=timeout)
    steps, seconds = 0, []
    if run.returncode == 0:
        summary = json.loads(run.stdout)
        steps = summary["steps"]
        metrics = Path(summary["checkpoint"]).parent / "metrics.jsonl"
        seconds = [
            json.loads(line)["seconds"] for line in metrics.read_text().splitlines() if line.strip()
        ]
    return {
        "run": run,
        "steps": steps,
        "step_seconds": seconds,
        "config": config,
        "page_cache": page_cache,
    }
