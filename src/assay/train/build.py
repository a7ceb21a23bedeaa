"""Turn a TrainConfig into the live objects of a run: model, tokenizer, data, optimizer."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn

from assay.adapters import attach
from assay.adapters.attachment import layerwise_attach
from assay.adapters.registry import method as registered
from assay.model.tokenizer import Tokenizer, load_tokenizer
from assay.settings import StreamConfig, TrainConfig
from assay.settings.loader import model_path, tokenizer_path
from assay.storage.load import load
from assay.train.data import Dataset, load_dataset


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (CPU and CUDA) from one integer."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def build_model(
    config: TrainConfig, device: str | torch.device = "cpu"
) -> tuple[nn.Module, nn.Module]:
    """(the module to run, the underlying Decoder): loaded, adapted and maybe streamed.

    The same config and seed give bitwise the same initial trainables.
    """
    adapter = config.adapter
    kwargs: dict = {}
    if not registered(adapter.method).trains_base:
        kwargs = {"targets": list(adapter.targets), "layers": adapter.layers, **adapter.options()}
    return build_runner(
        model_path(config),
        storage=config.storage,
        method=adapter.method,
        seed=config.seed,
        adapter_options=kwargs,
        gradient_checkpointing=config.gradient_checkpointing,
        stream=config.stream,
        device=device,
    )


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
) -> tuple[nn.Module, nn.Module]:
    """``build_model`` from its parts: the model file, its storage, the adapter method with
    its options (``attach``'s keywords) and seed, and the stream settings.

    A disk-tier run never holds the whole base: each layer goes to its shard as soon as it is
    decoded, packed and adapted (``assay.stream.offload``), so a model larger than memory loads.
    """
    per_layer = stream is not None and stream.tier == "disk" and not registered(method).trains_base
    if per_layer:
        from assay.model.loader import open_source
        from assay.stream.offload import load_into_disk_tier

        layers = open_source(path).config.num_layers
        adapt = layerwise_attach(layers, method, seed=seed, **adapter_options)
        base, store, _ = load_into_disk_tier(path, storage=storage, adapt=adapt)
        adapt.finish(base)
    else:
        base, store = load(path, storage=storage), None
        attach(base, method, seed=seed, **adapter_options)
    base.gradient_checkpointing = gradient_checkpointing
    if stream is None:
        return base.to(device), base
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


def build_optimizer(
    config: TrainConfig,
    params: dict[str, nn.Parameter],
    lr_scales: dict[str, float] | None = None,
) -> torch.optim.AdamW:
    """AdamW over ``params``: one group with the config's weight decay for matrices, one with
    none for vectors (``decay_groups``); an empty group is left out. A parameter that
    ``lr_scales`` names trains at that multiple of ``optim.lr``, in a group of its own scale
    after the others (LoRA+'s B)."""
    optim, scales = config.optim, lr_scales or {}
    decay, plain = decay_groups(params)
    groups = []
    for scale in sorted({1.0, *scales.values()}):
        for names, wd in ((decay, optim.weight_decay), (plain, 0.0)):
            chosen = [n for n in names if scales.get(n, 1.0) == scale]
            if chosen:
                group = {"params": [params[n] for n in chosen], "weight_decay": wd}
                groups.append(group if scale == 1.0 else {**group, "lr": optim.lr * scale})
    return torch.optim.AdamW(groups, lr=optim.lr, betas=optim.betas, eps=optim.eps)


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
