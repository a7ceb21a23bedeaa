"""Turn a TrainConfig into the live objects of a run: model, tokenizer, data, optimizer."""

from __future__ import annotations

import dataclasses
import math
import os
import random
import shutil
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from assay.adapters import attach
from assay.adapters.attachment import layerwise_attach
from assay.errors import ConfigError
from assay.model.tokenizer import Tokenizer, load_tokenizer
from assay.settings import StreamConfig, TrainConfig
from assay.settings.loader import base_model, model_path, tokenizer_path
from assay.settings.methods import method as registered
from assay.storage.load import load
from assay.train.data.dataset import Dataset, load_dataset

if TYPE_CHECKING:
    from assay.model.decoder import Decoder
    from assay.stream import StreamedModel


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (CPU and CUDA) from one integer."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def build_model(
    config: TrainConfig, device: str | torch.device = "cpu"
) -> tuple[Decoder | StreamedModel, Decoder]:
    """(the module to run, the underlying Decoder): loaded, adapted and maybe streamed.

    The same config and seed give bitwise the same initial trainables.
    """
    adapter = config.adapter
    kwargs: dict = {}
    if not registered(adapter.method).trains_base:
        kwargs = {"targets": list(adapter.targets), "layers": adapter.layers, **adapter.options()}
    runner, base = build_runner(
        model_path(config),
        storage=config.storage,
        method=adapter.method,
        seed=config.seed,
        adapter_options=kwargs,
        gradient_checkpointing=config.gradient_checkpointing,
        stream=config.stream,
        device=device,
        compile_layers=config.compile,
    )
    base.assay_base_model = base_model(config)
    return runner, base


def build_resident_model(
    config: TrainConfig, device: str | torch.device = "cpu"
) -> tuple[Decoder | StreamedModel, Decoder]:
    """``build_model`` with the base held resident whatever the config's ``stream`` says: for
    work that reads every base weight outside the stream engine (a merged export, generation
    with a KV cache), which a streamed base keeps off its modules. Streamed training is bitwise
    resident training, so the trainables restored onto it compute the same model."""
    return build_model(dataclasses.replace(config, stream=None), device)


def build_runner(
    path: str | Path,
    *,
    storage: str,
    method: str,
    seed: int,
    adapter_options: dict,
    gradient_checkpointing: bool = False,
    stream: StreamConfig | None = None,
    device: str | torch.device = "cpu",
    compile_layers: bool = False,
) -> tuple[Decoder | StreamedModel, Decoder]:
    """``build_model`` from its parts: the model file, its storage, the adapter method with
    its options (``attach``'s keywords) and seed, and the stream settings. ``compile_layers``
    compiles each decoder layer of a resident run (``torch.compile``, dynamic shapes, so rows
    of any length share one graph and a resumed run compiles the graph an unbroken one ran).

    A disk-tier run never holds the whole base: each layer goes to its shard as soon as it is
    decoded, packed and adapted (``assay.stream.offload``), so a model larger than memory loads.
    """
    per_layer = stream is not None and stream.tier == "disk" and not registered(method).trains_base
    if per_layer:
        from assay.model.loader import open_source
        from assay.stream.offload import load_into_disk_tier

        model = open_source(path).config
        adapt = layerwise_attach(
            model.num_layers,
            method,
            seed=seed,
            fused=model.fused_projections,
            **adapter_options,
        )
        base, store, _ = load_into_disk_tier(path, storage=storage, adapt=adapt)
        adapt.finish(base)
    else:
        base, store = load(path, storage=storage), None
        attach(base, method, seed=seed, **adapter_options)
    base.gradient_checkpointing = gradient_checkpointing
    if stream is None:
        base = base.to(device)
        if compile_layers:
            compile_decoder_layers(base, torch.device(device))
        return base, base
    if compile_layers:
        raise ConfigError("compile: a streamed run runs its layers eager; drop stream or compile")
    from assay.stream import StreamedModel

    runner = StreamedModel(
        base,
        tier=stream.tier,
        buffers=stream.buffers,
        device=device,
        recompute=stream.recompute,
        store=store,
    )
    return runner, base


def compile_decoder_layers(model: Decoder, device: torch.device) -> None:
    """``torch.compile`` every decoder layer in place (names, parameters and state dict
    unchanged). ConfigError up front when the CPU backend has no working C++ compiler to build
    with, rather than a compiler traceback at the first step."""
    if device.type == "cpu" and _working_compiler() is None:
        chosen = os.environ.get("CXX")
        tried = f"$CXX={chosen!r}" if chosen is not None else f"{', '.join(CXX_NAMES)} on PATH"
        raise ConfigError(
            f"compile: torch.compile on CPU builds C++ kernels and found no working compiler "
            f"(tried {tried}); install one, fix CXX or set compile: false"
        )
    for layer in model.layers:
        layer.compile(dynamic=True)


CXX_NAMES = ("g++", "clang++", "c++")


def _working_compiler() -> str | None:
    """The compiler torch's inductor would call ($CXX when set, even empty; else the first of
    ``CXX_NAMES`` found), if it answers ``--version``."""
    chosen = os.environ.get("CXX")
    for name in [chosen] if chosen is not None else CXX_NAMES:
        path = shutil.which(name) if name else None
        if path is None:
            continue
        try:
            answered = subprocess.run([path, "--version"], capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            continue
        if answered.returncode == 0:
            return path
    return None


def build_tokenizer(config: TrainConfig) -> Tokenizer:
    return load_tokenizer(tokenizer_path(config))


def build_datasets(config: TrainConfig, tokenizer: Tokenizer) -> tuple[Dataset, Dataset | None]:
    data = config.data

    def read(path: str) -> Dataset:
        return load_dataset(
            path,
            tokenizer,
            format=data.format,
            mask=data.mask,
            seq_len=data.seq_len,
            truncate=data.truncate,
        )

    return read(data.train), (read(data.eval) if data.eval else None)


def trainable_parameters(model: nn.Module) -> dict[str, nn.Parameter]:
    """Name -> parameter for everything that trains; a shared parameter appears once."""
    return {name: p for name, p in model.named_parameters() if p.requires_grad}


def decay_groups(params: dict[str, nn.Parameter]) -> tuple[list[str], list[str]]:
    """(names that weight decay applies to, names it does not), each in ``params`` order.

    Decay applies to tensors of 2 or more dimensions (weight matrices, embeddings, LoRA A and
    B); vectors (norm weights, biases, DoRA magnitudes, TinyLoRA's v) are never pulled to zero,
    as nanoGPT and torchtune do.
    """
    decay = [name for name, p in params.items() if p.dim() >= 2]
    return decay, [name for name, p in params.items() if p.dim() < 2]


def build_optimizer(config: TrainConfig, params: dict[str, nn.Parameter]) -> torch.optim.AdamW:
    """AdamW over ``params``: one group with the config's weight decay for matrices, one with
    none for vectors (``decay_groups``); an empty group is left out. An adapter parameter that
    the method trains at a multiple of ``optim.lr`` (LoRA+'s B: ``adapter.lr_ratio``) is in a
    group of its own rate, after the others."""
    optim, scales = config.optim, learning_rate_scales(config, params)
    decay, plain = decay_groups(params)
    groups = []
    for scale in sorted({1.0, *scales.values()}):
        for names, wd in ((decay, optim.weight_decay), (plain, 0.0)):
            chosen = [n for n in names if scales.get(n, 1.0) == scale]
            if chosen:
                group = {"params": [params[n] for n in chosen], "weight_decay": wd}
                groups.append(group if scale == 1.0 else {**group, "lr": optim.lr * scale})
    return torch.optim.AdamW(groups, lr=optim.lr, betas=optim.betas, eps=optim.eps)


def learning_rate_scales(config: TrainConfig, names: Iterable[str]) -> dict[str, float]:
    """Parameter name -> multiple of ``optim.lr``, for each of ``names`` whose adapter
    parameter the config's method trains at another rate (its entry's
    ``factor_learning_rates``, valued from the config's options)."""
    adapter = config.adapter
    by_leaf = registered(adapter.method).learning_rate_scales(adapter.options())
    return {n: by_leaf[n.rpartition(".")[2]] for n in names if n.rpartition(".")[2] in by_leaf}


def lr_factor(config: TrainConfig) -> Callable[[int], float]:
    """Multiplier of the base learning rate at scheduler step ``s`` (0-based)."""
    warmup, total = config.optim.warmup_steps, config.steps
    cosine = config.optim.schedule == "cosine"

    def factor(s: int) -> float:
        if warmup and s < warmup:
            return (s + 1) / warmup
        if not cosine:
            return 1.0
        progress = (s - warmup) / max(1, total - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))

    return factor


class NEFTune:
    """Uniform noise of scale alpha / sqrt(T * d) on the input embeddings while enabled."""

    def __init__(self, embedding: nn.Module, alpha: float) -> None:
        self.alpha, self.enabled = alpha, True
        self.handle = embedding.register_forward_hook(self._hook) if alpha > 0 else None

    def _hook(self, module: nn.Module, args, output: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return output
        scale = self.alpha / math.sqrt(output.shape[-2] * output.shape[-1])
        return output + torch.empty_like(output).uniform_(-scale, scale)
