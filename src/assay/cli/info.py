"""``assay info MODEL``: a model file's config, tensor types, sizes and fingerprints."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from assay.cli.load_progress import load_progress
from assay.model.families import FAMILIES
from assay.settings import STORAGES
from assay.settings import rule as setting_rule
from assay.settings.storages import storage

if TYPE_CHECKING:
    from assay.model.gguf import GGUFSource


def _model_info(args: argparse.Namespace) -> dict[str, Any]:
    from assay.model.loader import open_source
    from assay.settings.hub import model_argument
    from assay.storage.load import load_stored

    args.model = model_argument(args.model)
    source = open_source(args.model)
    from assay.model.hf_tokenizer import has_tokenizer
    from assay.model.tokenizer import load_tokenizer

    # the tokenizer before the weights: a bad one is refused before any weight is decoded
    folder = Path(args.model).is_dir()
    # a model that is not a folder is a GGUF file
    gguf_tokenizer = (
        not folder and "tokenizer.ggml.model" in cast("GGUFSource", source).header.metadata
    )
    tokenizer = None
    if gguf_tokenizer or (folder and has_tokenizer(Path(args.model))):
        tokenizer = load_tokenizer(args.model).summary()
    started = time.perf_counter()
    with load_progress(f"{args.model} ({args.storage})"):
        model, fingerprint = load_stored(
            args.model, storage=args.storage, quantize_embeddings_too=args.quantize_embeddings
        )
    info: dict[str, Any] = {
        "path": str(args.model),
        "format": "safetensors" if folder else "gguf",
        "config": model.config.to_dict(),
        "tensor_types": source.tensor_types(),
        "fingerprint": fingerprint.to_dict(),
        "load_seconds": round(time.perf_counter() - started, 3),
        "storage": args.storage,
        "quantize_embeddings": args.quantize_embeddings,
        "tokenizer": tokenizer,
    }
    if not storage(args.storage).keeps_parameters or args.quantize_embeddings:
        from assay.memory.accounting import owned_bytes

        info["owned_bytes"] = owned_bytes(model)
    return info


def tokenizer_text(tok: dict[str, Any]) -> str:
    """The tokenizer summary as one line a person reads (``--json`` keeps the fields)."""
    kind = str(tok.get("model")) + (f"/{tok['pre']}" if tok.get("pre") else "")
    parts = [kind, f"vocab {tok['vocab_size']:,}"]
    if tok.get("merges"):
        parts.append(f"{tok['merges']:,} merges")
    special = ", ".join(f"{name} {tid}" for name, tid in sorted(tok["special_ids"].items()))
    parts.append(f"special ids {special}" if special else "no special ids")
    adds = [w for w, key in (("bos", "add_bos_token"), ("eos", "add_eos_token")) if tok.get(key)]
    parts.append(f"adds {' and '.join(adds)}" if adds else "adds no bos or eos")
    parts.append("chat template" if tok.get("has_chat_template") else "no chat template")
    return "; ".join(parts)


def _print_info(info: dict[str, Any]) -> None:
    c, fp = info["config"], info["fingerprint"]
    print(f"{info['path']} ({info['format']})")
    print(
        f"  architecture  {c['architecture']}: {c['num_layers']} layers, hidden "
        f"{c['hidden_size']}, FFN {c['intermediate_size']}, heads {c['num_heads']}/"
        f"{c['num_kv_heads']} (head_dim {c['head_dim']}), vocab {c['vocab_size']}"
    )
    print(
        f"  rope          theta {c['rope_theta']:g}, scaling "
        f"{c['rope_scaling'] or ('gguf rope_freqs' if c['rope_freq_divisors'] else 'none')}; "
        f"tied embeddings {c['tie_word_embeddings']}; qkv bias {c['attention_bias']}"
    )
    window = c["sliding_window"]
    kinds = c["layer_types"]
    if kinds and window:
        sliding = kinds.count("sliding_attention")
        window_text = f"{window:,} tokens on {sliding} of {len(kinds)} layers"
    else:
        window_text = f"{window:,} tokens" if window else "none"
    layout = (
        "q, k, v fused in qkv_proj, gate and up in gate_up_proj"
        if FAMILIES[c["architecture"]].fused_projections
        else "projections apart"
    )
    print(f"  attention     window {window_text}; {layout}")
    print(f"  parameters    {fp['parameter_count']:,} ({fp['decoded_fp32_bytes']:,} bytes in fp32)")
    types = ", ".join(f"{n} {k}" for k, n in sorted(info["tensor_types"].items()))
    print(f"  tensor types  {types}")
    print(f"  source sha256 {fp['source_sha256']}")
    print(f"  canonical     {fp['canonical_sha256']}")
    tok = info["tokenizer"]
    if tok:
        print(f"  tokenizer     {tokenizer_text(tok)}")
    if "owned_bytes" in info:
        print(f"  storage       {info['storage']}")
        for key, value in info["owned_bytes"].items():
            print(f"    {key:<22}{value:>14,}")


def run(args: argparse.Namespace) -> int:
    info = _model_info(args)
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True))
    else:
        _print_info(info)
    return 0


def arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``assay info``."""
    parser.add_argument(
        "model",
        help="a GGUF file, an HF folder, or a Hub name (org/name[@revision]) in the local cache",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--storage",
        choices=STORAGES,
        default=setting_rule("storage").default,
        help=f"frozen-base storage to load with (default {setting_rule('storage').default}); "
        "non-float storage adds the owned-bytes block",
    )
    parser.add_argument(
        "--quantize-embeddings",
        action="store_true",
        help="also quantize the embeddings and the tied head",
    )
