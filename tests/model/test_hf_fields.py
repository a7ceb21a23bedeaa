"""The config.json field table (issue 51): every field that changes the math is read or refused
in one line naming the file, the key and the value; no value outside a row's accepted set loads,
no number past its range sizes anything, and docs/models.md prints the table as it is."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assay.errors import AssayError
from assay.model.config import LIMITS, config_from_hf
from assay.model.hf_fields import ABSENT, FAMILIES, RULES, FieldRule, rules_for

WHERE = "model/config.json"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "models.md"
GOOD = {
    "vocab_size": 320,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "pad_token_id": 0,  # Phi-3's default (32000) is outside this vocabulary
}
REFUSING = [(rule, family) for rule in RULES if rule.accepts for family in rule.families]
ANY_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=True),
    st.sampled_from(["silu", "swish", "gelu", "gelu_pytorch_tanh", "relu", "default", "llama3"]),
    st.sampled_from(["linear", "dynamic", "yarn", "longrope", "su", ""]),
    st.text(max_size=6),
    st.lists(st.integers(0, 3), max_size=2),
)


def _config(family: str, **fields) -> dict:
    return json.loads(json.dumps({"model_type": family, **GOOD, **fields}))


def _with(family: str, rule: FieldRule, value) -> dict:
    if rule.key.endswith("rope_scaling.rope_type"):
        return _config(family, rope_scaling={"rope_type": value, "factor": 2.0})
    if rule.key == "rope_parameters.<kind>":
        # the row reads which layer kind the rope is keyed by: any key of one is refused
        return _config(family, rope_parameters={"full_attention": {"rope_theta": 10.0}})
    return _config(family, **{rule.key: value})


def _per_layer(rule: FieldRule, value):
    """A drawn layer_types list as one kind per layer (its first repeated), so that the row
    alone judges it: another length is refused apart, in every family."""
    if rule.key == "layer_types" and isinstance(value, list) and value:
        return value[:1] * GOOD["num_hidden_layers"]
    return value


def _refusal(config: dict) -> str:
    with pytest.raises(AssayError) as info:
        config_from_hf(config, WHERE)
    message = str(info.value)
    assert "\n" not in message and message.startswith(WHERE), message
    return message


@settings(max_examples=300, deadline=None)
@given(case=st.sampled_from(REFUSING), value=ANY_VALUE)
def test_no_value_a_row_refuses_loads(case, value):
    rule, family = case
    value = _per_layer(rule, value)
    if rule.accepts(value):
        config_from_hf(_with(family, rule, value), WHERE)  # inside the row: it loads
        return
    message = _refusal(_with(family, rule, value))
    assert rule.key.split(".")[-1] in message and "not supported" in message, message


@pytest.mark.parametrize(("rule", "family"), REFUSING, ids=lambda x: getattr(x, "key", x))
def test_every_refusing_row_accepts_its_absence(rule, family):
    assert rule.accepts(ABSENT)
    config_from_hf(_config(family), WHERE)


def test_a_gelu_model_is_refused_by_key_and_value():
    message = _refusal(_config("llama", hidden_act="gelu"))
    assert message == (
        f"{WHERE}: hidden_act 'gelu' is not supported for llama; expected silu or swish (both SiLU)"
    )


# config.json key -> the ModelConfig field whose range bounds it, shared with the gate's cases
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "robustness"))
from config_cases import RANGED as NUMBERS  # noqa: E402


@settings(max_examples=120, deadline=None)
@given(
    key=st.sampled_from(sorted(NUMBERS)),
    above=st.one_of(st.floats(1.0001, 1e40), st.integers(2, 10**30)),
)
def test_no_number_past_its_range_loads(key, above):
    value = LIMITS[NUMBERS[key]] * above
    value = int(value) if float(value).is_integer() and key not in ("rms_norm_eps",) else value
    message = _refusal(_config("llama", **{key: value}))
    assert key in message and "up to" in message, message


def test_a_1e30_layer_count_is_refused_before_anything_is_sized():
    assert "num_hidden_layers must be a positive integer up to 1,024" in _refusal(
        _config("llama", num_hidden_layers=1e30)
    )


def test_the_largest_published_shapes_are_inside_the_ranges():
    # Llama-3 405B's dimensions and Gemma 3's vocabulary (as a llama-shaped header)
    big = _config(
        "llama",
        vocab_size=262_144,
        hidden_size=16_384,
        intermediate_size=53_248,
        num_hidden_layers=126,
        num_attention_heads=128,
        num_key_value_heads=8,
        max_position_embeddings=131_072,
        rope_theta=500_000.0,
    )
    assert config_from_hf(big, WHERE).num_layers == 126


def test_sliding_window_is_read_as_transformers_reads_each_family():
    # Llama's forward ignores a window and transformers' cache applies it: refused, unless
    # layer_types names every layer full attention (the cache then ignores it too)
    assert "two meanings of one file" in _refusal(_config("llama", sliding_window=8))
    full = _config("llama", sliding_window=8, layer_types=["full_attention"] * 4)
    assert config_from_hf(full, WHERE).sliding_window is None
    assert config_from_hf(_config("mistral"), WHERE).sliding_window == 4096
    assert config_from_hf(_config("mistral", sliding_window=None), WHERE).sliding_window is None
    assert config_from_hf(_config("mistral", sliding_window=64), WHERE).sliding_window == 64
    assert config_from_hf(_config("qwen2", sliding_window=64), WHERE).sliding_window is None
    every = _config("qwen2", use_sliding_window=True, sliding_window=64, max_window_layers=0)
    assert config_from_hf(every, WHERE).sliding_window == 64
    none = _config("qwen2", use_sliding_window=True, sliding_window=64, max_window_layers=4)
    assert config_from_hf(none, WHERE).sliding_window is None
    mixed = _config("qwen2", use_sliding_window=True, sliding_window=64, max_window_layers=2)
    assert "2 sliding and 2 full-attention layers" in _refusal(mixed)
    kinds = ["sliding_attention", "full_attention"] * 2
    listed = _config("qwen2", use_sliding_window=True, sliding_window=64, layer_types=kinds)
    assert "layer_types" in _refusal(listed)
    assert "layer_types" in _refusal(_config("mistral", layer_types=["full_attention"] * 4))
    for odd in (
        {"use_sliding_window": "yes"},
        {"use_sliding_window": True, "max_window_layers": "2"},
        {"use_sliding_window": True, "layer_types": [["full_attention"]] * 4},
        {"layer_types": ["full_attention"] * 3},
    ):
        message = _refusal(_config("qwen2", **odd))
        assert list(odd)[-1] in message, message


def test_the_windows_match_transformers_configs():
    from transformers import MistralConfig, Qwen2Config

    for family, made in (
        ("mistral", MistralConfig(**{k: v for k, v in GOOD.items()})),
        (
            "qwen2",
            Qwen2Config(**GOOD, use_sliding_window=True, sliding_window=64, max_window_layers=0),
        ),
    ):
        config = config_from_hf(json.loads(made.to_json_string()), WHERE)
        kinds = set(getattr(made, "layer_types", None) or ["sliding_attention"])
        theirs = made.sliding_window if kinds == {"sliding_attention"} else None
        assert config.sliding_window == theirs, family


def test_mistral_and_qwen2_ignore_attention_bias_as_transformers_does():
    assert not config_from_hf(_config("mistral", attention_bias=True), WHERE).attention_bias
    assert config_from_hf(_config("qwen2", attention_bias=False), WHERE).attention_bias
    assert "attention_bias" in _refusal(_config("llama", attention_bias=True))


def _doc_rows() -> set[tuple[str, str, str]]:
    rows = set()
    for line in DOCS.read_text().splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 4 and not set(cells[0]) <= {"-", " "}:
            rows.add((cells[0], cells[1], cells[2]))
    return rows


def test_docs_print_the_table_as_it_is():
    table = {(r.key, ", ".join(r.families), r.treatment) for r in RULES}
    assert table <= _doc_rows(), sorted(table - _doc_rows())


def test_every_family_has_a_row_for_the_math_keys_the_issue_names():
    named = (
        "hidden_act",
        "attention_bias",
        "mlp_bias",
        "rope_scaling.rope_type",
        "partial_rotary_factor",
        "head_dim",
        "tie_word_embeddings",
        "attn_logit_softcapping",
        "final_logit_softcapping",
        "query_pre_attn_scalar",
        "norm kind (no key)",
        "embedding scale (no key)",
    )
    for family in FAMILIES:
        # a row may name several keys ("rope_parameters.<kind>.rope_type, rope_scaling...")
        keys = {key for rule in rules_for(family) for key in rule.key.split(", ")}
        window = any("sliding_window" in key for key in keys)
        assert window and set(named) <= keys, (family, set(named) - keys)


def test_ranges_are_finite_and_positive():
    assert all(math.isfinite(v) and v > 0 for v in LIMITS.values())


# The outside review's breaks (issue 51), each a class: a value that changes the math must not
# load silently, and a value of the wrong kind is one line, whatever its size.
@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "rope_scaling.rope_type 'linear'"),
        ({"rope_scaling": {"type": "yarn", "factor": 2.0}}, "rope_scaling.rope_type 'yarn'"),
        (
            {"rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.5}},
            "partial_rotary_factor 0.5",
        ),
        ({"tie_word_embeddings": "false"}, "tie_word_embeddings must be true or false"),
        ({"tie_word_embeddings": 0}, "tie_word_embeddings must be true or false"),
        ({"head_dim": 0}, "head_dim must be a positive integer"),
        ({"num_key_value_heads": 0}, "num_key_value_heads must be a positive integer"),
        ({"rms_norm_eps": 10**400}, "rms_norm_eps must be a positive number"),
        ({"rope_theta": -(10**400)}, "rope_theta must be a positive number"),
        ({"rope_parameters": [1, 2]}, "rope_parameters must be an object"),
    ],
)
def test_a_value_that_would_change_the_math_is_refused_not_dropped(fields, named):
    assert named in _refusal(_config("llama", **fields))


def test_legacy_rope_scaling_over_rope_parameters_is_read_as_transformers_merges_it():
    llama3 = {"type": "llama3", "factor": 8.0, "original_max_position_embeddings": 64}
    merged = _config("llama", rope_parameters={"rope_type": "default"}, rope_scaling=llama3)
    assert config_from_hf(merged, WHERE).rope_scaling["factor"] == 8.0


def test_llama3_without_an_original_context_takes_the_models_own():
    rope = {"rope_type": "llama3", "factor": 8.0, "rope_theta": 500000.0}
    config = config_from_hf(_config("llama", rope_parameters=rope), WHERE)
    assert (
        config.rope_scaling["original_max_position_embeddings"] == GOOD["max_position_embeddings"]
    )
