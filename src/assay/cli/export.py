"""``assay export``: a checkpoint written as a PEFT adapter, or as a merged safetensors or
GGUF model."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from assay.cli.checkpoint_arg import checkpoint_run
from assay.cli.load_progress import load_progress
from assay.cli.train import preflight
from assay.errors import AssayError


def arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``assay export``."""
    parser.add_argument("checkpoint", help="run dir (follows 'latest') or step dir")
    parser.add_argument(
        "--format",
        choices=("peft", "safetensors", "gguf"),
        required=True,
        help="peft: the adapter alone; safetensors/gguf: merged full model",
    )
    parser.add_argument("--out", required=True, help="output folder (peft, safetensors) or file")
    parser.add_argument(
        "--gguf-type",
        choices=("F32", "F16"),
        default="F32",
        help="tensor type of a --format gguf export (default F32)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace an earlier assay export at --out (anything else is refused)",
    )
    parser.add_argument("--config", help="train config (default: the run dir's config.yaml)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line")


def _outside_the_run(out: Path, run: Path) -> None:
    """Refuse an export destination that is, contains or lies inside the source run: writing
    (or ``--force`` clearing) it would destroy the checkpoints being exported."""
    where, source = out.resolve(), run.resolve()
    if where == source or source in where.parents or where in source.parents:
        raise AssayError(
            f"{out}: --out is, contains or lies inside the run {run} being exported; "
            "choose a folder outside it"
        )


def run(args: argparse.Namespace) -> int:
    from assay.adapters.export import check_destination, export
    from assay.settings.loader import load_train_config
    from assay.train.build import build_model, build_resident_model, trainable_parameters
    from assay.train.checkpoint.directory import load_checkpoint, other_model
    from assay.train.loop import RUN_CONFIG

    checkpoint_dir = Path(args.checkpoint)
    run_dir = checkpoint_run(checkpoint_dir)
    config_path = Path(args.config) if args.config else run_dir / RUN_CONFIG
    if not config_path.is_file():
        raise AssayError(f"{config_path}: no run config; pass --config CONFIG.yaml")
    config = load_train_config(config_path)
    preflight(config)
    out_dir = Path(args.out)
    _outside_the_run(out_dir, run_dir)
    check_destination(out_dir, force=args.force, format=args.format)
    # a merge reads every base weight (a PEFT folder only the trainables)
    build = build_model if args.format == "peft" else build_resident_model
    with load_progress("model"):
        _, base = build(config)
    checkpoint = load_checkpoint(checkpoint_dir)
    differs = other_model(checkpoint.fingerprints, base)
    if differs:
        raise AssayError(f"{checkpoint.path}: was trained on {differs}, not {config.model}")
    checkpoint.restore(trainable_parameters(base), rng=False)
    out = export(base, out_dir, args.format, gguf_type=args.gguf_type, force=args.force)
    result = {"checkpoint": str(checkpoint.path), "format": args.format, "out": str(out)}
    print(json.dumps(result) if args.json else f"wrote {out} ({args.format})")
    return 0
