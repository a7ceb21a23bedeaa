"""Random models of published shapes: loadable by assay and transformers with the same logits,
written once and reused, rebuilt when the cached folder is not the one asked for."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from assay.memory.plan import header_config
from assay.model.shapes import SHAPES, named_shape
from assay.storage.load import load
from assay_testing.scale_models import random_model, write_random_model

IDS = torch.tensor([[1, 5, 17, 63, 2, 40]])


def narrow(name: str):
    """``name``'s shape with its rope, head tying and norms, at a size that writes in
    milliseconds (what differs between the shapes besides size is kept)."""
    return dataclasses.replace(
        named_shape(name, 2),
        vocab_size=64,
        hidden_size=32,
        intermediate_size=48,
        num_heads=4,
        num_kv_heads=2,
        head_dim=8,
    )


def logits_pair(folder, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    ours = load(folder)
    theirs = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        return ours(ids), theirs(input_ids=ids).logits


@pytest.mark.parametrize("name", list(SHAPES))
def test_assay_and_transformers_read_the_same_model(tmp_path, name):
    config = narrow(name)
    folder = write_random_model(config, tmp_path / name)
    # the folder is of that shape as assay reads it: sizes, rope (llama3 scaling), tying, norms
    read = header_config(folder)
    assert read == dataclasses.replace(config, bos_token_id=1, eos_token_id=2)
    ours, theirs = logits_pair(folder, IDS)
    assert ours.shape == (1, IDS.shape[1], 64)
    assert torch.equal(ours, theirs)
    assert ours.std() > 0


def test_a_written_model_is_reused_and_a_mismatched_one_rebuilt(tmp_path):
    config = narrow("smollm2-135m")
    folder = write_random_model(config, tmp_path / "m", seed=3)
    weights = folder / "model.safetensors"
    first = weights.read_bytes()
    weights.write_bytes(first[:-4] + b"\0\0\0\0")  # a change the fingerprint cannot see
    assert write_random_model(config, folder, seed=3) == folder
    assert weights.read_bytes()[-4:] == b"\0\0\0\0"  # reused, not rewritten
    marker = folder / "fingerprint.json"
    marker.write_text(json.dumps({**json.loads(marker.read_text()), "seed": 4}))
    write_random_model(config, folder, seed=3)
    assert weights.read_bytes() == first  # rebuilt, byte for byte the same
    other = write_random_model(config, tmp_path / "other", seed=4)
    assert (other / "model.safetensors").read_bytes() != first
    assert not (tmp_path / "m.tmp").exists()


def test_random_model_names_the_folder_by_shape_depth_and_seed(tmp_path):
    with pytest.raises(Exception, match="unknown model shape"):
        random_model("no-such-model", cache=tmp_path)
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_a_one_layer_tinyllama_matches_transformers():
    folder = random_model("tinyllama-1.1b", 1)
    assert folder.name == "tinyllama-1.1b-L1-s0"
    ours, theirs = logits_pair(folder, torch.tensor([[1, 450, 4996, 17354, 31999]]))
    assert ours.shape == (1, 5, 32000) and torch.equal(ours, theirs)
