"""assay: memory-lean fine-tuning of Llama-family models, with gates that qualify every claim."""

from __future__ import annotations

from typing import Any

from assay.errors import AssayError

# The distribution's name on PyPI (`pip install assay-qualify`); the import name stays `assay`.
# The name `assay` is another project's, which imports as `assay` too: docs/install.md.
DISTRIBUTION = "assay-qualify"

_LAZY = {
    "Decoder": "assay.model",
    "ModelConfig": "assay.model",
    "load": "assay.storage.load",
    "attach": "assay.adapters",
    "StreamedModel": "assay.stream",
    "Trainer": "assay.train.loop",
}

__all__ = ["DISTRIBUTION", "AssayError", "__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    # torch loads only when the trainer API is used, so the gate plugin stays light.
    if name == "__version__":  # a metadata scan: paid only by callers that ask for it
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version(DISTRIBUTION)
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
                    f'pip install "{DISTRIBUTION}[train]"'
                ) from err
            raise
        return getattr(module, name)
    raise AttributeError(f"module 'assay' has no attribute {name!r}")
