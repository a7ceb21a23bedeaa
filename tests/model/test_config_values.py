"""The rule for a model's config.json numbers: each is what the decoder can compute with, or the
file is refused in one line naming the file and the field. No value is silently rounded (2.5
layers is not 2), coerced ("2", true) or let through to train on NaN (a zero or negative
epsilon, rope theta or scaling factor)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assay.errors import AssayError
from assay.model.config import config_from_hf

WHERE = "model/config.json"
GOOD = {
    "model_type": "llama",
    "vocab_size": 320,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
}
LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 128,
}
INTEGERS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "max_position_embeddings",
)
POSITIVE_REALS = ("rms_norm_eps", "rope_theta")
FRACTIONAL = lambda v: not float(v).is_integer()  # noqa: E731  (NaN and inf too)
SCALING = ("factor", "low_freq_factor", "high_freq_factor")
NOT_A_NUMBER = st.one_of(
    st.text(max_size=4), st.booleans(), st.none(), st.lists(st.integers(), max_size=2)
)
NOT_POSITIVE = st.one_of(
    st.floats(max_value=0.0), st.just(math.nan), st.just(math.inf), st.integers(max_value=0)
)


def _refused(config: dict, field: str) -> None:
    with pytest.raises(AssayError) as info:
        config_from_hf(json.loads(json.dumps(config)), WHERE)
    message = str(info.value)
    assert "\n" not in message and message.startswith(WHERE) and field in message, message


def test_the_good_config_loads():
    assert config_from_hf(GOOD, WHERE).num_layers == 2
    scaled = config_from_hf({**GOOD, "rope_scaling": LLAMA3}, WHERE)
    assert scaled.rope_scaling["factor"] == 8.0


@settings(max_examples=60, deadline=None)
@given(
    field=st.sampled_from(INTEGERS),
    value=st.one_of(NOT_A_NUMBER, st.integers(max_value=0), st.floats().filter(FRACTIONAL)),
)
def test_a_size_that_is_no_positive_integer_is_refused(field, value):
    _refused({**GOOD, field: value}, field)


@settings(max_examples=60, deadline=None)
@given(field=st.sampled_from(POSITIVE_REALS), value=st.one_of(NOT_A_NUMBER, NOT_POSITIVE))
def test_an_epsilon_or_theta_that_is_no_positive_number_is_refused(field, value):
    _refused({**GOOD, field: value}, field)


@settings(max_examples=40, deadline=None)
@given(field=st.sampled_from(SCALING), value=st.one_of(NOT_A_NUMBER, NOT_POSITIVE))
def test_a_rope_scaling_factor_that_is_no_positive_number_is_refused(field, value):
    _refused({**GOOD, "rope_scaling": {**LLAMA3, field: value}}, field)


def test_an_integral_float_is_an_integer():
    assert config_from_hf({**GOOD, "num_hidden_layers": 2.0}, WHERE).num_layers == 2


GGUF = {
    "general.architecture": "llama",
    "llama.embedding_length": 64,
    "llama.attention.head_count": 4,
    "llama.attention.head_count_kv": 2,
    "llama.feed_forward_length": 128,
    "llama.block_count": 2,
    "llama.vocab_size": 320,
}


def _gguf(**meta):
    from assay.model.config import config_from_gguf

    return config_from_gguf(
        {**GGUF, **meta}, "m.gguf", has_output=True, has_qkv_bias=False, rope_freq_divisors=None
    )


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("llama.rope.scaling.type", "linear", "llama.rope.scaling.type 'linear'"),
        ("llama.rope.scaling.type", "yarn", "llama.rope.scaling.type 'yarn'"),
        ("llama.expert_count", 8, "llama.expert_count 8"),
        ("llama.rope.dimension_count", 8, "llama.rope.dimension_count 8"),
        ("llama.attention.layer_norm_epsilon", 1e-5, "llama.attention.layer_norm_epsilon"),
        ("llama.block_count", 10**9, "llama.block_count must be a positive integer up to 1,024"),
        ("llama.rope.freq_base", 1e30, "llama.rope.freq_base must be a positive number up to"),
    ],
)
def test_gguf_metadata_that_changes_the_math_is_read_or_refused_by_key(key, value, expected):
    """Issue 51 on the GGUF surface: rope scaling, experts, partial rotary and LayerNorm are
    refused naming the key and value; the control, the same header without them, loads."""
    assert _gguf().num_layers == 2
    assert _gguf(**{"llama.rope.scaling.type": "none", "llama.rope.dimension_count": 16})
    with pytest.raises(AssayError) as info:
        _gguf(**{key: value})
    message = str(info.value)
    assert message.startswith("m.gguf: ") and expected in message and "\n" not in message
