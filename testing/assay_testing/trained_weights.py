"""Gate claims that the travelling weights (``ASSAY_SMOLLM2_GGUF``) cannot settle."""

from __future__ import annotations

from typing import Any

from assay_testing.real_model import override

TRAVELLING = "not tested (travelling weights)"


def needs_trained_weights(gate: Any, *items: str) -> None:
    """Skip the calling gate test, declaring each item not tested, when the model is the
    ``ASSAY_SMOLLM2_GGUF`` stand-in: a claim about what training *learns* on SmolLM2 cannot
    be judged on seeded random weights, so it is neither passed nor failed there."""
    import pytest

    stand_in = override()
    if stand_in is None:
        return
    for item in items:
        gate.not_tested(item, f"{TRAVELLING}: the model is the stand-in {stand_in.name}")
    pytest.skip(f"{TRAVELLING}: {stand_in.name}")
