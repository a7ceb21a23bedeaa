"""Layer streaming: the frozen base of every decoder layer lives in a host store, and only the
pool's few slots are on the compute device.

With ``recompute=True`` (the default) the forward keeps only the layer-boundary activations.
The backward walks the layers in reverse, fetches each one again and recomputes it from its
saved input, so every tensor the recomputed graph saves (dense weights, NF4 bytes) is a view of
the slot it is using right now: nothing outlives its slot. With ``recompute=False`` the forward
keeps every activation, as a resident run does, and the backward only fetches the weights
again (see ``refetch.py``). Either way the arithmetic is the resident model's, op for op, so
logits and gradients are bitwise equal to a resident run with the same storage.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import cast

import torch
from torch import nn
from torch.func import functional_call

from assay.errors import ConfigError
from assay.model.decoder import Decoder
from assay.model.tensors import get_tensor, set_tensor
from assay.stream.layout import LayerLayout, base_tensors
from assay.stream.pool import SlotPool
from assay.stream.refetch import KeptActivations
from assay.stream.store import ContentHash, DiskStore, RamStore

TIERS = ("ram", "disk")


def default_cache_dir() -> Path:
    root = os.environ.get("ASSAY_CACHE") or Path.home() / ".cache" / "assay"
    return Path(root) / "stream"


class _StreamedLayers(torch.autograd.Function):
    """All decoder layers as one autograd node: forward streams, backward re-streams."""

    @staticmethod
    def forward(ctx, engine: StreamedModel, context: tuple, x: torch.Tensor, *trainables):
        boundaries = []
        with torch.no_grad():
            for i in range(engine.num_layers):
                boundaries.append(x)
                following = i + 1 if i + 1 < engine.num_layers else None
                with engine.pool.use(i, following) as base:
                    x = engine.run_layer(i, base, x, context)
        ctx.engine, ctx.context, ctx.boundaries = engine, context, boundaries
        # the recomputation in backward runs under the forward's autocast (bf16 precision)
        kind = engine.device.type
        ctx.autocast = (torch.is_autocast_enabled(kind), torch.get_autocast_dtype(kind))
        return x

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        engine = ctx.engine
        adapters = [p for uses in engine.resident_uses for _, p in uses]
        totals = GradientTotals(engine.trainables, adapters)
        for i in reversed(range(engine.num_layers)):
            x_in = ctx.boundaries[i].detach().requires_grad_(True)
            ctx.boundaries[i] = None
            following = i - 1 if i > 0 else None
            enabled, dtype = ctx.autocast
            autocast = torch.autocast(engine.device.type, dtype=dtype, enabled=enabled)
            with torch.enable_grad(), engine.pool.use(i, following) as tensors:
                trained = engine.trainable_base_names[i]
                for name in trained:
                    tensors[name] = tensors[name].detach().requires_grad_(True)
                # One leaf per use of a resident trainable, so contributions to a shared
                # parameter can be summed one by one, in the order resident autograd sums them.
                uses = engine.resident_uses[i]
                for name, param in uses:
                    tensors[name] = param.detach().requires_grad_(True)
                # The recomputed forward runs under the forward's autocast and its backward
                # outside it, as resident autograd runs them: a custom Function's backward (the
                # NF4 linear's) would otherwise take autocast's dtypes.
                with autocast:
                    out = engine.run_layer(i, tensors, x_in, ctx.context)
                names = [*trained, *(name for name, _ in uses)]
                grads = torch.autograd.grad(
                    out, [x_in, *(tensors[n] for n in names)], grad, allow_unused=True
                )
            grad = grads[0]
            owners = [*(engine.base_params[i][n] for n in trained), *(p for _, p in uses)]
            contributions = list(zip(owners, grads[1:], strict=True))
            for param, g in reversed(contributions):
                if g is None:
                    continue
                totals.add(param, g)
        return (None, None, grad, *totals.gradients())


class GradientTotals:
    """Each trainable's gradient summed over the layers' backward calls. The resident
    trainables' (adapters') totals live in one block allocated before the first layer's backward.

    Why one block: kept one by one, each adapter gradient is allocated amid its layer's
    recomputed transients and outlives them, which splits the host heap's free space (glibc) so
    that later layers' transients no longer fit in it: the resident set then grows with depth
    though the tensors do not. Streamed base weights that train (method full) keep one tensor
    each, allocated by their layer: a block would hold every layer's gradient from the first
    backward on. Guarantees: ``gradients()`` gives, per trainable in order, the sum of its
    contributions in the order added (the first as it came, then ``+``) on the trainable's
    device, or None for one that got none.
    """

    def __init__(self, trainables: list[torch.Tensor], blocked: list[torch.Tensor]) -> None:
        self.trainables = trainables
        self.totals: dict[int, torch.Tensor] = {}
        self.views: dict[int, torch.Tensor] = {}
        groups: dict[tuple[torch.device, torch.dtype], dict[int, torch.Tensor]] = {}
        for p in blocked:
            groups.setdefault((p.device, p.dtype), {})[id(p)] = p
        for (device, dtype), params in groups.items():
            block = torch.empty(sum(p.numel() for p in params.values()), dtype=dtype, device=device)
            start = 0
            for key, p in params.items():
                self.views[key] = block[start : start + p.numel()].view(p.shape)
                start += p.numel()

    def add(self, param: torch.Tensor, g: torch.Tensor) -> None:
        key = id(param)
        g = g.to(param.device)  # full fine-tuning: host weights get host gradients
        total = self.totals.get(key)
        if total is None:
            self.totals[key] = self.views[key].copy_(g) if key in self.views else g
        elif key in self.views:
            total.add_(g)
        else:
            self.totals[key] = total + g

    def gradients(self) -> list[torch.Tensor | None]:
        return [self.totals.get(id(p)) for p in self.trainables]


class StreamedModel(nn.Module):
    """A Decoder whose layers stream from a host store through ``buffers`` device slots.

    Embeddings, the final norm, the head and every adapter tensor stay resident on ``device``.
    ``forward``/``hidden_states`` match ``Decoder``'s; gradients reach every trainable tensor,
    including base weights that train (method ``full``, RAM tier only). ``store``: a disk
    store already written by ``assay.stream.offload.load_into_disk_tier``, whose model holds
    meta placeholders for every layer's base. ``recompute=False``
    keeps activations instead of recomputing each layer in backward: faster by one forward,
    resident activation memory, frozen bases only.
    """

    store: RamStore | DiskStore

    def __init__(
        self,
        model: Decoder,
        *,
        tier: str = "ram",
        buffers: int = 2,
        device: str | torch.device = "cpu",
        cache_dir: str | os.PathLike[str] | None = None,
        recompute: bool = True,
        store: DiskStore | None = None,
    ) -> None:
        super().__init__()
        if tier not in TIERS:
            raise ConfigError(f"stream.tier must be one of {', '.join(TIERS)}, got {tier!r}")
        if store is not None and tier != "disk":
            raise ConfigError("a prebuilt store is a disk store: pass tier='disk'")
        self.model = model
        self.config = model.config
        self.device = torch.device(device)
        self.num_layers = len(model.layers)
        layers = [base_tensors(layer) for layer in model.layers]
        self.layouts = [LayerLayout.of(tensors) for tensors in layers]
        self.trainable_base_names = [
            [name for name, t in tensors.items() if t.requires_grad] for tensors in layers
        ]
        self.base_trains = any(self.trainable_base_names)
        if tier == "disk" and self.base_trains:
            raise ConfigError("method full streams from the RAM tier only (stream.tier: ram)")
        if not recompute and self.base_trains:
            raise ConfigError("stream.recompute: false needs a frozen base; method full recomputes")
        self.recompute = recompute
        if store is not None:
            if store.layouts != self.layouts:
                raise ConfigError("the disk store was written for other layers than this model's")
            self.store = store
        elif tier == "ram":
            self.store = RamStore(self.layouts, layers, pin=self.device.type == "cuda")
        else:
            key = _content_key(layers)
            self.store = DiskStore(
                Path(cache_dir or default_cache_dir()), key, self.layouts, layers
            )
        self._rebind_host_tensors(layers, tier)
        del layers
        self.base_params = [
            {n: get_tensor(layer, n) for n in names}
            for layer, names in zip(model.layers, self.trainable_base_names, strict=True)
        ]
        self._move_resident_parts()
        self.pool = SlotPool(self.store, self.layouts, buffers, self.device)
        self.kept = KeptActivations(self.pool)
        self.resident_uses = [
            [
                (n, p)
                for n, p in layer.named_parameters(remove_duplicate=False)
                if p.requires_grad and n not in names
            ]
            for layer, names in zip(model.layers, self.base_params, strict=True)
        ]
        seen: dict[int, torch.Tensor] = {}
        for group in [*self.resident_uses, *(d.items() for d in self.base_params)]:
            for _, p in group:
                seen.setdefault(id(p), p)
        self.trainables = list(seen.values())

    def _rebind_host_tensors(self, layers: list[dict[str, torch.Tensor]], tier: str) -> None:
        """Point the model's base tensors at the host store so no second copy stays alive."""
        for i, (layer, tensors) in enumerate(zip(self.model.layers, layers, strict=True)):
            # the RAM tier's store is a RamStore
            views = (
                self.store.layouts[i].views(cast(RamStore, self.store).block(i))
                if tier == "ram"
                else None
            )
            for name, tensor in tensors.items():
                if views is not None:
                    replacement = views[name].requires_grad_(tensor.requires_grad)
                else:
                    replacement = torch.empty(tensor.shape, dtype=tensor.dtype, device="meta")
                set_tensor(layer, name, replacement)

    def _move_resident_parts(self) -> None:
        if self.device.type == "cpu":
            return
        for name, child in self.model.named_children():
            if name != "layers":
                child.to(self.device)
        for layer, layout in zip(self.model.layers, self.layouts, strict=True):
            streamed = {e.name for e in layout.entries}
            for name, tensor in [*layer.named_parameters(), *layer.named_buffers()]:
                if name not in streamed:
                    set_tensor(
                        layer,
                        name,
                        tensor.detach().to(self.device).requires_grad_(tensor.requires_grad),
                    )

    def run_layer(
        self, index: int, base: dict[str, torch.Tensor], x: torch.Tensor, context: tuple
    ) -> torch.Tensor:
        """Layer ``index`` applied to ``x`` with its base tensors taken from ``base``.

        ``context`` is (rope tables, attention mask), fixed per batch.
        """
        rope, mask = context
        return functional_call(
            self.model.layers[index], base, (x, rope, mask), strict=False, tie_weights=False
        )

    def hidden_states(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Final-normed hidden states, streamed; differentiable w.r.t. every trainable."""
        x, rope, mask = self.model.prepare(
            input_ids.to(self.device),
            None if attention_mask is None else attention_mask.to(self.device),
            None if position_ids is None else position_ids.to(self.device),
        )
        self.kept.release()  # the previous backward's last slot
        if self.base_trains:
            # The optimizer writes trainable base weights into the store between steps: a slot
            # still holding a layer copied before would run its old weights.
            self.pool.forget()
        if not self.recompute and torch.is_grad_enabled():
            return self.model.head_input(self._layers_keeping_activations(x, (rope, mask)))
        # Adapter switches (enable/disable) must not change between this call and backward:
        # the backward recomputes every layer with the adapters as they are then.
        x = _StreamedLayers.apply(self, (rope, mask), x, *self.trainables)
        return self.model.head_input(x)

    def _layers_keeping_activations(self, x: torch.Tensor, context: tuple) -> torch.Tensor:
        for i in range(self.num_layers):
            following = i + 1 if i + 1 < self.num_layers else None
            with self.pool.use(i, following) as base, self.kept.saving(i, base):
                x = self.run_layer(i, base, x, context)
        return x

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        hidden = self.hidden_states(input_ids, attention_mask, position_ids)
        return self.model.lm_head(hidden).float()

    @property
    def lm_head(self) -> nn.Module:
        return self.model.lm_head

    @property
    def layers(self) -> nn.ModuleList:
        return self.model.layers

    def describe(self) -> dict[str, object]:
        """Store, slots and device bytes, for receipts and `assay train` summaries."""
        return {
            **self.store.describe(),
            "buffers": len(self.pool.slots),
            "recompute": self.recompute,
            "slot_bytes": self.pool.slot_bytes,
            "device_base_bytes": self.pool.device_bytes,
            "largest_layer_bytes": max(layout.nbytes for layout in self.layouts),
            "fetches": self.pool.fetches,
        }


def _content_key(layers: list[dict[str, torch.Tensor]]) -> str:
    """The disk cache key of these layers' bytes (see ``ContentHash``)."""
    content = ContentHash()
    for tensors in layers:
        content.add(tensors)
    return content.hexdigest()
