"""Export a (possibly adapted) decoder: merged HF safetensors, merged GGUF, or the adapter.

``export_merged`` never mutates the model: each adapted projection's merged weight is computed
densely in fp32 (an NF4 or bf16 base is dequantized first, then W + delta W), so a model trained
on NF4 storage exports as a plain float model. Tolerances, measured in tests/test_export.py and
gate-exports: F32 files give logits within 1e-4 of the adapted model (the merged weight is one
fp32 rounding away from computing W x + s B(A x) separately); F16 files round each weight to
11 significant bits, so they are compared against the same merged weights rounded to fp16.
``export`` is the entry point for ``assay export --format peft|safetensors|gguf``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from assay.adapters.base import AdapterLinear, dense_weight
from assay.adapters.files import write_json_atomic, write_safetensors_atomic
from assay.adapters.io import save_adapter
from assay.adapters.manifest import FORMAT, MANIFEST, verify_manifest, write_manifest
from assay.atomic import atomic_write_bytes, staged_directory
from assay.errors import ConfigError
from assay.model.gguf_seal import seal_holds
from assay.model.hf_fields import GRANITE_SCALARS

if TYPE_CHECKING:
    from assay.model.decoder import Decoder

FORMATS = ("peft", "safetensors", "gguf")
GGUF_EXPORT_KEY = "assay.export.format"  # marks a GGUF file as one ``assay export`` wrote
GGUF_SEAL_KEY = "assay.export.sha256"  # and seals it: a file edited since no longer matches
_HF_CLASSES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "granite": "GraniteForCausalLM",
    "olmo2": "Olmo2ForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM",
}


def _dense(module: nn.Module, attribute: str) -> torch.Tensor:
    if attribute == "bias":
        base = module.base if isinstance(module, AdapterLinear) else module
        # the config names a bias only for a layer that has one
        return cast(torch.Tensor, base.bias).detach().float()
    if isinstance(module, AdapterLinear):
        return module.merged_weight()
    store = getattr(module, "store", None)
    if store is not None and hasattr(store, "dequantize"):  # FrozenEmbedding / FrozenLinear
        return store.dequantize(torch.float32).detach()
    if isinstance(module, nn.Linear):
        return dense_weight(module)
    return getattr(module, attribute).detach().float()


def merged_tensors(model: Decoder) -> dict[str, torch.Tensor]:
    """Canonical name -> dense fp32 tensor of the function ``model`` computes now."""
    out = {}
    for name, shape in model.config.expected_shapes().items():
        path, attribute = name.rsplit(".", 1)
        tensor = _dense(model.get_submodule(path), attribute).contiguous()
        if tuple(tensor.shape) != tuple(shape):
            raise ConfigError(f"export: {name} has shape {tuple(tensor.shape)}, expected {shape}")
        out[name] = tensor
    return out


def hf_config(config) -> dict:
    """A transformers ``config.json`` dict for ``config`` (fp32 weights)."""
    if config.rope_freq_divisors is not None:
        raise ConfigError(
            "export: this model's rope frequencies came from a GGUF rope_freqs tensor, which "
            "config.json cannot express; export a model loaded from safetensors"
        )
    rope = {"rope_type": "default", "rope_theta": config.rope_theta}
    if config.rope_scaling is not None:
        rope = {**dict(config.rope_scaling), "rope_theta": config.rope_theta}
    out = {
        "architectures": [_HF_CLASSES[config.architecture]],
        "model_type": config.architecture,
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "num_key_value_heads": config.num_kv_heads,
        "head_dim": config.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": config.rms_norm_eps,
        "max_position_embeddings": config.max_position_embeddings,
        "tie_word_embeddings": config.tie_word_embeddings,
        "rope_parameters": rope,
        "bos_token_id": config.bos_token_id,
        "eos_token_id": config.eos_token_id,
        "pad_token_id": config.pad_token_id,
        "dtype": "float32",
    }
    family = config.family
    # each would put attention_bias on o too, and mlp_bias on the MLP: refused when reading
    out.update({key: False for key in family.bias_keys})
    if family.scalars:
        out.update({key: getattr(config, key) for key in GRANITE_SCALARS})
    if family.window_reading == "every_layer":
        out["sliding_window"] = config.sliding_window
    if family.window_reading == "per_kind":
        del out["hidden_act"]  # Gemma 3 reads hidden_activation
        out.update(_gemma3_config(config))
    if family.window_reading == "qwen":
        # one attention kind for every layer: sliding from layer 0 on, or none
        sliding = config.sliding_window is not None
        out["use_sliding_window"] = sliding
        out["sliding_window"] = config.sliding_window
        out["max_window_layers"] = 0 if sliding else config.num_layers
    return out


def _gemma3_config(config) -> dict:
    """Gemma 3's keys: its activation, attention scale, per-layer kinds and a rope per kind."""
    return {
        "hidden_activation": "gelu_pytorch_tanh",
        "query_pre_attn_scalar": config.query_pre_attn_scalar,
        "sliding_window": config.sliding_window,
        "layer_types": list(config.layer_types),
        "rope_parameters": {
            kind: {"rope_type": "default", "rope_theta": config.rope_theta_of(kind)}
            for kind in ("full_attention", "sliding_attention")
        },
    }


def export_merged(
    model: Decoder,
    out: str | os.PathLike[str],
    *,
    format: str = "safetensors",
    gguf_type: str = "F32",
) -> Path:
    """Write the merged model: an HF folder (config.json + model.safetensors) or a GGUF file.

    Guarantees: the model is not modified; files are written atomically; the result loads
    with ``assay.load`` (both formats), transformers (safetensors) and ``gguf.GGUFReader``.
    """
    if format not in ("safetensors", "gguf"):
        raise ConfigError(f"export format {format!r}; expected safetensors or gguf")
    config = model.config
    tensors = merged_tensors(model)
    target = Path(out)
    if format == "gguf":
        from gguf import GGUFValueType

        from assay.model.gguf_export import write_gguf

        marker = {GGUF_EXPORT_KEY: (FORMAT, GGUFValueType.STRING)}
        return write_gguf(
            target,
            config,
            tensors,
            tensor_type=gguf_type,
            extra_metadata=marker,
            seal_key=GGUF_SEAL_KEY,
        )
    hf_names = {
        name if name == "lm_head.weight" else f"model.{name}": tensor
        for name, tensor in tensors.items()
    }
    payload = hf_config(config)
    write_safetensors_atomic(target / "model.safetensors", hf_names, {"format": "pt"})
    write_json_atomic(target / "config.json", payload)
    copy_companions(model, target)
    return target


def copy_companions(model: nn.Module, target: Path) -> list[str]:
    """Copy the tokenizer, chat template and generation files of the Hugging Face folder
    ``model`` was loaded from into ``target`` (bytes unchanged, atomically), so the merged
    folder loads in transformers with its tokenizer; returns the names copied (none for a
    GGUF source, which keeps its tokenizer inside the file)."""
    from assay.bounded import read_capped
    from assay.model.hf_tokenizer import COMPANION_FILES, TOKENIZER_BYTES

    folder = getattr(model, "assay_source", None)
    if folder is None or not Path(folder).is_dir():
        return []
    copied = []
    for name in COMPANION_FILES:
        if (folder / name).is_file():
            data = read_capped(folder / name, TOKENIZER_BYTES, name)
            atomic_write_bytes(target / name, data)
            copied.append(name)
    return copied


def export_adapter(model: nn.Module, out: str | os.PathLike[str]) -> Path:
    """The adapter alone, in PEFT's format (TinyLoRA: assay's own); see assay.adapters.io."""
    return save_adapter(model, out)


def _folder_exports() -> dict[str, tuple[tuple[frozenset[str], frozenset[str]], ...]]:
    """The files a folder export of each kind writes besides its manifest: (always, when the
    source had them). A PEFT folder's sidecar is written for every assay method; TinyLoRA has
    its own pair; a merged folder carries its source folder's tokenizer and generation files."""
    from assay.adapters import peft_io, tinylora_io
    from assay.model.hf_tokenizer import COMPANION_FILES

    none: frozenset[str] = frozenset()
    return {
        "peft": (
            (frozenset({peft_io.CONFIG, peft_io.WEIGHTS, peft_io.SIDECAR}), none),
            (frozenset({tinylora_io.CONFIG, tinylora_io.WEIGHTS}), none),
        ),
        "safetensors": (
            (frozenset({"config.json", "model.safetensors"}), frozenset(COMPANION_FILES)),
        ),
    }


def _not_an_export(target: Path) -> str | None:
    """None when folder ``target`` holds exactly what one folder export writes, as regular
    files bound by its manifest; otherwise what was found instead, in a few words. A manifest
    is a claim anyone can write: the files it lists must also be the ones its kind writes."""
    odd = sorted(p.name for p in target.iterdir() if p.is_symlink() or not p.is_file())
    if odd:
        return f"a folder holding {odd[0]}, a link or folder assay export never writes"
    try:
        manifest = verify_manifest(target)
    except ConfigError as exc:
        return f"an export that no longer matches its manifest ({exc})"
    if manifest is None:
        return f"a folder without {MANIFEST}"
    kind = manifest.get("kind")
    written = _folder_exports().get(kind, ()) if isinstance(kind, str) else ()
    files = frozenset(manifest["files"])
    if not any(always <= files <= always | maybe for always, maybe in written):
        return f"a folder whose {MANIFEST} lists files no {FORMAT} export writes together"
    return _not_export_content(target, sorted(manifest["files"]))


def _not_export_content(target: Path, names: list[str]) -> str | None:
    """None when each file reads as what an export writes under its name (a safetensors file,
    a JSON object); otherwise which does not. A manifest written by hand can bind any bytes."""
    from assay.bounded import read_json_file, read_text_bounded
    from assay.errors import ModelFileError
    from assay.model.safetensors import check_safetensors_header

    for name in names:
        path = target / name
        try:
            if name.endswith(".safetensors"):
                check_safetensors_header(path)
            elif name.endswith(".jinja"):  # a chat template copied from the source: text
                read_text_bounded(path, within=target)
            elif not isinstance(read_json_file(path, ConfigError), dict):
                return f"a folder whose {name} is not a JSON object, as an export writes it"
        except (ModelFileError, ConfigError, OSError, UnicodeDecodeError):
            kinds = {".safetensors": "safetensors file", ".jinja": "UTF-8 text"}
            kind = kinds.get(Path(name).suffix, "JSON object")
            return f"a folder whose {name} is not a {kind}, as an export writes it"
    return None


def _replaceable(target: Path, format: str) -> str | None:
    """None when ``target`` is an earlier assay export of the same shape as ``format`` (a
    folder holding exactly one folder export's files, verified against its manifest, or a
    GGUF file carrying the export's format key); otherwise what was found there instead, in a
    few words."""
    if target.is_symlink():
        return "a symlink"
    if format == "gguf":
        if not target.is_file():
            return "a folder, and a gguf export is one file"
        if not _assay_gguf(target):
            return "a file assay export did not write"
        if not seal_holds(target, GGUF_SEAL_KEY):
            return f"a GGUF export changed since assay export wrote it (its {GGUF_SEAL_KEY} seal)"
        return None
    if not target.is_dir():
        return "a file, and a folder export is a folder"
    return _not_an_export(target)


def _assay_gguf(path: Path) -> bool:
    from assay.errors import ModelFileError
    from assay.model.gguf_header import read_header

    try:
        return read_header(path).metadata.get(GGUF_EXPORT_KEY) == FORMAT
    except (ModelFileError, OSError, ValueError):
        return False


def check_destination(
    out: str | os.PathLike[str], *, force: bool = False, format: str = "peft"
) -> None:
    """ConfigError when ``out`` exists and is not an empty folder, unless ``force`` and ``out``
    is an earlier assay export of the same shape: ``--force`` replaces only what ``assay
    export`` wrote (a folder bound by its manifest, or a GGUF file with the export's key)."""
    target = Path(out)
    if not (target.exists() or target.is_symlink()):
        return
    if target.is_dir() and not target.is_symlink() and not any(target.iterdir()):
        return
    if not force:
        raise ConfigError(
            f"{target}: export destination is not empty (pass --force to replace an earlier "
            "export whole)"
        )
    found = _replaceable(target, format)
    if found is not None:
        raise ConfigError(
            f"{target}: --force replaces only an earlier assay export, and this is {found}; "
            "nothing was changed; choose another --out"
        )


def base_identity(model: nn.Module) -> dict[str, Any] | None:
    """The base model an export of ``model`` came from: name or path, revision, and the
    canonical sha256 of its weights (None when nothing is known)."""
    found = dict(getattr(model, "assay_base_model", None) or {})
    fingerprint = getattr(model, "fingerprint", None)
    if fingerprint is not None:
        found["sha256"] = fingerprint.canonical_sha256
    return found or None


def export(
    model: Decoder,
    out: str | os.PathLike[str],
    format: str,
    *,
    gguf_type: str = "F32",
    force: bool = False,
) -> Path:
    """CLI entry: ``format`` is peft, safetensors or gguf.

    Guarantees: a folder export (peft, safetensors) is written into a staging folder beside
    ``out`` with a sha256 manifest (``assay_manifest.json``) and renamed into place whole, so
    after a kill, a full disk or a refused write ``out`` is the complete new folder, the old
    one, or absent: never a mix. A non-empty ``out`` is refused unless ``force``. GGUF is one
    file written through a temporary name.
    """
    if format not in FORMATS:
        raise ConfigError(f"export --format {format!r}; expected one of {', '.join(FORMATS)}")
    check_destination(out, force=force, format=format)
    target = Path(out)
    if format == "gguf":
        return export_merged(model, target, format=format, gguf_type=gguf_type)
    with staged_directory(target, replace=target.exists()) as staging:
        if format == "peft":
            export_adapter(model, staging)
        else:
            export_merged(model, staging, format=format, gguf_type=gguf_type)
        write_manifest(staging, format, base_identity(model))
    return target
