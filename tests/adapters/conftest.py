"""Shared inputs for the adapter tests: a tiny Qwen2 (biased q/k/v, tied head) and token ids."""

from __future__ import annotations

import pytest
import torch

import assay


@pytest.fixture(scope="module")
def qwen2_dir(tiny_models):
    return tiny_models["qwen2"]["hf"]


@pytest.fixture(scope="module")
def ids() -> torch.Tensor:
    return torch.randint(0, 320, (2, 20), generator=torch.Generator().manual_seed(7))


@pytest.fixture
def fresh(qwen2_dir):
    """A callable returning a freshly loaded tiny Qwen2 (optionally with a storage)."""
    return lambda storage="float32": assay.load(qwen2_dir, storage=storage)
