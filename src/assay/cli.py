"""The ``assay`` command line. Expected failures print one line and exit 2, never a traceback."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from assay.errors import AssayError

EXIT_USAGE = 2
STORAGES = ("float32", "bf16", "nf4", "nf4_double_quant")


def _model_info(args: argparse.Namespace) -> dict[str, Any]:
    from assay.model.loader import load_with_fingerprint, open_source

    source = open_source(args.model)
    started = time.perf_counter()
    model, fingerprint = load_with_fingerprint(
        args.model, storage=args.storage, quantize_embeddings=args.quantize_embeddings
    )
    info: dict[str, Any] = {
        "path": str(args.model),
        "format": "safetensors" if Path(args.model).is_dir() else "gguf",
        "config": model.config.to_dict(),
        "tensor_types": source.tensor_types(),
        "fingerprint": fingerprint.to_dict(),
        "load_seconds": round(time.perf_counter() - started, 3),
        "storage": args.storage,
        "quantize_embeddings": args.quantize_embeddings,
        "tokenizer": None,
    }
    if info["format"] == "gguf" and "tokenizer.ggml.model" in source.header.metadata:
        from assay.model.tokenizer import load_tokenizer

        info["tokenizer"] = load_tokenizer(args.model).summary()
    if args.storage != "float32" or args.quantize_embeddings:
        from assay.memory.accounting import owned_bytes

        info["owned_bytes"] = owned_bytes(model)
    return info


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
    print(f"  parameters    {fp['parameter_count']:,} ({fp['decoded_fp32_bytes']:,} bytes in fp32)")
    types = ", ".join(f"{n} {k}" for k, n in sorted(info["tensor_types"].items()))
    print(f"  tensor types  {types}")
    print(f"  source sha256 {fp['source_sha256']}")
    print(f"  canonical     {fp['canonical_sha256']}")
    tok = info["tokenizer"]
    if tok:
        print(f"  tokenizer     {tok}")
    if "owned_bytes" in info:
        print(f"  storage       {info['storage']}")
        for key, value in info["owned_bytes"].items():
            print(f"    {key:<22}{value:>14,}")


def cmd_info(args: argparse.Namespace) -> int:
    info = _model_info(args)
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True))
    else:
        _print_info(info)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="assay",
        description="Fine-tune Llama-family models memory-leanly; qualify every claim with gates.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    info = sub.add_parser("info", help="describe a model file: config, sizes, fingerprints")
    info.add_argument("model", help="a GGUF file or an HF safetensors directory")
    info.add_argument("--json", action="store_true", help="print one JSON object")
    info.add_argument(
        "--storage",
        choices=STORAGES,
        default="float32",
        help="frozen-base storage to load with (default float32); "
        "non-float storage adds the owned-bytes block",
    )
    info.add_argument(
        "--quantize-embeddings",
        action="store_true",
        help="also quantize the embeddings and the tied head",
    )
    info.set_defaults(func=cmd_info)
    try:
        from assay.qualify.cli_commands import add_render_and_verify
    except ImportError:  # the qualify package is optional for a trainer-only install
        pass
    else:
        add_render_and_verify(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code. AssayError and OSError become one line and exit 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.func
    try:
        return handler(args)
    except AssayError as err:
        print(f"assay: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as err:
        print(f"assay: error: {err.filename or ''}: {err.strerror or err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("assay: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
