"""config.json files judged by transformers 5 itself: files that combine the keys whose meaning
depends on each other (head_dim and its null, the boolean fields, the sliding-window keys,
rope_parameters, the legacy rope_scaling and a top-level rope_theta), each given to
transformers' own config class and model and to assay's reader.

The invariant (docs/models.md): a file transformers refuses, or cannot run a forward pass on,
assay refuses in one line naming the file; a file assay reads, transformers reads too, with the
same head size, rope (type, theta and Llama-3 factors), sliding window, tied head and norm
epsilon. assay may
refuse a file transformers runs only for a feature docs/models.md says it does not build.
Integral floats (``2.0`` layers) are not drawn: assay reads them as integers on purpose.
"""

from __future__ import annotations

import json
import random
import warnings
from typing import Any

WHERE = "model/config.json"
TINY = {
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}
ABSENT = object()
LLAMA3 = {"factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
LLAMA3_READ = (*LLAMA3, "original_max_position_embeddings")
CHOICES: dict[str, list[Any]] = {
    # absent, each family has its own default, which a Llama-3 rope's original context takes
    "max_position_embeddings": [ABSENT, 128, 128, 128],
    "head_dim": [ABSENT, None, 8, 16, "8", 15],
    "attention_bias": [ABSENT, False, True, 0, None],
    "mlp_bias": [ABSENT, False, 0, None],
    "tie_word_embeddings": [ABSENT, False, True, 0],
    "use_sliding_window": [ABSENT, False, True, 0],
    "sliding_window": [ABSENT, None, 4, 8, "x"],
    "attention_chunk_size": [ABSENT, None, 8],
    "max_window_layers": [ABSENT, 0, 1, 2],
    "layer_types": [
        ABSENT,
        ["full_attention", "full_attention"],
        ["sliding_attention", "sliding_attention"],
        ["full_attention", "sliding_attention"],
        ["full_attention"],
    ],
    "rope_parameters": [
        ABSENT,
        {"rope_type": "default", "rope_theta": 500.0},
        {"rope_type": "llama3", "rope_theta": 900.0, **LLAMA3},
        {
            "full_attention": {"rope_type": "default", "rope_theta": 300.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 30.0},
        },
        {"full_attention": {"rope_type": "linear", "factor": 2.0}},
        {"sliding_attention": {"rope_type": "default"}},
    ],
    "rope_scaling": [
        ABSENT,
        None,
        {},
        {"rope_type": "default"},
        {"type": "default"},
        {"type": "llama3", **LLAMA3, "original_max_position_embeddings": 64},
    ],
    "rope_theta": [ABSENT, 777.0, 10000.0],
    "rms_norm_eps": [ABSENT, 1e-6, 1e-5, 1],
    "attention_dropout": [ABSENT, 0, 0.0, None, False],
    "partial_rotary_factor": [ABSENT, 1, 1.0, None, 0.5],
    "embd_pdrop": [ABSENT, 0.0, "x"],
    "original_max_position_embeddings": [ABSENT, 64, 0.5, None],
    "resid_pdrop": [ABSENT, 0.0, 0.1],
    "pad_token_id": [ABSENT, None, 3, 64, -1, -65],
    # Phi-3's default pad id (32000) is outside the first and inside the second
    "vocab_size": [ABSENT, 64, 32064],
    # Gemma 3's keys (read only by model_type gemma3_text; query_pre_attn_scalar refused elsewhere)
    "query_pre_attn_scalar": [ABSENT, 24, 64.0, 0, "x"],
    "sliding_window_pattern": [ABSENT, 1, 2, 0],
    "rope_local_base_freq": [ABSENT, 50.0],
    "use_bidirectional_attention": [ABSENT, False, True],
    "hidden_activation": [ABSENT, "gelu_pytorch_tanh", "silu"],
}
# families whose transformers model applies sliding_window, and those of them whose layers
# each have their own kind (layer_types)
WINDOWED = ("mistral", "qwen2", "qwen3", "phi3", "gemma3_text")
PER_LAYER_KINDS = ("qwen2", "qwen3", "gemma3_text")
CLASSES = {
    "llama": "LlamaConfig",
    "mistral": "MistralConfig",
    "qwen2": "Qwen2Config",
    "qwen3": "Qwen3Config",
    "granite": "GraniteConfig",
    "olmo2": "Olmo2Config",
    "phi3": "Phi3Config",
    "gemma3_text": "Gemma3TextConfig",
}
# words of the refusals docs/models.md states for features assay does not build
DOCUMENTED = (
    "sliding and",
    "attention_bias True is not supported",
    "layer_types",
    "two meanings of one file",
    "chunked attention is Llama 4's",
    "assay trains without dropout",
    "bidirectional attention",
    "hidden_activation",
    "query_pre_attn_scalar",
    "linear, the larger Gemma 3's",
    "a rope per layer kind",
    "rotary embedding over the whole head",
)


# Phi-3's vocabulary: transformers' default pad id (32000) is inside it, as in every Phi-3 file
TINY_VOCAB = {"phi3": 32064}


def config_file(family: str, chosen: dict[str, Any]) -> dict:
    """The tiny ``family`` config.json with the ``chosen`` keys (ABSENT ones left out)."""
    fields = {key: value for key, value in chosen.items() if value is not ABSENT}
    vocab = {"vocab_size": TINY_VOCAB.get(family, TINY["vocab_size"])}
    return json.loads(json.dumps({"model_type": family, **TINY, **vocab, **fields}))


def generated(seed: int, count: int) -> list[dict]:
    """``count`` files: a family, and up to five of CHOICES' keys each set to one of its
    values."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        family = rng.choice(sorted(CLASSES))
        keys = rng.sample(sorted(CHOICES), rng.randint(0, 5))
        out.append(config_file(family, {key: rng.choice(CHOICES[key]) for key in keys}))
    return out


def as_transformers(hf: dict) -> dict | None:
    """What transformers makes of ``hf`` (head size, rope, window per layer, tied head), or
    None when its config class refuses the file or its model cannot run a forward pass."""
    import torch
    import transformers

    family = hf["model_type"]
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # its notes on each odd file, not ours to print
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # a deep copy: transformers writes into the nested rope dicts it is given
            config = getattr(transformers, CLASSES[family]).from_dict(json.loads(json.dumps(hf)))
            torch.manual_seed(0)
            model = transformers.AutoModelForCausalLM.from_config(config)
            model(torch.tensor([[1, 2, 3, 4, 5, 6]]))
    except Exception:  # any refusal or failure of transformers counts
        return None
    finally:
        transformers.logging.set_verbosity(verbosity)
    layers = hf["num_hidden_layers"]
    window = config.sliding_window if family in WINDOWED else None
    kinds = getattr(config, "layer_types", None)
    if family in PER_LAYER_KINDS and kinds is not None:
        windows = tuple(window if kind == "sliding_attention" else None for kind in kinds)
    else:
        windows = (window,) * layers
    head_dim = getattr(config, "head_dim", None) or hf["hidden_size"] // 4
    if family == "gemma3_text":
        ropes = {kind: dict(config.rope_parameters[kind]) for kind in sorted(set(kinds))}
        scale = config.query_pre_attn_scalar**-0.5
    else:
        ropes = {None: dict(config.rope_parameters)}
        scale = config.attention_multiplier if family == "granite" else head_dim**-0.5
    return {
        "head_dim": head_dim,
        "ropes": {
            kind: (
                rope.get("rope_type", "default"),
                float(rope["rope_theta"]),
                {k: float(rope[k]) for k in LLAMA3_READ} if rope["rope_type"] == "llama3" else None,
            )
            for kind, rope in ropes.items()
        },
        "windows": windows,
        "attention_scale": scale,
        "tied": bool(config.tie_word_embeddings),
        "rms_norm_eps": float(config.rms_norm_eps),
    }


def as_assay(hf: dict) -> dict | str:
    """What assay makes of ``hf``, in as_transformers' terms, or its refusal's message."""
    from assay.errors import AssayError
    from assay.model.config import config_from_hf

    try:
        config = config_from_hf(json.loads(json.dumps(hf)), WHERE)
    except AssayError as error:
        return str(error)
    scaling = config.rope_scaling
    llama3 = {k: float(scaling[k]) for k in LLAMA3_READ} if scaling else None
    kinds = sorted(set(config.layer_types)) if config.layer_types else [None]
    return {
        "head_dim": config.head_dim,
        "ropes": {
            kind: ("llama3" if scaling else "default", config.rope_theta_of(kind), llama3)
            for kind in kinds
        },
        "windows": tuple(config.window_of(kind) for kind in config.layer_kinds),
        "attention_scale": config.attention_scale,
        "tied": config.tie_word_embeddings,
        "rms_norm_eps": config.rms_norm_eps,
    }


def misjudgement(hf: dict) -> str | None:
    """Why assay's reading of ``hf`` breaks the invariant, or None when it holds."""
    theirs, ours = as_transformers(hf), as_assay(hf)
    if isinstance(ours, str):
        if "\n" in ours or not ours.startswith(WHERE):
            return f"a refusal that is not one line naming the file: {ours!r}"
        if theirs is not None and not any(words in ours for words in DOCUMENTED):
            return f"refused a file transformers runs, for no documented reason: {ours}"
        return None
    if theirs is None:
        return "read a file transformers refuses or cannot run"
    if ours != theirs:
        return f"read it otherwise than transformers: {ours} != {theirs}"
    return None


def misjudged(files: list[dict]) -> list[str]:
    """``file: why`` for each of ``files`` whose reading breaks the invariant."""
    found = []
    for hf in files:
        why = misjudgement(hf)
        if why is not None:
            found.append(f"{json.dumps(hf, sort_keys=True)}: {why}")
    return found
