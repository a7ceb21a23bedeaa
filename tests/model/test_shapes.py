"""Named published shapes: each one's size is the released checkpoint's, at any depth."""

from __future__ import annotations

import dataclasses

import pytest

from assay.errors import ConfigError
from assay.model.config import SIZE_FIELDS
from assay.model.shapes import SHAPES, named_shape, parameter_count

# Parameter counts of the released checkpoints (their model cards and safetensors indexes).
PUBLISHED = {
    "smollm2-135m": 134_515_008,
    "tinyllama-1.1b": 1_100_048_384,
    "llama-3.2-3b": 3_212_749_824,
    "llama-2-7b": 6_738_415_616,
}


def test_every_named_shape_has_its_published_parameter_count():
    assert set(SHAPES) == set(PUBLISHED)
    for name, count in PUBLISHED.items():
        assert parameter_count(named_shape(name)) == count, name


@pytest.mark.parametrize("name", list(SHAPES))
def test_the_count_is_the_llama_formula(name):
    """Embedding (and an untied head), per layer q/o (hidden x heads*head_dim), k/v (GQA),
    gate/up/down and two norms, and the final norm."""
    c = named_shape(name)
    q = c.num_heads * c.head_dim
    kv = c.num_kv_heads * c.head_dim
    layer = 2 * c.hidden_size * q + 2 * c.hidden_size * kv
    layer += 3 * c.hidden_size * c.intermediate_size + 2 * c.hidden_size
    heads = 1 if c.tie_word_embeddings else 2
    expected = heads * c.vocab_size * c.hidden_size + c.num_layers * layer + c.hidden_size
    assert parameter_count(c) == expected


def test_the_bundled_smollm2_header_has_the_named_shape(smollm2_path):
    from assay.memory.plan import header_config

    header = header_config(smollm2_path)
    for key in (*SIZE_FIELDS, "tie_word_embeddings", "rope_theta"):
        assert getattr(header, key) == getattr(SHAPES["smollm2-135m"], key), key


def test_layers_changes_only_the_depth():
    full, one, three = (named_shape("tinyllama-1.1b", n) for n in (None, 1, 3))
    assert full.num_layers == 22 and one.num_layers == 1 and three.num_layers == 3
    assert dataclasses.replace(one, num_layers=22) == full
    per_layer = parameter_count(three) - parameter_count(one)
    assert per_layer % 2 == 0 and per_layer > 0
    assert parameter_count(full) == parameter_count(one) + 21 * per_layer // 2


def test_an_unknown_name_lists_the_known_ones():
    with pytest.raises(ConfigError, match="unknown model shape 'tinyllama'") as found:
        named_shape("tinyllama")
    assert all(name in str(found.value) for name in SHAPES)


@pytest.mark.parametrize("layers", [0, -1, True, 2.0, "2", 1025, 10**30])
def test_layers_must_be_an_integer_up_to_the_deepest_supported(layers):
    with pytest.raises(ConfigError, match=r"layers must be an integer in 1\.\.1024"):
        named_shape("smollm2-135m", layers)
