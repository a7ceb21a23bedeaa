"""assay: memory-lean fine-tuning of Llama-family models, with gates that qualify every claim."""

from __future__ import annotations

import os
from typing import Any

from assay.errors import AssayError

if os.environ.get("ASSAY_GATE_IMPORTS"):  # a child of a gate test: report the code it ran
    from assay.qualify.child_imports import report_at_exit

    report_at_exit()

_LAZY = {
    "Decoder": "assay.model",
    "ModelConfig": "assay.model",
    "load": "assay.loading",
    "attach": "assay.adapters",
    "StreamedModel": "assay.stream",
    "Trainer": "assay.train.loop",
}

__all__ = ["AssayError", "__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    # torch loads only when the trainer API is used, so the gate plugin stays light.
    if name == "__version__":  # a metadata scan: paid only by callers that ask for it
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("assay")
        except PackageNotFoundError:  # running from a source tree that was never installed
            return "0.0.0"
    if name in _LAZY:
        import importlib

        try:
            module = importlib.import_module(_LAZY[name])
        except ModuleNotFoundError as err:
            if err.name in ("torch", "numpy", "safetensors", "gguf", "yaml", "tokenizers"):
                raise AssayError(
                    f"assay.{name} needs the trainer's dependencies ({err.name} is missing): "
                    'pip install "assay[train]"'
                ) from err
            raise
        return getattr(module, name)
    raise AttributeError(f"module 'assay' has no attribute {name!r}")
