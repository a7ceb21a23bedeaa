"""Shared inputs for the training tests: a tiny Llama with a randomized LoRA on every linear."""

from __future__ import annotations

import pytest

import assay
from assay.adapters import attach
from assay.adapters.perturb import randomize_adapters


@pytest.fixture(scope="module")
def tiny_adapted(tmp_path_factory):
    """A tiny llama3 (fp32) with a rank-4 LoRA on all linears, B randomized (not a no-op)."""
    from assay_testing.tiny import save_tiny

    path = save_tiny("llama3", tmp_path_factory.mktemp("pref"), seed=4, gguf=False)["hf"]
    model = assay.load(path)
    attach(model, "lora", rank=4, alpha=8, targets="all-linear")
    return randomize_adapters(model, seed=1)
