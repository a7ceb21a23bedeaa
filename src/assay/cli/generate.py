"""``assay generate``: greedy continuations of prompts from a model, a config, or a run.

MODEL_OR_CONFIG is a GGUF file, an HF folder (or a Hub name, org/name, found in the local
Hugging Face cache), or a train config (YAML). With --adapter the adapter folder that
`assay export --format peft` (or PEFT itself) wrote is attached to the model. With
--checkpoint the run's trainables are restored onto the config's model (the config
defaults to the run directory's config.yaml). Prompts are decoded together as one
left-padded batch with a KV cache; each stops at eos (the tokenizer's, and every
eos_token_id of the folder's generation_config.json) or after --max-new-tokens. Decoding is
greedy: the sampling settings of generation_config.json are not used.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from assay.cli.checkpoint_arg import checkpoint_run
from assay.errors import AssayError, ConfigError
from assay.settings import STORAGES


def _is_config(path: Path) -> bool:
    return path.suffix in (".yaml", ".yml")


def _from_config(config_path: Path, checkpoint: str | None) -> tuple[Any, Any]:
    from assay.model.tokenizer import check_fits
    from assay.settings.loader import load_train_config
    from assay.train.build import build_resident_model, build_tokenizer, trainable_parameters
    from assay.train.checkpoint.directory import load_checkpoint, other_model

    config = load_train_config(config_path)
    tokenizer = build_tokenizer(config)  # before the weights: a bad one costs no decoding
    _, base = build_resident_model(config)  # cached decoding reads every base weight
    check_fits(tokenizer, base.config.vocab_size, str(config.model))
    if checkpoint is not None:
        saved = load_checkpoint(checkpoint)
        differs = other_model(saved.fingerprints, base)
        if differs:
            raise AssayError(f"{saved.path}: was trained on {differs}, not {config.model}")
        saved.restore(trainable_parameters(base), rng=False)
    return base, tokenizer


def _adapter_folder(path: Path) -> bool:
    """True for a folder an adapter export wrote (its marking file), not a model or a run."""
    from assay.adapters.io import marking_files

    return path.is_dir() and any((path / name).is_file() for name in marking_files())


def _check_sources(args: argparse.Namespace, source: Path) -> None:
    """Refuse, naming the argument, an adapter given where a model or a run goes, or an
    adapter beside a config or a checkpoint (which bring their own trainables)."""
    if _adapter_folder(source):
        raise AssayError(
            f"MODEL_OR_CONFIG {args.model}: an adapter folder, not a model; pass the base model "
            f"and --adapter {args.model}"
        )
    if args.checkpoint is not None and _adapter_folder(Path(args.checkpoint)):
        raise AssayError(
            f"--checkpoint {args.checkpoint}: an exported adapter, not a run; use --adapter "
            f"{args.checkpoint} with the base model"
        )
    if args.adapter is None:
        return
    if args.checkpoint is not None:
        raise AssayError("--adapter and --checkpoint: give one; both bring trained weights")
    if _is_config(source):
        raise AssayError(
            f"--adapter {args.adapter}: needs a model file or folder as MODEL_OR_CONFIG, not a "
            "train config"
        )
    if not _adapter_folder(Path(args.adapter)):
        from assay.adapters.io import marking_files

        expected = " or ".join(marking_files())
        raise AssayError(f"--adapter {args.adapter}: not an adapter folder (no {expected} in it)")


def _load(args: argparse.Namespace) -> tuple[Any, Any]:
    """(Decoder, Tokenizer) for the command line's source."""
    from assay.settings.hub import model_argument
    from assay.train.loop import RUN_CONFIG

    source = Path(model_argument(args.model))
    if not source.exists():
        raise AssayError(f"{source}: no such model, directory or config")
    _check_sources(args, source)
    if args.checkpoint is not None:
        run_dir = checkpoint_run(Path(args.checkpoint))
        config = source if _is_config(source) else run_dir / RUN_CONFIG
        if not config.is_file():
            raise AssayError(f"{config}: no run config for --checkpoint; pass a config YAML")
        return _from_config(config, args.checkpoint)
    if _is_config(source):
        return _from_config(source, None)
    import assay
    from assay.model.loader import open_source
    from assay.model.tokenizer import check_fits, load_tokenizer

    # the headers and the tokenizer first: a bad one is refused before any weight is decoded
    header = open_source(source)
    tokenizer = load_tokenizer(args.tokenizer or source)
    check_fits(tokenizer, header.config.vocab_size, str(source))
    model = assay.load(source, storage=args.storage)
    if args.adapter is not None:
        from assay.adapters.io import load_adapter

        try:
            load_adapter(model, args.adapter)
        except ConfigError as err:
            raise ConfigError(f"--adapter {args.adapter}: {err}") from None
    return model, tokenizer


DEFAULT_NEW_TOKENS = 64


def _generation_defaults(args: argparse.Namespace):
    """The model folder's generation_config.json defaults (none for a config or a GGUF)."""
    from assay.model.generation_config import GenerationDefaults, generation_defaults
    from assay.settings.hub import model_argument

    source = Path(model_argument(args.model))
    return GenerationDefaults() if _is_config(source) else generation_defaults(source)


def _within_context(prompts: list[list[int]], new: int, context: int) -> None:
    """Refuse, naming the option, a prompt or a continuation past the model's context: the
    rotary positions beyond it were never trained, so the output would be silently wrong."""
    for number, prompt in enumerate(prompts, 1):
        if len(prompt) > context:
            raise AssayError(
                f"--prompt {number}: {len(prompt)} tokens exceed the model's context of "
                f"{context} tokens"
            )
    longest = max(len(p) for p in prompts)
    if longest + new > context:
        raise AssayError(
            f"--max-new-tokens {new}: the longest prompt ({longest} tokens) plus {new} new "
            f"tokens exceed the model's context of {context}; use at most {context - longest}"
        )


def run(args: argparse.Namespace) -> int:
    from assay.model.generate import generate

    if args.max_new_tokens is not None and args.max_new_tokens < 0:
        raise AssayError(f"--max-new-tokens {args.max_new_tokens}: expected 0 or more")
    for number, prompt in enumerate(args.prompt, 1):
        if not prompt:
            raise AssayError(f"--prompt {number}: a prompt is empty")
        try:  # argv that is not UTF-8 arrives with its bytes escaped as lone surrogates
            prompt.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise AssayError(
                f"--prompt {number}: not valid UTF-8 (byte {exc.start} of the prompt)"
            ) from None
    model, tok = _load(args)
    texts = args.prompt
    if args.chat:
        try:
            texts = [
                tok.apply_chat_template(
                    [{"role": "user", "content": p}], add_generation_prompt=True
                )
                for p in texts
            ]
        except ValueError as exc:  # the template's own raise_exception
            raise AssayError(f"{tok.source}: the chat template refused the prompt: {exc}") from None
    # a rendered template carries its own special tokens, as transformers' apply_chat_template
    prompts = [tok.encode(t, add_special_tokens=not args.chat) for t in texts]
    defaults = _generation_defaults(args)
    new_tokens = args.max_new_tokens
    if new_tokens is None:
        new_tokens = defaults.max_new_tokens or DEFAULT_NEW_TOKENS
    _within_context(prompts, new_tokens, model.config.max_position_embeddings)
    pad = next((i for i in (tok.pad_id, tok.eos_id, 0) if i is not None), 0)
    stops = {tok.eos_id, *defaults.eos_ids} - {None}
    results = generate(model, prompts, max_new_tokens=new_tokens, eos_id=stops, pad_id=pad)
    rows = [
        {"prompt": p, "completion": tok.decode(r.tokens), "tokens": list(r.tokens), "stop": r.stop}
        for p, r in zip(args.prompt, results, strict=True)
    ]
    if args.json:
        print(json.dumps(rows if len(rows) > 1 else rows[0], indent=2))
    else:
        for row in rows:
            print(
                row["completion"]
                if len(rows) == 1
                else f"{row['prompt']!r} -> {row['completion']!r}"
            )
    return 0


def arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``assay generate``."""
    parser.description = __doc__.split("\n\n", 1)[1] if __doc__ else None
    parser.add_argument(
        "model", metavar="MODEL_OR_CONFIG", help="GGUF file, HF dir, Hub name or config YAML"
    )
    parser.add_argument(
        "--prompt", action="append", required=True, help="a prompt (repeat for a batch)"
    )
    parser.add_argument(
        "--checkpoint", metavar="RUN", help="run dir (follows 'latest') or step dir"
    )
    parser.add_argument(
        "--adapter",
        metavar="DIR",
        help="an adapter folder (assay export --format peft, or PEFT's) to attach to MODEL",
    )
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        metavar="N",
        help="stop after N new tokens (default: the model folder's generation_config.json "
        f"max_new_tokens, else {DEFAULT_NEW_TOKENS})",
    )
    parser.add_argument(
        "--storage",
        choices=STORAGES,
        default="float32",
        help="frozen storage for a model file (a config sets its own)",
    )
    parser.add_argument(
        "--tokenizer",
        metavar="PATH",
        help="tokenizer: a GGUF, or an HF folder with tokenizer.json (default: the model)",
    )
    parser.add_argument(
        "--chat", action="store_true", help="wrap each prompt as a user turn in the chat template"
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
