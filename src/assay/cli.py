"""The ``assay`` command line. Expected failures print one line and exit 2, never a traceback."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from assay import DISTRIBUTION
from assay.adapter_registry import help_text as adapter_methods_help
from assay.errors import AssayError
from assay.load_status import load_status

if os.environ.get("ASSAY_GATE_IMPORTS"):  # a gate test's child: report the code it ran
    from assay.qualify.child_imports import report_at_exit

    report_at_exit()

EXIT_USAGE = 2
STORAGES = ("float32", "bf16", "nf4", "nf4_double_quant")
# Commands that run the trainer, so need the `train` extra; the rest (render, verify, sign,
# publish, attest, docs) are the gate framework's and run without torch.
TRAINER_COMMANDS = frozenset({"info", "train", "eval", "export", "estimate", "generate"})
# Top-level import names of the `train` extra's distributions (pyyaml imports as yaml).
TRAIN_EXTRA_MODULES = frozenset(
    {"torch", "bitsandbytes", "gguf", "safetensors", "numpy", "yaml", "tokenizers", "tqdm"}
)
# Documents shipped inside the package (package data), readable from an installed copy.
PACKAGED_DOCS = {"gate-api": "the gate framework's API: gates, claims, controls, timing claims"}


def _model_info(args: argparse.Namespace) -> dict[str, Any]:
    from assay.loading import load_stored
    from assay.model.loader import open_source

    source = open_source(args.model)
    started = time.perf_counter()
    with load_status(f"{args.model} ({args.storage})"):
        model, fingerprint = load_stored(
            args.model, storage=args.storage, quantize_embeddings_too=args.quantize_embeddings
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


def _check_fit(config, args: argparse.Namespace) -> None:
    """Refuse a config predicted over budget (--budget, config budget, or CUDA free memory)."""
    from assay.memory.estimate_cli import model_dims, plan_from_config, refusal_line, verdict
    from assay.train.config import model_path, parse_size

    raw = args.budget if args.budget is not None else config.budget
    if raw is not None:
        try:
            budget = parse_size(raw)
        except ValueError as exc:
            raise AssayError(f"{args.config}: --budget: {exc}") from None
    elif str(args.device).startswith("cuda"):
        import torch

        budget = torch.cuda.mem_get_info(torch.device(args.device))[0]
    else:
        return  # CPU without a stated budget: nothing to refuse against
    result = verdict(plan_from_config(config, model_dims(model_path(config))), budget)
    if not result["fits"] and not args.force:
        raise AssayError(
            f"{args.config}: refusing to train: {refusal_line(result)} (--force to run anyway)"
        )


def _print_summary(summary: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary, indent=2, sort_keys=True))
        return
    eval_text = "" if summary["eval_loss"] is None else f", eval loss {summary['eval_loss']:.4f}"
    ranks = f" on {summary['world_size']} ranks" if summary.get("world_size", 1) > 1 else ""
    print(
        f"trained {summary['steps_this_run']} steps (to step {summary['steps']}){ranks}: final "
        f"loss {summary['final_loss']:.4f}{eval_text}, {summary['tokens_per_s']:.0f} tokens/s"
    )
    print(f"checkpoint {summary['checkpoint']}")


def _with_strategy(config, strategy: str | None):
    """``config`` with ``distributed.strategy`` overridden by ``--strategy`` (checked again)."""
    import dataclasses

    from assay.train.config import DistributedConfig, check_distributed

    if strategy is None:
        return config
    current = config.distributed or DistributedConfig()
    changed = dataclasses.replace(
        config, distributed=dataclasses.replace(current, strategy=strategy)
    )
    check_distributed(changed)
    return changed


def _train_distributed(config, args: argparse.Namespace) -> int:
    """One rank of a torchrun job: join the group, train, print from rank 0, leave the group."""
    from assay.distributed.context import init
    from assay.distributed.trainer import DistributedTrainer
    from assay.train.config import DistributedConfig

    settings = config.distributed or DistributedConfig()
    context = init(args.device, settings.backend, source=f"{args.config}: distributed")
    try:
        args.device = context.device
        _check_fit(config, args)
        if context.is_main:
            _claim_output(config, args)
        progress = not (args.json or args.no_progress)
        trainer = DistributedTrainer(config, context, progress=progress)
        if args.resume:
            trainer.resume(args.resume)
        summary = trainer.train(stop_at=args.stop_at)
        if context.is_main:
            _print_summary(summary, args.json)
    finally:
        context.close()
    return 0


def _preflight(config) -> None:
    """Config checks against the model header and the data rows, before any weights load."""
    from assay.train.preflight import check_against_model, check_rows

    check_against_model(config)
    check_rows(config)


def _claim_output(config, args: argparse.Namespace) -> None:
    """Refuse a run dir that holds a run unless --resume/--overwrite (main process only)."""
    from assay.train.run_dir import claim_run_dir

    claim_run_dir(Path(config.output.dir), str(args.config), resume=bool(args.resume),
                  overwrite=args.overwrite)  # fmt: skip


def cmd_train(args: argparse.Namespace) -> int:
    from assay.distributed.context import launched
    from assay.train.config import load_train_config
    from assay.train.loop import Trainer

    config = _with_strategy(load_train_config(args.config), args.strategy)
    _preflight(config)
    if launched():
        return _train_distributed(config, args)
    _check_fit(config, args)
    _claim_output(config, args)
    with load_status("model and data", enabled=not args.no_progress):
        trainer = Trainer(config, device=args.device, progress=not (args.json or args.no_progress))
    if args.resume:
        trainer.resume(args.resume)
    _print_summary(trainer.train(stop_at=args.stop_at), args.json)
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from assay.train.checkpoint import load_checkpoint
    from assay.train.config import load_train_config
    from assay.train.loop import Trainer

    config = load_train_config(args.config)
    _preflight(config)
    with load_status("model and data"):
        trainer = Trainer(config, device=args.device, progress=False)
    if args.checkpoint:
        load_checkpoint(args.checkpoint, fingerprints=None).restore(trainer.params, rng=False)
    if args.data:
        from assay.train.data import load_dataset

        data = config.data
        dataset = load_dataset(args.data, trainer.tokenizer, format=data.format, mask=data.mask,
                               seq_len=data.seq_len, truncate=data.truncate)  # fmt: skip
    elif trainer.eval_data is not None:
        dataset = trainer.eval_data
    else:
        raise AssayError(f"{args.config}: data.eval is not set; pass --data FILE")
    loss = trainer.evaluate(dataset)
    result = {"eval_loss": loss, "examples": len(dataset), "scored_tokens": dataset.scored_tokens,
              "checkpoint": args.checkpoint}  # fmt: skip
    print(
        json.dumps(result, indent=2)
        if args.json
        else f"eval loss {loss:.4f} over "
        f"{dataset.scored_tokens} scored tokens ({len(dataset)} examples)"
    )
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from assay.export import check_destination, export
    from assay.train.build import build_model, trainable_parameters
    from assay.train.checkpoint import load_checkpoint
    from assay.train.config import load_train_config
    from assay.train.loop import RUN_CONFIG

    checkpoint_dir = Path(args.checkpoint)
    run_dir = checkpoint_dir if (checkpoint_dir / "latest").exists() else checkpoint_dir.parent
    config_path = Path(args.config) if args.config else run_dir / RUN_CONFIG
    if not config_path.is_file():
        raise AssayError(f"{config_path}: no run config; pass --config CONFIG.yaml")
    config = load_train_config(config_path)
    _preflight(config)
    out_dir = Path(args.out)
    check_destination(out_dir, force=args.force)
    with load_status("model"):
        _, base = build_model(config)
    checkpoint = load_checkpoint(checkpoint_dir)
    if checkpoint.fingerprints["model"] != base.fingerprint.canonical_sha256:
        raise AssayError(f"{checkpoint.path}: was trained on another model than {config.model}")
    checkpoint.restore(trainable_parameters(base), rng=False)
    out = export(base, out_dir, args.format, gguf_type=args.gguf_type, force=args.force)
    result = {"checkpoint": str(checkpoint.path), "format": args.format, "out": str(out)}
    print(json.dumps(result) if args.json else f"wrote {out} ({args.format})")
    return 0


def packaged_doc(name: str) -> str:
    """The text of the packaged document ``name`` (a key of PACKAGED_DOCS), read from the
    installed package, so it matches the installed version."""
    return resources.files("assay.qualify").joinpath(f"{name}.md").read_text("utf-8")


def cmd_docs(args: argparse.Namespace) -> int:
    try:
        sys.stdout.write(packaged_doc(args.name))
        sys.stdout.flush()
    except BrokenPipeError:  # `| head` closed the pipe: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error at exit
    return 0


def _add_docs(sub: argparse._SubParsersAction) -> None:
    listing = "; ".join(f"{name}: {what}" for name, what in PACKAGED_DOCS.items())
    docs = sub.add_parser(
        "docs",
        help="print a document shipped with the package (gate-api)",
        description=f"Print a document shipped inside the installed package ({listing}).",
    )
    docs.add_argument("name", choices=sorted(PACKAGED_DOCS), help="the document")
    docs.set_defaults(func=cmd_docs)


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
    train = sub.add_parser(
        "train",
        help="fine-tune from a YAML config, with a progress bar",
        description="Fine-tune from a YAML config. Under torchrun (torchrun --nproc-per-node N "
        "-m assay.cli train CONFIG) every rank trains its slice of each step's rows (gloo on "
        "CPU, NCCL with --device cuda); rank 0 alone prints, logs and writes checkpoints, "
        "which resume at any world size.",
        epilog="adapter.method in the config: " + adapter_methods_help(),
    )
    train.add_argument("config", help="train config (YAML; see examples/)")
    train.add_argument(
        "--resume",
        metavar="DIR",
        help="continue bit for bit from a checkpoint (a run dir or step dir)",
    )
    train.add_argument(
        "--stop-at",
        type=int,
        metavar="STEP",
        help="stop after this step (checkpointed there); --resume continues",
    )
    train.add_argument(
        "--overwrite",
        action="store_true",
        help="delete an existing run in output.dir and start again (default: refuse it)",
    )
    train.add_argument("--device", default="cpu", help="compute device (default cpu)")
    train.add_argument(
        "--budget",
        help="device memory budget, e.g. 4GiB (default: config budget, else CUDA free memory)",
    )
    train.add_argument(
        "--force", action="store_true", help="train even when the predicted peak exceeds the budget"
    )
    train.add_argument("--json", action="store_true", help="print the summary as JSON")
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.add_argument(
        "--strategy",
        choices=("ddp", "fsdp"),
        help="under torchrun: ddp (replicate, all-reduce gradients) or fsdp (FSDP2 shards "
        "base and trainables); overrides distributed.strategy (default ddp). A plain "
        "process ignores it",
    )
    train.set_defaults(func=cmd_train)
    evaluate = sub.add_parser("eval", help="held-out loss of a config's model (and checkpoint)")
    evaluate.add_argument("config", help="train config (YAML)")
    evaluate.add_argument("--checkpoint", metavar="DIR", help="trainables to evaluate")
    evaluate.add_argument("--data", metavar="FILE", help="JSONL to score (default data.eval)")
    evaluate.add_argument("--device", default="cpu")
    evaluate.add_argument("--json", action="store_true")
    evaluate.set_defaults(func=cmd_eval)
    exporter = sub.add_parser(
        "export", help="write a checkpoint as a PEFT adapter or a merged model"
    )
    exporter.add_argument("checkpoint", help="run dir (follows 'latest') or step dir")
    exporter.add_argument(
        "--format",
        choices=("peft", "safetensors", "gguf"),
        required=True,
        help="peft: the adapter alone; safetensors/gguf: merged full model",
    )
    exporter.add_argument("--out", required=True, help="output folder (peft, safetensors) or file")
    exporter.add_argument("--gguf-type", choices=("F32", "F16"), default="F32")
    exporter.add_argument(
        "--force", action="store_true", help="replace a non-empty --out (default: refuse it)"
    )
    exporter.add_argument("--config", help="train config (default: the run dir's config.yaml)")
    exporter.add_argument("--json", action="store_true")
    exporter.set_defaults(func=cmd_export)
    _add_docs(sub)
    try:
        from assay.qualify.cli_commands import add_render_and_verify
    except ImportError:  # the qualify package is optional for a trainer-only install
        pass
    else:
        add_render_and_verify(sub)
        from assay.qualify.attest import add_attest

        add_attest(sub)
    from assay.memory.estimate_cli import add_estimate

    add_estimate(sub)
    from assay.generate_cli import add_generate

    add_generate(sub)
    return parser


def _rank_prefix() -> str:
    """``[rank N] `` inside a torchrun job, so each rank's one-line error says whose it is."""
    return f"[rank {os.environ['RANK']}] " if "RANK" in os.environ else ""


def needs_trainer_line(command: str) -> str:
    """The one line a trainer command prints when the ``train`` extra is not installed."""
    return f"assay {command} needs the trainer: pip install '{DISTRIBUTION}[train]'"


def trainer_installed() -> bool:
    """Whether torch, the core of the ``train`` extra, can be imported; imports nothing."""
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # a blocking import hook, or torch set to None
        return False


def _command_in(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv``: the first word that is not an option."""
    return next((word for word in argv if not word.startswith("-")), None)


def _from_train_extra(err: ModuleNotFoundError) -> bool:
    return (err.name or "").split(".")[0] in TRAIN_EXTRA_MODULES


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code. AssayError and OSError become one line and exit 2;
    so does a trainer command without the ``train`` extra (before any argument is checked;
    ``--help`` still prints)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = _command_in(argv)
    asks_help = any(word in ("-h", "--help") for word in argv)
    if command in TRAINER_COMMANDS and not asks_help and not trainer_installed():
        print(needs_trainer_line(command), file=sys.stderr)
        return EXIT_USAGE
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.func
    try:
        return handler(args)
    except AssayError as err:
        print(f"assay: error: {_rank_prefix()}{err}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as err:
        where = f"{err.filename or ''}: {err.strerror or err}"
        print(f"assay: error: {_rank_prefix()}{where}", file=sys.stderr)
        return EXIT_USAGE
    except ModuleNotFoundError as err:  # torch found, another part of the extra missing
        if args.command not in TRAINER_COMMANDS or not _from_train_extra(err):
            raise
        print(needs_trainer_line(args.command), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("assay: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
