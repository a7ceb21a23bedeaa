"""assay.memory: owned-byte accounting, peak prediction (no torch) and measurement."""

from typing import Any

__all__ = ["owned_bytes", "packed_parameter_count"]


def __getattr__(name: str) -> Any:
    # accounting needs torch; predict must stay importable without it.
    if name in __all__:
        from assay.memory import accounting

        return getattr(accounting, name)
    raise AttributeError(f"module 'assay.memory' has no attribute {name!r}")
