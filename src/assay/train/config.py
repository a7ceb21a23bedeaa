"""The training configuration: a YAML file, checked by a JSON Schema, as frozen dataclasses.

``load_train_config(path)`` reads the YAML, validates it against
``schemas/train-config.schema.json`` (unknown keys, wrong types, out-of-range sizes), then checks
combinations the schema cannot express (``full`` with NF4 storage, a field that does not apply
to the chosen method or loss, warmup longer than the run). Every failure is one ConfigError
line naming the file and the dotted field. The result has every default filled, and relative
paths resolved against the config file's directory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.adapter_registry import LORA_FAMILY, LoRAOptions, TinyLoRAOptions, build_options
from assay.errors import ConfigError
from assay.train.config_schema import check_schema, read_yaml

PREFERENCE_LOSSES = ("dpo", "ipo", "orpo", "simpo")
DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
_BETA_DEFAULT = {"dpo": 0.1, "ipo": 0.1, "orpo": 0.1, "simpo": 2.0, "kto": 0.1}
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


@dataclass(frozen=True)
class AdapterConfig:
    """What trains. Fields that do not apply to ``method`` are None; the defaults of the ones
    that do are the adapter registry's (``assay.adapter_registry``)."""

    method: str = "lora"
    rank: int | None = LoRAOptions.rank
    alpha: float | None = LoRAOptions.alpha
    targets: tuple[str, ...] = DEFAULT_TARGETS
    layers: tuple[int, ...] | None = None
    u: int | None = None
    r: int | None = None
    sharing: str | None = None
    dropout: float | None = LoRAOptions.dropout

    def options(self) -> dict[str, Any]:
        """The method's own options for ``attach`` (fields that do not apply left out)."""
        names = ("rank", "alpha", "dropout", "u", "r", "sharing")
        return {k: getattr(self, k) for k in names if getattr(self, k) is not None}


@dataclass(frozen=True)
class DataConfig:
    """Rows and how they become scored tokens; ``mask`` None means the format's default."""

    train: str
    eval: str | None = None
    format: str = "auto"
    mask: str | None = None
    seq_len: int = 512
    truncate: bool = False


@dataclass(frozen=True)
class LossConfig:
    """Objective; fields that do not apply to ``type`` are None."""

    type: str = "ce"
    chunk_size: int | None = None
    beta: float | None = None
    gamma: float | None = None
    desirable_weight: float | None = None
    undesirable_weight: float | None = None
    dpo_variant: str | None = None
    label_smoothing: float | None = None


@dataclass(frozen=True)
class OptimConfig:
    """AdamW hyperparameters and the learning-rate schedule."""

    lr: float = 2e-4
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    grad_clip: float | None = 1.0
    schedule: str = "constant"
    warmup_steps: int = 0


@dataclass(frozen=True)
class BatchConfig:
    """Rows per micro-batch and micro-batches per optimizer step."""

    micro_batch: int = 1
    grad_accum: int = 1


@dataclass(frozen=True)
class OutputConfig:
    """Run directory (absolute) and the save/log/eval cadence in optimizer steps.

    ``eval_every`` None means no evaluation during training (the final summary still has the
    eval loss when ``data.eval`` is set)."""

    dir: str
    save_every: int = 100
    log_every: int = 10
    eval_every: int | None = None


@dataclass(frozen=True)
class StreamConfig:
    """Layer streaming tier, number of device slots, and whether backward recomputes layers."""

    tier: str = "ram"
    buffers: int = 2
    recompute: bool = True


@dataclass(frozen=True)
class DistributedConfig:
    """How a run launched under torchrun splits the work; ignored by a plain single process.

    ``ddp`` replicates the model and all-reduces trainable gradients; ``fsdp`` shards the
    frozen base and the trainables with FSDP2 (``fully_shard``). ``backend`` ``auto`` is gloo
    on CPU and NCCL on CUDA.
    """

    strategy: str = "ddp"
    backend: str = "auto"


@dataclass(frozen=True)
class TrainConfig:
    """One run, defaults filled. ``model`` is an absolute path or a ``pkg:`` reference."""

    model: str
    data: DataConfig
    steps: int
    output: OutputConfig
    storage: str = "float32"
    adapter: AdapterConfig = AdapterConfig()
    loss: LossConfig = LossConfig()
    optim: OptimConfig = OptimConfig()
    batch: BatchConfig = BatchConfig()
    seed: int = 0
    gradient_checkpointing: bool = False
    neftune_alpha: float = 0.0
    tokenizer: str | None = None
    stream: StreamConfig | None = None
    budget: int | None = None
    distributed: DistributedConfig | None = None
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (tuples become lists)."""
        return json.loads(json.dumps(dataclasses.asdict(self)))


# Fields that do not change the training trajectory, or whose content another fingerprint
# covers (model and data files), so a run can move between directories and still resume.
# ``distributed`` is among them: the global batch is the same at every world size, so a
# checkpoint written by 2 ranks resumes on 1 (and the reverse).
_NOT_FINGERPRINTED = ("source", "output", "budget", "model", "tokenizer", "distributed")


def config_as_yaml(config: TrainConfig) -> dict[str, Any]:
    """A mapping that validates against the schema and loads back to an equal config.

    Paths are absolute. Absent optional sections and inapplicable fields are left out; a
    disabled gradient clip stays an explicit null.
    """
    body = config.to_dict()
    body.pop("source")
    for section, keys in (
        ("adapter", ("rank", "alpha", "layers", "u", "r", "sharing", "dropout")),
        (
            "loss",
            (
                "chunk_size",
                "beta",
                "gamma",
                "desirable_weight",
                "undesirable_weight",
                "dpo_variant",
                "label_smoothing",
            ),
        ),
        ("data", ("eval", "mask")),
        ("output", ("eval_every",)),
    ):
        for key in keys:
            if body[section][key] is None:
                del body[section][key]
    if config.adapter.method == "full":
        del body["adapter"]["targets"]
    for key in ("stream", "budget", "tokenizer", "distributed"):
        if body[key] is None:
            del body[key]
    return body


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
    if not body["adapter"].get("dropout"):
        # dropout off is the behaviour of every config written before the key existed
        body["adapter"].pop("dropout", None)
    body["data"] = {k: v for k, v in body["data"].items() if k not in ("train", "eval")}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def parse_size(value: int | str) -> int:
    """Bytes in ``value``: an integer, or a string such as ``4GiB``, ``512MiB``, ``2.5GB``."""
    if isinstance(value, int):
        return value
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", value)
    if match is None or match.group(2) not in _UNITS:
        units = ", ".join(u for u in _UNITS if u)
        raise ValueError(f"{value!r} is not a size such as 4GiB (units: {units}, or bytes)")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def _resolve(reference: str | None, base: Path) -> str | None:
    if reference is None or reference.startswith("pkg:"):
        return reference
    return str(base / reference)


def resolve_reference(reference: str, field: str, source: str) -> Path:
    """A path, or ``pkg:<module>/<file>`` resolved inside an installed package (not imported)."""
    if not reference.startswith("pkg:"):
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


def tokenizer_path(config: TrainConfig) -> Path:
    """The GGUF the tokenizer is read from: ``tokenizer`` if set, else the model file."""
    if config.tokenizer is None:
        return model_path(config)
    return resolve_reference(config.tokenizer, "tokenizer", config.source)


def _fail(source: Path, field: str, message: str) -> ConfigError:
    return ConfigError(f"{source}: {field}: {message}")


def _only_for(
    section: dict[str, Any],
    keys: tuple[str, ...],
    allowed: bool,
    why: str,
    *,
    at: str,
    source: Path,
) -> None:
    for key in keys:
        if key in section and not allowed:
            raise _fail(source, f"{at}.{key}", f"does not apply {why}")


def _adapter(raw: dict[str, Any], storage: str, source: Path) -> AdapterConfig:
    method = raw.get("method", "lora")
    lora, tiny = method in LORA_FAMILY, method == "tinylora"
    where = {"at": "adapter", "source": source}
    _only_for(raw, ("rank", "alpha", "dropout"), lora, f"to method {method} (lora family only)",
              **where)  # fmt: skip
    _only_for(raw, ("u", "r", "sharing"), tiny, f"to method {method} (tinylora only)", **where)
    _only_for(raw, ("targets", "layers"), method != "full", "to method full (every weight "
              "trains)", **where)  # fmt: skip
    if method == "full" and storage != "float32":
        raise _fail(
            source,
            "adapter.method",
            f"full trains every weight and needs storage float32, not {storage} "
            "(frozen bf16/4-bit storage has no gradient); use float32 or an adapter",
        )
    layers = raw.get("layers")
    own = {k: raw[k] for k in ("rank", "alpha", "dropout", "u", "r", "sharing") if k in raw}
    options = build_options(method, own, where=f"{source}: adapter") if lora or tiny else None
    lora_opts = options if isinstance(options, LoRAOptions) else None
    tiny_opts = options if isinstance(options, TinyLoRAOptions) else None
    return AdapterConfig(
        method=method,
        rank=None if lora_opts is None else int(lora_opts.rank),
        alpha=None if lora_opts is None else float(lora_opts.alpha),
        targets=tuple(raw.get("targets", DEFAULT_TARGETS)),
        layers=None if layers is None else tuple(int(i) for i in layers),
        u=None if tiny_opts is None else int(tiny_opts.u),
        r=None if tiny_opts is None else int(tiny_opts.r),
        sharing=None if tiny_opts is None else tiny_opts.sharing,
        dropout=None if lora_opts is None else float(lora_opts.dropout),
    )


def _loss(raw: dict[str, Any], source: Path) -> LossConfig:
    kind = raw.get("type", "ce")
    where = {"at": "loss", "source": source}
    _only_for(raw, ("chunk_size",), kind == "chunked_ce", f"to loss {kind}", **where)
    _only_for(raw, ("beta",), kind in _BETA_DEFAULT, f"to loss {kind}", **where)
    _only_for(raw, ("gamma",), kind == "simpo", f"to loss {kind} (simpo only)", **where)
    weights = ("desirable_weight", "undesirable_weight")
    _only_for(raw, weights, kind == "kto", f"to loss {kind} (kto only)", **where)
    is_kto = kind == "kto"
    robust = kind == "dpo" and raw.get("dpo_variant") == "robust"
    _only_for(raw, ("dpo_variant",), kind == "dpo", f"to loss {kind} (dpo only)", **where)
    _only_for(raw, ("label_smoothing",), robust, "unless loss dpo with dpo_variant robust", **where)
    return LossConfig(
        type=kind,
        chunk_size=int(raw.get("chunk_size", 1024)) if kind == "chunked_ce" else None,
        beta=float(raw.get("beta", _BETA_DEFAULT[kind])) if kind in _BETA_DEFAULT else None,
        gamma=float(raw.get("gamma", 0.5)) if kind == "simpo" else None,
        desirable_weight=float(raw.get("desirable_weight", 1.0)) if is_kto else None,
        undesirable_weight=float(raw.get("undesirable_weight", 1.0)) if is_kto else None,
        dpo_variant=raw.get("dpo_variant", "sigmoid") if kind == "dpo" else None,
        label_smoothing=float(raw.get("label_smoothing", 0.1)) if robust else None,
    )


def _data(raw: dict[str, Any], loss: str, base: Path, source: Path) -> DataConfig:
    fmt, mask = raw.get("format", "auto"), raw.get("mask")
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
    evaluation = raw.get("eval")
    return DataConfig(
        train=str(base / raw["train"]),
        eval=None if evaluation is None else str(base / evaluation),
        format=fmt,
        mask=mask,
        seq_len=int(raw.get("seq_len", 512)),
        truncate=bool(raw.get("truncate", False)),
    )


def _optim(raw: dict[str, Any], steps: int, source: Path) -> OptimConfig:
    warmup = int(raw.get("warmup_steps", 0))
    if warmup > steps:
        raise _fail(source, "optim.warmup_steps", f"{warmup} exceeds steps ({steps})")
    clip = raw.get("grad_clip", 1.0)
    b1, b2 = raw.get("betas", (0.9, 0.999))
    return OptimConfig(
        lr=float(raw.get("lr", 2e-4)),
        weight_decay=float(raw.get("weight_decay", 0.0)),
        betas=(float(b1), float(b2)),
        eps=float(raw.get("eps", 1e-8)),
        grad_clip=None if clip is None else float(clip),
        schedule=raw.get("schedule", "constant"),
        warmup_steps=warmup,
    )


def _budget(value: int | str | None, source: Path) -> int | None:
    if value is None:
        return None
    size = parse_size(value)
    if size <= 0:
        raise _fail(source, "budget", f"must be a positive size, got {value!r}")
    return size


def check_distributed(config: TrainConfig) -> None:
    """ConfigError for a ``distributed`` section that cannot work with the rest of the config.

    FSDP2 shards parameters: a bf16/NF4 base is held in buffers, which it leaves whole, and a
    streamed base lives in a host store outside the module, so both are refused rather than
    silently left unsharded.
    """
    dist = config.distributed
    if dist is None or dist.strategy != "fsdp":
        return
    source = Path(config.source)
    if config.stream is not None:
        raise _fail(
            source,
            "distributed.strategy",
            "fsdp cannot shard a streamed base (the stream store holds it outside the module); "
            "use strategy ddp with streaming (each rank streams its own base) or drop stream",
        )
    if config.storage != "float32":
        raise _fail(
            source,
            "distributed.strategy",
            f"fsdp shards parameters, and storage {config.storage} holds the frozen base in "
            "buffers that FSDP2 does not shard; use storage float32 or strategy ddp",
        )


def check_training_semantics(config: TrainConfig) -> None:
    """ConfigError for settings that cannot mean what they say together.

    ``output.eval_every`` needs held-out data. LoRA dropout in a streamed run that recomputes
    each layer in backward would draw a second, different mask for the recomputation, so the
    gradient would not be the forward's: such a run must keep activations instead.
    """
    source = Path(config.source)
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


def train_config_from_dict(data: dict[str, Any], source: str | os.PathLike[str]) -> TrainConfig:
    """Validate a parsed config mapping; ``source`` is the file it came from (paths, errors)."""
    path = Path(source)
    check_schema(data, path)
    base = path.resolve().parent
    steps, storage = int(data["steps"]), data.get("storage", "float32")
    adapter = _adapter(data.get("adapter", {}), storage, path)
    loss = _loss(data.get("loss", {}), path)
    model = data["model"]
    out = data.get("output", {})
    stream = data.get("stream")
    budget = data.get("budget")
    distributed = data.get("distributed")
    config = TrainConfig(
        model=_resolve(model, base),
        storage=storage,
        adapter=adapter,
        data=_data(data["data"], loss.type, base, path),
        loss=loss,
        optim=_optim(data.get("optim", {}), steps, path),
        batch=BatchConfig(**{k: int(v) for k, v in data.get("batch", {}).items()}),
        steps=steps,
        seed=int(data.get("seed", 0)),
        gradient_checkpointing=bool(data.get("gradient_checkpointing", False)),
        neftune_alpha=float(data.get("neftune_alpha", 0.0)),
        tokenizer=_resolve(data.get("tokenizer"), base),
        output=OutputConfig(
            dir=str(base / out.get("dir", f"runs/{path.stem}")),
            save_every=int(out.get("save_every", 100)),
            log_every=int(out.get("log_every", 10)),
            eval_every=None if out.get("eval_every") is None else int(out["eval_every"]),
        ),
        stream=None if stream is None else StreamConfig(**stream),
        budget=_budget(budget, path),
        distributed=None if distributed is None else DistributedConfig(**distributed),
        source=str(path),
    )
    check_distributed(config)
    check_training_semantics(config)
    return config


def load_train_config(path: str | os.PathLike[str]) -> TrainConfig:
    """Read, validate and default-fill the YAML train config at ``path``.

    Raises ConfigError (one line: file, dotted field, what was expected) for unreadable YAML,
    duplicate or unknown keys (with the nearest valid key), wrong types, out-of-range values
    and impossible combinations. Files named in the config are not opened here.
    """
    return train_config_from_dict(read_yaml(Path(path)), path)
