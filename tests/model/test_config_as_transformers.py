"""A config.json is read as transformers 5 reads it, or refused (the invariant and the cases in
:mod:`assay_testing.transformers_configs`): generated files for every family, and the files of
issue 51's outside attack, which loaded while transformers refuses them or read the rope
otherwise."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assay_testing.transformers_configs import (
    CHOICES,
    CLASSES,
    TINY,
    as_assay,
    as_transformers,
    config_file,
    misjudgement,
)

pytest.importorskip("transformers")


@st.composite
def config_files(draw) -> dict:
    family = draw(st.sampled_from(sorted(CLASSES)))
    keys = draw(st.lists(st.sampled_from(sorted(CHOICES)), max_size=5, unique=True))
    return config_file(family, {key: draw(st.sampled_from(CHOICES[key])) for key in keys})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hf=config_files())
def test_a_config_is_read_as_transformers_reads_it_or_refused(hf):
    assert misjudgement(hf) is None, hf


@pytest.mark.parametrize(
    "fields",
    [
        {"model_type": "qwen3", "head_dim": None},
        {"model_type": "qwen3", "attention_bias": 0},
        {"model_type": "granite", "mlp_bias": 0},
        {
            "model_type": "qwen3",
            "use_sliding_window": False,
            "sliding_window": 4,
            "layer_types": ["full_attention", "sliding_attention"],
        },
    ],
)
def test_the_attacks_files_are_refused(fields):
    """Files issue 51's outside attack loaded although transformers refuses them."""
    hf = {**TINY, **fields}
    assert as_transformers(hf) is None
    assert isinstance(as_assay(hf), str)


def test_olmo2_reads_its_own_epsilon_default():
    """transformers' OLMo 2 and Phi-3 take 1e-5 where config.json leaves rms_norm_eps out, every
    other family 1e-6."""
    for family in sorted(CLASSES):
        hf = config_file(family, {})
        assert as_assay(hf)["rms_norm_eps"] == as_transformers(hf)["rms_norm_eps"], family
    assert as_assay({"model_type": "olmo2", **TINY})["rms_norm_eps"] == 1e-5


def test_the_attacks_rope_is_transformers_rope():
    """A legacy rope_scaling replaces rope_parameters whole, so the top-level rope_theta
    applies (the attack's file: assay took rope_parameters' theta, 86% off in the logits)."""
    hf = {
        "model_type": "qwen3",
        **TINY,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "rope_scaling": {"rope_type": "default"},
        "rope_theta": 777.0,
    }
    assert as_transformers(hf)["ropes"][None][1] == 777.0
    assert as_assay(hf)["ropes"][None][1] == 777.0
