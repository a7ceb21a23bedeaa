"""The training configuration: a YAML file, checked by a JSON Schema, as frozen dataclasses.

``load_train_config(path)`` reads the YAML, validates it against
``schemas/train-config.schema.json`` (unknown keys, wrong types, out-of-range sizes), then checks
combinations the schema cannot express (``full`` with NF4 storage, a field that does not apply
to the chosen method or loss, warmup longer than the run). Every failure is one ConfigError
line naming the file and the dotted field. The result has every default filled, and relative
paths resolved against the config file's directory.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
from pathlib import Path
from typing import Any

from assay.errors import ConfigError
from assay.settings import (
    PREFERENCE_LOSSES,
    AdapterConfig,
    BatchConfig,
    DataConfig,
    DistributedConfig,
    LossConfig,
    OptimConfig,
    OutputConfig,
    Rule,
    StreamConfig,
    TrainConfig,
    rules,
)
from assay.settings.choices import REFERENCE_FREE_LOSSES
from assay.settings.derived import check_derived
from assay.settings.hub import cached_snapshot, hub_name
from assay.settings.methods import method as registered
from assay.settings.schema import yaml_body
from assay.settings.storages import storage as registered_storage
from assay.settings.yaml_reader import check_schema, read_yaml

__all__ = [
    "config_as_yaml",
    "config_fingerprint",
    "load_train_config",
    "model_path",
    "parse_size",
    "tokenizer_path",
    "train_config_from_dict",
]

_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
}


# Fields that do not change the training trajectory, or whose content another fingerprint
# covers (model and data files), so a run can move between directories and still resume.
# ``distributed`` is among them: the global batch is the same at every world size, so a
# checkpoint written by 2 ranks resumes on 1 (and the reverse).
_NOT_FINGERPRINTED = ("source", "output", "budget", "model", "tokenizer", "distributed")


def config_as_yaml(config: TrainConfig) -> dict[str, Any]:
    """A mapping that validates against the schema and loads back to an equal config.

    Paths are absolute. Absent optional sections and keys that do not apply are left out; a
    disabled gradient clip stays an explicit null (the settings tree says which keys).
    """
    return yaml_body(config)


# Keys added after runs were first fingerprinted, with the values that mean what every run written
# before the key behaved as: a key holding one of them is left out of the fingerprint, so adding
# a setting never stops an old run from resuming (tests/test_config_fingerprints.py pins them).
ADDED_LATER: dict[tuple[str | None, str], tuple[object, ...]] = {
    ("adapter", "dropout"): (None, 0, 0.0),  # dropout off
    ("adapter", "lr_ratio"): (None,),  # not LoRA+
    (None, "precision"): ("float32",),  # section None: a top-level key
    (None, "compile"): (False,),
}


def config_fingerprint(config: TrainConfig) -> str:
    """sha256 hex of the canonical JSON (sorted keys, compact) of the trajectory-relevant fields.

    Excluded: ``source``, ``output``, ``budget``, ``distributed``, the model path and the data
    paths (the model and dataset fingerprints cover those files' content). Everything else,
    defaults included, counts: two configs with the same fingerprint train identically on the
    same model and data.
    """
    body = config.to_dict()
    for key in _NOT_FINGERPRINTED:
        body.pop(key, None)
    for (section, key), before in ADDED_LATER.items():
        holder = body if section is None else body[section]
        if holder.get(key, None) in before:
            holder.pop(key, None)
    body["data"] = {k: v for k, v in body["data"].items() if k not in ("train", "eval")}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


MAX_SIZE = 1 << 60  # one EiB: past any machine's memory, far below a float's precision limit


def parse_size(value: int | str) -> int:
    """Bytes in ``value``: an integer, or a string such as ``4GiB``, ``512MiB``, ``2.5GB``;
    between 1 byte and :data:`MAX_SIZE` (ValueError saying which bound, for any other)."""
    if isinstance(value, int):
        size: int | float = value
    else:
        match = re.fullmatch(r"\s*([0-9]{1,30}(?:\.[0-9]{1,30})?)\s*([A-Za-z]*)\s*", value)
        if match is None or match.group(2) not in _UNITS:
            units = ", ".join(u for u in _UNITS if u)
            shown = value if len(value) <= 40 else value[:40] + "..."
            raise ValueError(f"{shown!r} is not a size such as 4GiB (units: {units}, or bytes)")
        size = float(match.group(1)) * _UNITS[match.group(2)]
        if "." in match.group(1) and not match.group(2):  # a fraction of a byte is no size
            raise ValueError(f"{value.strip()!r}: a byte count is a whole number (or add a unit)")
    if not 1 <= size <= MAX_SIZE:
        raise ValueError(
            "a size must be at least 1 byte"
            if size < 1
            else "a size can be at most 1 EiB (2**60 bytes)"
        )
    return int(size)


def _resolve(reference: str | None, base: Path) -> str | None:
    if reference is None or reference.startswith("pkg:"):
        return reference
    if hub_name(reference, base) is not None:
        return reference  # a Hub name (org/name), looked up in the local cache when read
    return str(base / reference)


def resolve_reference(reference: str, field: str, source: str) -> Path:
    """A path; ``pkg:<module>/<file>`` resolved inside an installed package (not imported); or
    a Hub name (``org/name[@revision]``, nothing at that path) resolved from the local Hugging
    Face cache, never downloaded (ConfigError naming the fetch command when not cached)."""
    if not reference.startswith("pkg:"):
        base = Path(source).parent  # a config's own paths are relative to its folder
        if hub_name(reference, base) is not None:
            return cached_snapshot(reference, f"{source}: {field}", base)
        return Path(reference)
    module, _, rest = reference[4:].partition("/")
    parts = rest.replace("\\", "/").split("/")
    if not rest or rest.startswith("/") or ".." in parts or ":" in rest or "." in module[:1]:
        raise ConfigError(
            f"{source}: {field}: {reference!r} must name a file inside the package "
            "(pkg:<module>/<file>, no '..', no absolute or drive part)"
        )
    try:
        spec = importlib.util.find_spec(module) if module else None
    except (ImportError, ValueError):  # a dotted name whose parent is missing, or empty parts
        spec = None
    if spec is None or spec.origin is None:
        raise ConfigError(f"{source}: {field}: package {module!r} is not installed")
    return Path(os.path.dirname(spec.origin)) / rest


def model_path(config: TrainConfig) -> Path:
    """The model file or directory; resolves ``pkg:<module>/<file>`` without importing it."""
    return resolve_reference(config.model, "model", config.source)


def base_model(config: TrainConfig) -> dict[str, str | None]:
    """How an export names the config's model as its base (PEFT's ``base_model_name_or_path``
    and ``revision``): a Hub name as the config wrote it, else the model's absolute path."""
    found = hub_name(config.model, Path(config.source).parent)
    if found is not None:
        return {"name_or_path": found[0], "revision": found[1]}
    return {"name_or_path": str(model_path(config).resolve()), "revision": None}


def tokenizer_path(config: TrainConfig) -> Path:
    """The GGUF or Hugging Face folder the tokenizer is read from: ``tokenizer`` if set, else
    the model."""
    if config.tokenizer is None:
        return model_path(config)
    return resolve_reference(config.tokenizer, "tokenizer", config.source)


def _fail(source: Path, field: str, message: str) -> ConfigError:
    return ConfigError(f"{source}: {field}: {message}")


def _typed(found: Rule, value: Any) -> Any:
    if value is None:
        return None
    if found.kind == "number":
        return float(value)
    if found.kind == "integer":
        return int(value)
    if found.kind == "boolean":
        return bool(value)
    if found.kind == "array":
        number = (found.items or {}).get("type")
        return tuple(float(v) if number == "number" else v for v in value)
    return value


def _filled(cls: type[Any], raw: dict[str, Any], *, at: str, source: Path) -> dict[str, Any]:
    """Every plain key of section ``cls``: the given value or the tree's default, typed; a key
    that does not apply under the section's selector is refused when given and None else."""
    name = getattr(cls, "selector", None)
    selector = None if name is None else raw.get(name, rules(cls)[name].default)
    out = {}
    for key, found in rules(cls).items():
        if found.kind == "section":
            continue
        if found.applies is not None and selector not in found.applies:
            if key in raw:
                raise _fail(
                    source,
                    f"{at}.{key}",
                    f"does not apply to {cls.selector_word} {selector}; it applies to "
                    f"{found.where()}",
                )
            out[key] = found.default if found.held else None
            continue
        out[key] = _typed(found, raw.get(key, found.default_for(selector)))
    return out


def _adapter(raw: dict[str, Any], storage: str, source: Path) -> AdapterConfig:
    body = _filled(AdapterConfig, raw, at="adapter", source=source)
    method = body["method"]
    if not registered(method).trains_base or registered_storage(storage).keeps_parameters:
        return AdapterConfig(**body)
    raise _fail(
        source,
        "adapter.method",
        f"{method} trains every weight and needs storage float32, not {storage} "
        "(frozen bf16/4-bit storage has no gradient); use float32 or an adapter",
    )


def _loss(raw: dict[str, Any], source: Path) -> LossConfig:
    body = _filled(LossConfig, raw, at="loss", source=source)
    if body["dpo_variant"] != "robust":
        if "label_smoothing" in raw:
            raise _fail(
                source,
                "loss.label_smoothing",
                "does not apply unless loss dpo with dpo_variant robust",
            )
        body["label_smoothing"] = None
    return LossConfig(**body)


def _data(raw: dict[str, Any], loss: str, base: Path, source: Path) -> DataConfig:
    body = _filled(DataConfig, raw, at="data", source=source)
    fmt, mask = body["format"], body["mask"]
    wanted = {"kto": ("kto",), **{k: ("preference",) for k in PREFERENCE_LOSSES}}.get(
        loss, ("text", "prompt_completion", "messages")
    )
    if fmt != "auto" and fmt not in wanted:
        raise _fail(
            source,
            "data.format",
            f"{fmt} rows cannot train loss {loss} (needs {' or '.join(wanted)})",
        )
    if fmt == "text" and mask == "completion_only":
        raise _fail(source, "data.mask", "completion_only needs a completion; text rows have none")
    if loss not in ("ce", "chunked_ce") and mask == "all":
        raise _fail(
            source,
            "data.mask",
            f"loss {loss} scores completions only; use completion_only or leave mask out",
        )
    body["train"] = str(base / body["train"])
    body["eval"] = None if body["eval"] is None else str(base / body["eval"])
    return DataConfig(**body)


def _optim(raw: dict[str, Any], steps: int, source: Path) -> OptimConfig:
    body = _filled(OptimConfig, raw, at="optim", source=source)
    if body["warmup_steps"] > steps:
        raise _fail(source, "optim.warmup_steps", f"{body['warmup_steps']} exceeds steps ({steps})")
    return OptimConfig(**body)


def _budget(value: int | str | None, source: Path) -> int | None:
    if value is None:
        return None
    try:
        return parse_size(value)
    except ValueError as exc:
        raise _fail(source, "budget", str(exc)) from None


def check_distributed(config: TrainConfig, *, launched: bool = False) -> None:
    """ConfigError for a ``distributed`` section (or, ``launched``, a job of several ranks)
    that cannot work with the rest of the config.

    KTO estimates its reference KL from mismatched pairs of the rows it holds, so split over
    ranks it would train another objective than one process does: refused. FSDP2 shards
    parameters: a bf16/NF4 base is held in buffers, which it leaves whole, and a streamed base
    lives in a host store outside the module, so both are refused rather than silently left
    unsharded; and it shards each layer as its own group, which no parameter shared by several
    layers (TinyLoRA's global vector) can belong to.
    """
    dist = config.distributed
    source = Path(config.source)
    if config.loss.type == "kto" and (dist is not None or launched):
        raise _fail(
            source,
            "loss.type",
            "kto estimates its reference KL from mismatched pairs of each rank's own rows, so "
            "it changes with the world size; train kto in one process (drop distributed)",
        )
    if dist is None or dist.strategy != "fsdp":
        return
    if config.stream is not None:
        raise _fail(
            source,
            "distributed.strategy",
            "fsdp cannot shard a streamed base (the stream store holds it outside the module); "
            "use strategy ddp with streaming (each rank streams its own base) or drop stream",
        )
    if not registered_storage(config.storage).keeps_parameters:
        raise _fail(
            source,
            "distributed.strategy",
            f"fsdp shards parameters, and storage {config.storage} holds the frozen base in "
            "buffers that FSDP2 does not shard; use storage float32 or strategy ddp",
        )
    if config.adapter.sharing == "global":
        raise _fail(
            source,
            "distributed.strategy",
            "fsdp shards each layer's parameters as a group of its own, and tinylora with "
            "sharing: global trains one vector shared by every layer; use strategy ddp or "
            "adapter.sharing: per_target",
        )


def check_training_semantics(config: TrainConfig) -> None:
    """ConfigError for settings that cannot mean what they say together.

    ``output.eval_every`` needs held-out data. LoRA dropout in a streamed run that recomputes
    each layer in backward would draw a second, different mask for the recomputation, so the
    gradient would not be the forward's: such a run must keep activations instead. ``compile``
    compiles resident layers; a streamed layer runs with weights swapped in per call. A method
    that trains the base (full) streams from the RAM tier only and recomputes (its weights'
    gradients come from the layer run again), and it has no adapters to switch off for the
    reference policy a DPO, IPO or KTO loss compares with. Each is refused here, before anything
    is loaded, rather than once the model is built.
    """
    source = Path(config.source)
    if registered(config.adapter.method).trains_base:
        stream = config.stream
        if stream is not None and stream.tier == "disk":
            raise _fail(
                source,
                "stream.tier",
                f"method {config.adapter.method} streams from the RAM tier only; "
                "use stream.tier: ram or an adapter method",
            )
        if stream is not None and not stream.recompute:
            raise _fail(
                source,
                "stream.recompute",
                f"false keeps activations over a frozen base; method "
                f"{config.adapter.method} recomputes: set it true",
            )
        loss = config.loss.type
        if loss in (*PREFERENCE_LOSSES, "kto") and loss not in REFERENCE_FREE_LOSSES:
            raise _fail(
                source,
                "adapter.method",
                f"{config.adapter.method} has no adapters to switch off for the "
                f"reference policy loss {loss} compares with; use an adapter method, "
                f"or a reference-free loss ({', '.join(REFERENCE_FREE_LOSSES)})",
            )
    if config.compile and config.stream is not None:
        raise _fail(
            source,
            "compile",
            "compiles resident decoder layers; a streamed run swaps each layer's weights in "
            "and out and runs eager: set compile: false or drop stream",
        )
    if config.output.eval_every is not None and config.data.eval is None:
        raise _fail(source, "output.eval_every", "needs held-out rows: set data.eval")
    stream = config.stream
    if config.adapter.dropout and stream is not None and stream.recompute:
        raise _fail(
            source,
            "adapter.dropout",
            "a streamed run that recomputes layers in backward would draw a new dropout mask; "
            "set stream.recompute: false or adapter.dropout: 0",
        )


def _optional(cls: type, raw: dict[str, Any] | None, at: str, source: Path) -> Any:
    return None if raw is None else cls(**_filled(cls, raw, at=at, source=source))


def train_config_from_dict(data: dict[str, Any], source: str | os.PathLike[str]) -> TrainConfig:
    """Validate a parsed config mapping; ``source`` is the file it came from (paths, errors)."""
    path = Path(source)
    check_schema(data, path)
    base = path.resolve().parent
    top = _filled(TrainConfig, data, at="(top level)", source=path)
    loss = _loss(data.get("loss", {}), path)
    output = _filled(
        OutputConfig,
        {"dir": f"runs/{path.stem}", **data.get("output", {})},
        at="output",
        source=path,
    )
    output["dir"] = str(base / output["dir"])
    top.update(
        model=_resolve(top["model"], base),
        tokenizer=_resolve(top["tokenizer"], base),
        adapter=_adapter(data.get("adapter", {}), top["storage"], path),
        data=_data(data["data"], loss.type, base, path),
        loss=loss,
        optim=_optim(data.get("optim", {}), top["steps"], path),
        batch=_optional(BatchConfig, data.get("batch", {}), "batch", path),
        output=OutputConfig(**output),
        stream=_optional(StreamConfig, data.get("stream"), "stream", path),
        budget=_budget(data.get("budget"), path),
        distributed=_optional(DistributedConfig, data.get("distributed"), "distributed", path),
        source=str(path),
    )
    config = TrainConfig(**top)
    check_distributed(config)
    check_training_semantics(config)
    check_derived(config)
    return config


def load_train_config(path: str | os.PathLike[str]) -> TrainConfig:
    """Read, validate and default-fill the YAML train config at ``path``.

    Raises ConfigError (one line: file, dotted field, what was expected) for unreadable YAML,
    duplicate or unknown keys (with the nearest valid key), wrong types, out-of-range values
    and impossible combinations. Files named in the config are not opened here.
    """
    return train_config_from_dict(read_yaml(Path(path)), path)
