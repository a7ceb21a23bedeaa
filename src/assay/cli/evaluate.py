"""``assay eval``: the held-out loss of a config's model, or of a checkpoint of it."""

from __future__ import annotations

import argparse
import json

from assay.cli.dispatch import DEVICE_HELP, device_option, resolve_device
from assay.cli.load_progress import load_progress
from assay.cli.train import preflight, require_device
from assay.errors import AssayError


def arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``assay eval``."""
    parser.add_argument("config", help="train config (YAML)")
    parser.add_argument("--checkpoint", metavar="DIR", help="trainables to evaluate")
    parser.add_argument("--data", metavar="FILE", help="JSONL to score (default data.eval)")
    parser.add_argument("--device", default="auto", type=device_option, help=DEVICE_HELP)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    from assay.settings.loader import load_train_config
    from assay.train.checkpoint.directory import load_checkpoint, other_model
    from assay.train.loop import Trainer

    config = load_train_config(args.config)
    args.device, _ = resolve_device(args.device)
    require_device(args.device)
    preflight(config)
    with load_progress("model and data"):
        trainer = Trainer(config, device=args.device, progress=False)
    if args.checkpoint:
        saved = load_checkpoint(args.checkpoint, fingerprints=None)
        differs = other_model(saved.fingerprints, trainer.base)
        if differs:
            raise AssayError(f"{saved.path}: was trained on {differs}, not {config.model}")
        saved.restore(trainer.params, rng=False)
    if args.data:
        from assay.train.data.dataset import load_dataset

        data = config.data
        dataset = load_dataset(
            args.data,
            trainer.tokenizer,
            format=data.format,
            mask=data.mask,
            seq_len=data.seq_len,
            truncate=data.truncate,
        )
    elif trainer.eval_data is not None:
        dataset = trainer.eval_data
    else:
        raise AssayError(f"{args.config}: data.eval is not set; pass --data FILE")
    loss = trainer.evaluate(dataset)
    result = {
        "eval_loss": loss,
        "examples": len(dataset),
        "scored_tokens": dataset.scored_tokens,
        "checkpoint": args.checkpoint,
    }
    print(
        json.dumps(result, indent=2)
        if args.json
        else f"eval loss {loss:.4f} over "
        f"{dataset.scored_tokens} scored tokens ({len(dataset)} examples)"
    )
    return 0
