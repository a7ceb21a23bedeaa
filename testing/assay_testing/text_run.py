"""A tiny text-training workspace: a random Llama-3 model, the byte tokenizer and JSONL rows,
so tests and gates run `assay train` end to end with nothing downloaded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Rows of very different lengths, so ranks that split a batch score different numbers of
# tokens and a per-rank token normalisation would show.
ROWS = (
    "Hi.",
    "Streaming keeps two layers on the device at a time.",
    "NF4 stores four bits.",
    "A gate is a claim, a measurement and a control.",
    "Resume.",
    "The reference policy is the same model, adapters off.",
    "Rank zero logs.",
    "Checkpoints are written to a temp dir, fsynced, renamed.",
)


def save_text_run(root: Path, *, seed: int) -> dict[str, Any]:
    """Write a tiny llama3 HF model, ``bytes.gguf`` and ``train.jsonl`` (``ROWS``) under
    ``root``; return the config keys that point at them (``model``, ``tokenizer``, ``data``
    with seq_len 64), for a caller to merge its own settings into."""
    from assay_testing.byte_tokenizer import save_byte_tokenizer
    from assay_testing.tiny import save_tiny

    model = save_tiny("llama3", root, seed=seed, gguf=False)["hf"]
    save_byte_tokenizer(root / "bytes.gguf")
    (root / "train.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in ROWS))
    return {
        "model": str(model),
        "tokenizer": str(root / "bytes.gguf"),
        "data": {"train": str(root / "train.jsonl"), "format": "text", "seq_len": 64},
    }
