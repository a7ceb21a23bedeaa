"""Seeded config.json cases over the field table (issue 51): for every row that refuses values
and every ranged number, values drawn inside and outside, each judged by what the table says
and then by what ``config_from_hf`` does with it."""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass

from assay.errors import AssayError
from assay.model.config import LIMITS, config_from_hf
from assay.model.hf_fields import FAMILIES, RULES

WHERE = "model/config.json"
BASE = {
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
VALUES = (
    None,
    True,
    False,
    0,
    1,
    -1,
    0.0,
    0.1,
    1.0,
    2.5,
    50.0,
    math.nan,
    math.inf,
    "",
    "silu",
    "swish",
    "gelu",
    "gelu_pytorch_tanh",
    "relu",
    "default",
    "llama3",
    "linear",
    "dynamic",
    "yarn",
    "longrope",
    [1],
    {"a": 1},
)
# config.json key -> the ModelConfig field whose range bounds it
RANGED = {
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "intermediate_size": "intermediate_size",
    "num_hidden_layers": "num_layers",
    "num_attention_heads": "num_heads",
    "num_key_value_heads": "num_kv_heads",
    "head_dim": "head_dim",
    "max_position_embeddings": "max_position_embeddings",
    "rms_norm_eps": "rms_norm_eps",
    "rope_theta": "rope_theta",
}


@dataclass(frozen=True)
class Case:
    """One generated config.json and whether the table says it should load."""

    label: str
    config: dict
    should_load: bool


def _config(family: str, key: str, value) -> dict:
    if key.endswith("rope_scaling.rope_type"):
        return {"model_type": family, **BASE, "rope_scaling": {"rope_type": value, "factor": 2.0}}
    if key == "rope_parameters.<kind>":
        # the row reads which layer kind the rope is keyed by: any key of one is refused
        return {"model_type": family, **BASE, "rope_parameters": {"full_attention": {}}}
    return {"model_type": family, **BASE, key: value}


def cases(seed: int, count: int) -> list[Case]:
    """``count`` cases: a refusing row (in one of its families) with a drawn value, or a ranged
    number drawn past its range (outside) or at its bound (inside)."""
    rng = random.Random(seed)
    refusing = [(rule, family) for rule in RULES if rule.accepts for family in rule.families]
    out = []
    for n in range(count):
        if n % 3 == 2:
            key = rng.choice(sorted(RANGED))
            limit = LIMITS[RANGED[key]]
            past = rng.choice([True, False])
            # an integer too large for a float is past every range too (and must not raise)
            value = rng.choice([limit * 2, limit * 1024, limit * 1e30, 10**400]) if past else limit
            if key == "head_dim" and not past:
                value = 16  # hidden / heads; the bound itself is checked in the unit tests
            if key in ("num_attention_heads", "num_key_value_heads") and not past:
                value = 2
            config = {"model_type": rng.choice(FAMILIES), **BASE, key: value}
            if key == "hidden_size":
                config["head_dim"] = 16  # else hidden / heads would pass head_dim's own range
            out.append(Case(f"{key}={value!r}", config, not past))
            continue
        if n % 3 == 1 and n % 2:
            # a boolean field with a value of another kind: "false" must not read as true
            value = rng.choice(VALUES)
            config = {"model_type": rng.choice(FAMILIES), **BASE, "tie_word_embeddings": value}
            out.append(Case(f"tie_word_embeddings={value!r}", config, isinstance(value, bool)))
            continue
        rule, family = rng.choice(refusing)
        value = rng.choice(VALUES)
        config = _config(family, rule.key, value)
        out.append(Case(f"{family}:{rule.key}={value!r}", config, bool(rule.accepts(value))))
    return out


def misjudged(generated: list[Case]) -> list[str]:
    """Labels of the cases that loaded when the table refuses them, or were refused when it
    accepts them."""
    wrong = []
    for case in generated:
        try:
            config_from_hf(json.loads(json.dumps(case.config)), WHERE)
            loaded = True
        except AssayError:
            loaded = False
        if loaded != case.should_load:  # an exception other than AssayError is a failure
            wrong.append(case.label)
    return wrong
