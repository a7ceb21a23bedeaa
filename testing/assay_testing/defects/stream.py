"""Defects in assay.stream: slot pool waits and reuse, kept-activation unpacking, the streamed
forward and backward, and the disk cache key."""

from __future__ import annotations

from assay_testing.defects import Defect
from assay_testing.patching import Edit

DEFECTS: tuple[Defect, ...] = (
    Defect(
        "stream.store.reuse_without_hashing",
        "the disk cache reuses a directory whose manifest names the key and whose shards parse, "
        "without hashing their bytes",
        (
            Edit(
                "assay.stream.store:DiskStore.__init__",
                "self.reused = layers is not None and intact and stored_key(self.directory, "
                "layouts) == key",
                "self.reused = layers is not None and intact",
            ),
        ),
    ),
    Defect(
        "stream.engine.grads_assigned_not_accumulated",
        "streamed backward assigns each trainable's gradient instead of letting autograd add it "
        "to the last micro-batch's (one micro-batch per step is unchanged)",
        (
            Edit(
                "assay.stream.engine:_StreamedLayers.backward",
                "return (None, None, grad, *totals.gradients())",
                "[setattr(p, 'grad', g) for p, g in zip(engine.trainables, totals.gradients()) "
                "if g is not None]; return (None, None, grad, *[None] * len(engine.trainables))",
            ),
        ),
    ),
    Defect(
        "stream.engine.recompute_without_autocast",
        "streamed backward recomputes each layer in float32 although the forward ran it under "
        "bf16 autocast (float32 runs are unchanged)",
        (
            Edit(
                "assay.stream.engine:_StreamedLayers.backward",
                "dtype=dtype, enabled=enabled)",
                "dtype=dtype, enabled=False)",
            ),
        ),
    ),
    Defect(
        "stream.engine.trained_base_slots_kept",
        "a slot that still holds a layer copied before the last optimizer step is used again, "
        "so a streamed full fine-tune runs some layers on their old weights",
        (
            Edit(
                "assay.stream.engine:StreamedModel.hidden_states",
                "if self.base_trains:",
                "if False:",
            ),
        ),
    ),
    Defect(
        "stream.engine.resident_grads_dropped",
        "streamed backward drops the gradients of resident trainables (adapters)",
        (
            Edit(
                "assay.stream.engine:_StreamedLayers.backward",
                "uses = engine.resident_uses[i]",
                "uses = []",
            ),
        ),
    ),
    Defect(
        "stream.engine.backward_stale_input",
        "backward recomputes a layer from the previous layer's input",
        (
            Edit(
                "assay.stream.engine:_StreamedLayers.backward",
                "x_in = ctx.boundaries[i].detach()",
                "x_in = ctx.boundaries[i - 1 if i > 0 else i].detach()",
            ),
        ),
    ),
    Defect(
        "stream.engine.prefetch_wrong_layer",
        "forward prefetches the layer after next instead of the next",
        (
            Edit(
                "assay.stream.engine:_StreamedLayers.forward",
                "following = i + 1 if i + 1 < engine.num_layers else None",
                "following = i + 2 if i + 2 < engine.num_layers else None",
            ),
            Edit(
                "assay.stream.engine:StreamedModel._layers_keeping_activations",
                "following = i + 1 if i + 1 < self.num_layers else None",
                "following = i + 2 if i + 2 < self.num_layers else None",
            ),
        ),
    ),
    Defect(
        "stream.store.cache_key_ignores_bytes",
        "disk cache key covers names, shapes and dtypes but not the bytes",
        (
            Edit(
                "assay.stream.store:ContentHash.add",
                "        raw = tensor.detach().contiguous().reshape(-1).view(torch.uint8)\n"
                "        self.digest.update(raw.numpy().tobytes())\n",
                "",
            ),
        ),
    ),
    Defect(
        "stream.refetch.unpack_wrong_layer",
        "kept-activation unpack resolves a reference against the neighbouring layer's slot",
        (
            Edit(
                "assay.stream.refetch:KeptActivations._unpack",
                "self._fetch(packed.layer)",
                "self._fetch(packed.layer - 1 if packed.layer > 0 else packed.layer)",
            ),
        ),
    ),
    Defect(
        "stream.pool.skip_wait",
        "use() reads a prefetched slot without waiting for its copy (the owner check sees only "
        "the request, as on CUDA where a slot is marked loaded when its copy is issued)",
        (
            # Skips only the wait for a copy an earlier call issued (the prefetch that "must
            # have landed by now"); one issued right here is waited for even then.
            Edit(
                "assay.stream.pool:SlotPool.use",
                "    slot = self.prefetch(layer)\n"
                "    self._wait(slot)\n"
                "    if slot.loaded != layer or slot.requested != layer:\n",
                "    skip = self._holder(layer) is not None\n"
                "    slot = self.prefetch(layer)\n"
                "    if not skip:\n"
                "        self._wait(slot)\n"
                "    if (slot.loaded != layer and not skip) or slot.requested != layer:\n",
            ),
        ),
    ),
    Defect(
        "stream.pool.reuse_busy_slot",
        "prefetch overwrites the most recently used slot even while a layer computes from it",
        (
            Edit(
                "assay.stream.pool:SlotPool._victim",
                "    free = [",
                "    return max(self.slots, key=lambda s: s.last_used)\n    free = [",
            ),
        ),
    ),
    Defect(
        "stream.pool.skip_release_wait",
        "the CUDA copy stream overwrites a slot without waiting for the compute that last read it",
        (
            Edit(
                "assay.stream.pool:SlotPool.prefetch",
                "            cast(torch.cuda.Stream, self.copy_stream).wait_event(\n"
                "                cast(torch.cuda.Event, slot.released)\n"
                "            )\n",
                "",
            ),
        ),
    ),
)
