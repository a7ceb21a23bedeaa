"""``assay estimate [CONFIG] [--shape NAME [--layers N]] --budget B [--json]``: predicted peak,
breakdown, and a fit verdict (exit 1 when refused). The plan and the verdict are
:mod:`assay.memory.plan`'s.

CONFIG's model dimensions come from its model file's header. ``--shape`` names a published
shape (:mod:`assay.model.shapes`) instead, so nothing is read or built: with CONFIG, the
config's settings at the shape's dimensions (its model file need not exist); alone, the
settings ``assay train`` defaults to (the settings tree's: LoRA rank 8 on q/k/v/o, storage
float32, resident, seq 512, micro-batch 1, loss ce). ``--storage``, ``--stream-buffers`` and
``--seq`` change one setting of either. With ``--shape`` and no budget anywhere, the prediction
is printed without a verdict (exit 0).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable
from typing import Any, cast

from assay.memory.plan import gib, header_config, plan_from_config, refusal_line, verdict
from assay.model.shapes import MAX_LAYERS, SHAPES
from assay.settings import STORAGES, rule

EXIT_FITS, EXIT_REFUSED = 0, 1
DEFAULTS_TEXT = "assay train's defaults"


def _integer(allowed: Callable[[int], bool], expected: str) -> Callable[[str], int]:
    """An argparse type: the integer in the text, or a usage error saying what was expected."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not allowed(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


# both keys are integers with a minimum
MIN_BUFFERS = cast(int, rule("stream.buffers").minimum)
MIN_SEQ = cast(int, rule("data.seq_len").minimum)


def _defaults(name: str) -> Any:
    """The TrainConfig ``assay train`` would run with every setting left out (no files)."""
    from assay.settings import DataConfig, OutputConfig, TrainConfig

    return TrainConfig(
        model=f"shape:{name}",
        data=DataConfig(train=""),
        steps=1,
        output=OutputConfig(dir=""),
        source=f"--shape {name}",
    )


def _with_options(config: Any, args: argparse.Namespace, model: Any, label: str) -> Any:
    """``config`` with the command line's --storage, --stream-buffers and --seq, each checked
    against ``model`` (ConfigError naming the option and the valid range)."""
    from assay.errors import ConfigError
    from assay.settings import StreamConfig
    from assay.settings.methods import method
    from assay.settings.storages import storage

    changes: dict[str, Any] = {}
    if args.storage is not None:
        chosen = method(config.adapter.method)
        if chosen.trains_base and not storage(args.storage).keeps_parameters:
            raise ConfigError(
                f"--storage: method {config.adapter.method} trains every weight and needs "
                f"storage float32, not {args.storage}"
            )
        changes["storage"] = args.storage
    if args.stream_buffers is not None:
        buffers, layers = args.stream_buffers, model.num_layers
        if buffers > layers:
            streamable = f"or {MIN_BUFFERS}..{layers}" if layers >= MIN_BUFFERS else "only"
            raise ConfigError(
                f"--stream-buffers: {buffers} exceeds {label}'s {layers} layers (valid 0 for "
                f"resident {streamable})"
            )
        if buffers and config.compile:
            raise ConfigError(
                f"--stream-buffers: {buffers} streams, and the config compiles its layers "
                "(compile: true), which only a resident run does: pass 0, or compile: false"
            )
        stream = config.stream or StreamConfig()
        changes["stream"] = dataclasses.replace(stream, buffers=buffers) if buffers else None
    if args.seq is not None:
        context = model.max_position_embeddings
        if args.seq > context:
            raise ConfigError(
                f"--seq: {args.seq} exceeds {label}'s context length {context} "
                f"(valid {MIN_SEQ}..{context})"
            )
        changes["data"] = dataclasses.replace(config.data, seq_len=args.seq)
    return dataclasses.replace(config, **changes) if changes else config


def defaults_line() -> str:
    """What ``--shape`` alone plans with, read from the settings tree (for --help)."""
    name = next(iter(SHAPES))
    return _settings_line(plan_from_config(_defaults(name), SHAPES[name]).to_dict())


def _settings_line(plan: dict[str, Any]) -> str:
    from assay.settings.methods import method

    trains = f"{plan['method']} rank {plan['rank']} on {','.join(plan['targets'])}"
    trains = "full (every weight)" if method(plan["method"]).trains_base else trains
    stream = f"streamed, {plan['stream_buffers']} buffers" if plan["stream_buffers"] else "resident"
    return (
        f"{trains}; storage {plan['storage']}; {stream}; seq {plan['seq_len']} x micro-batch "
        f"{plan['micro_batch']}; loss {plan['loss']}"
    )


def run(args: argparse.Namespace) -> int:
    from assay.errors import ConfigError
    from assay.memory.predict import predict
    from assay.model.shapes import named_shape, parameter_count
    from assay.settings.derived import check_derived
    from assay.settings.loader import (
        check_training_semantics,
        load_train_config,
        model_path,
        parse_size,
    )
    from assay.train.preflight import check_against_model

    if args.layers is not None and args.shape is None:
        raise ConfigError("--layers: sets the depth of a --shape; pass --shape NAME with it")
    if args.config is None and args.shape is None:
        raise ConfigError("estimate needs a train config (CONFIG) or a model shape (--shape NAME)")
    if args.shape is not None:
        model = named_shape(args.shape, args.layers)
        config = load_train_config(args.config) if args.config else _defaults(args.shape)
        label = args.shape
    else:
        config = load_train_config(args.config)
        check_against_model(config)
        model = header_config(model_path(config))
        label = "the model"
    config = _with_options(config, args, model, label)
    if args.shape is not None:
        check_against_model(config, model)
    check_training_semantics(config)
    check_derived(config)
    raw = args.budget if args.budget is not None else config.budget
    if raw is None and args.shape is None:
        raise ConfigError(f"{args.config}: no budget: pass --budget (e.g. 4GiB) or set budget")
    try:
        budget = None if raw is None else parse_size(raw)
    except ValueError as exc:
        where = f"{args.config}: " if args.config else ""
        raise ConfigError(f"{where}--budget: {exc}") from None
    plan = plan_from_config(config, model)
    if budget is None:
        found = {"fits": None, "budget_bytes": None, "prediction": predict(plan).to_dict()}
        result: dict[str, Any] = {**found, "plan": plan.to_dict(), "fixes": []}
    else:
        result = verdict(plan, budget)
    if args.shape is not None:
        result["shape"] = {
            "name": args.shape,
            "layers": model.num_layers,
            "parameters": parameter_count(model),
            "settings": str(args.config) if args.config else DEFAULTS_TEXT,
        }
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        _print_text(result)
    return EXIT_FITS if result["fits"] is not False else EXIT_REFUSED


def _print_text(result: dict[str, Any]) -> None:
    prediction, budget = result["prediction"], result["budget_bytes"]
    if "shape" in result:
        shape = result["shape"]
        print(
            f"{shape['name']} at {shape['layers']} layers ({shape['parameters']:,} parameters), "
            f"settings from {shape['settings']}"
        )
        print(f"  {_settings_line(result['plan'])}")
    given = f"budget {gib(budget)}, " if budget is not None else ""
    print(
        f"predicted peak {gib(prediction['total_bytes'])} "
        f"({given}peak at the {prediction['peak_phase']})"
    )
    for name, value in prediction["terms"].items():
        print(f"  {name:<16}{value:>16,}")
    if result["fits"] is None:
        print("no budget given: pass --budget (e.g. 4GiB) for a verdict")
    else:
        print("fits" if result["fits"] else "refused: " + refusal_line(result))


def arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``assay estimate``."""
    parser.add_argument(
        "config",
        nargs="?",
        help=f"train config YAML (optional with --shape: without it, {DEFAULTS_TEXT}: "
        f"{defaults_line()})",
    )
    parser.add_argument(
        "--budget",
        help="device memory budget such as 4GiB (default: config; with --shape and none, the "
        "prediction is printed without a verdict)",
    )
    parser.add_argument(
        "--shape",
        choices=tuple(SHAPES),
        metavar="NAME",
        help="plan for a published model shape instead of the config's model file, reading "
        f"nothing: {', '.join(SHAPES)}",
    )
    parser.add_argument(
        "--layers",
        type=_integer(lambda n: 1 <= n <= MAX_LAYERS, f"a positive integer up to {MAX_LAYERS}"),
        metavar="N",
        help=f"with --shape: that shape's width at N decoder layers (1..{MAX_LAYERS})",
    )
    parser.add_argument(
        "--storage", choices=STORAGES, help="how the frozen base is held (default: config's)"
    )
    parser.add_argument(
        "--stream-buffers",
        type=_integer(
            lambda n: n == 0 or n >= MIN_BUFFERS,
            f"0 (resident) or an integer of at least {MIN_BUFFERS}",
        ),
        metavar="N",
        help=f"stream layers through N device buffers (at least {MIN_BUFFERS}); 0 keeps every "
        "layer resident (default: config's)",
    )
    parser.add_argument(
        "--seq",
        type=_integer(lambda n: n >= MIN_SEQ, f"an integer of at least {MIN_SEQ}"),
        metavar="N",
        help="tokens per sequence, data.seq_len (default: config's)",
    )
    parser.add_argument("--json", action="store_true", help="print the estimate as JSON")
