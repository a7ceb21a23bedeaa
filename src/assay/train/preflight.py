"""Checks of a train config against the model's header, before any weight is decoded.

``load_train_config`` cannot see the model; these checks can, and they read only the GGUF
header or the safetensors ``config.json`` and headers, so a config that names a layer the
model lacks, or a sequence longer than its context, is refused in well under a second,
naming the config file, the field and the valid range.
"""

from __future__ import annotations

from pathlib import Path

from assay.adapters.inject import target_names
from assay.errors import ConfigError
from assay.model.config import ModelConfig
from assay.settings import TrainConfig
from assay.settings.loader import model_path, tokenizer_path
from assay.settings.methods import method as registered


def model_config(config: TrainConfig) -> ModelConfig:
    """The model's config from its header (ModelFileError names the model file if broken)."""
    from assay.model.loader import open_source

    return open_source(model_path(config)).config


def check_against_model(config: TrainConfig, model: ModelConfig | None = None) -> None:
    """ConfigError (config file, field, valid range) for settings the model cannot honour:

    - ``adapter.layers`` entries outside 0..num_layers-1;
    - ``stream.buffers`` beyond the number of layers;
    - ``data.seq_len`` beyond the model's context length (``max_position_embeddings``);
      positions past it were never trained and RoPE scaling does not cover them;
    - ``adapter.targets`` that the model's layout cannot wrap (a part of a fused projection
      alone, or a fused projection's name in a model that holds its parts apart);
    - TinyLoRA's ``adapter.r`` beyond a target's rank bound (the smaller of its weight's two
      dimensions: the SVD it keeps r singular directions of has no more).
    """
    model = model if model is not None else model_config(config)
    source = Path(config.source)
    targets: tuple[str, ...] = ()
    if not registered(config.adapter.method).trains_base:  # full fine-tuning has no targets
        try:
            targets = target_names(config.adapter.targets, model.fused_projections)
        except ConfigError as error:
            raise ConfigError(f"{source}: adapter.{error}") from None
    layers = config.adapter.layers
    if layers is not None:
        outside = [i for i in layers if not 0 <= i < model.num_layers]
        if outside:
            raise ConfigError(
                f"{source}: adapter.layers: {outside[0]} is not a layer of the model "
                f"(valid 0..{model.num_layers - 1}, it has {model.num_layers} layers)"
            )
    stream = config.stream
    if stream is not None and stream.buffers is not None and stream.buffers > model.num_layers:
        raise ConfigError(
            f"{source}: stream.buffers: {stream.buffers} exceeds the model's {model.num_layers} "
            f"layers (valid 2..{model.num_layers}; more buffers than layers is the resident run)"
        )
    _check_tinylora_rank(config, model, targets, source)
    context = model.max_position_embeddings
    if config.data.seq_len > context:
        raise ConfigError(
            f"{source}: data.seq_len: {config.data.seq_len} exceeds the model's context length "
            f"{context} (valid 2..{context})"
        )


def _check_tinylora_rank(
    config: TrainConfig, model: ModelConfig, targets: tuple[str, ...], source: Path
) -> None:
    adapter = config.adapter
    if adapter.r is None:  # TinyLoRA's alone: the settings leave it None for other methods
        return
    bounds = {
        name.rsplit(".", 2)[-2]: min(shape)
        for name, shape in model.expected_shapes().items()
        if name.startswith("layers.0.") and name.endswith("_proj.weight")
    }
    tightest = min(((bounds[t], t) for t in targets if t in bounds), default=None)
    if tightest is not None and adapter.r > tightest[0]:
        bound, target = tightest
        raise ConfigError(
            f"{source}: adapter.r: {adapter.r} exceeds the rank bound of {target} (the smaller "
            f"of its weight's dimensions; valid 1..{bound})"
        )


def check_tokenizer(config: TrainConfig, model: ModelConfig | None = None) -> None:
    """Load the run's tokenizer and check that it fits the model's vocabulary, from the headers
    alone: ModelFileError naming the tokenizer's file for one that cannot be read (a folder
    without tokenizer.json, a GGUF without tokenizer metadata) or that has ids the model lacks.
    """
    from assay.model.tokenizer import check_fits, load_tokenizer

    model = model if model is not None else model_config(config)
    tokenizer = load_tokenizer(tokenizer_path(config))
    check_fits(tokenizer, model.vocab_size, str(model_path(config)))


def check_rows(config: TrainConfig) -> None:
    """Parse the train (and eval) rows, so malformed JSONL, lone surrogates and unknown roles
    are refused (DataError naming file:line) before the model loads. Tokenizing, and the
    length checks that need it, happen later in ``build_datasets``."""
    from assay.train.data.rows import read_rows

    for path in (config.data.train, config.data.eval):
        if path is not None:
            read_rows(path, config.data.format)
