"""Streamed equals resident bitwise, for every adapter method and storage, tier and buffer count."""

from __future__ import annotations

import pytest
import torch

import assay
from assay.adapters import attach
from assay.adapters.perturb import randomize_adapters
from assay.errors import ConfigError
from assay.stream import StreamedModel, StreamError

METHODS = [
    ("lora", {}),
    ("rslora", {}),
    ("lora_fa", {}),
    ("dora", {}),
    ("tinylora", {"sharing": "per_target"}),
    ("tinylora", {"sharing": "global"}),
    ("full", {}),
]


def _model(path, method, storage, options):
    model = assay.load(path, storage=storage)
    attach(model, method, rank=4, alpha=8, targets="all-linear", **options)
    return randomize_adapters(model, seed=3)


def _loss_and_grads(model, ids):
    logits = model(ids)
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, [p for _, p in params])
    named = zip(params, grads, strict=True)
    return logits.detach(), {n.removeprefix("model."): g for (n, _), g in named}


@pytest.mark.parametrize(("method", "options"), METHODS)
@pytest.mark.parametrize("storage", ["float32", "nf4_double_quant"])
@pytest.mark.parametrize("recompute", [True, False], ids=["recompute", "keep-activations"])
def test_streamed_matches_resident_bitwise(
    tiny_models, tmp_path, method, options, storage, recompute
):
    if method == "full" and storage != "float32":
        pytest.skip("full fine-tuning needs float32 storage")
    if method == "full" and not recompute:
        pytest.skip("method full always recomputes (see test_full_method_refuses_kept_mode)")
    path = tiny_models["qwen2"]["hf"]
    ids = torch.randint(0, 320, (2, 24), generator=torch.Generator().manual_seed(0))
    logits, grads = _loss_and_grads(_model(path, method, storage, options), ids)
    streamed = StreamedModel(
        _model(path, method, storage, options), tier="ram", buffers=2, recompute=recompute
    )
    s_logits, s_grads = _loss_and_grads(streamed, ids)
    assert torch.equal(logits, s_logits)
    assert grads.keys() == s_grads.keys() and grads
    mismatched = [n for n in grads if not torch.equal(grads[n], s_grads[n])]
    assert not mismatched
    assert any(g.abs().sum() > 0 for n, g in grads.items() if "lora_A" in n or method != "lora")


@pytest.mark.parametrize(("tier", "buffers"), [("ram", 3), ("disk", 2), ("disk", 3)])
def test_tier_and_buffer_count_do_not_change_numbers(tiny_models, tmp_path, tier, buffers):
    path = tiny_models["mistral"]["hf"]
    ids = torch.randint(0, 320, (1, 32), generator=torch.Generator().manual_seed(1))
    reference = StreamedModel(_model(path, "lora", "nf4", {}), tier="ram", buffers=2)
    logits, grads = _loss_and_grads(reference, ids)
    other = StreamedModel(
        _model(path, "lora", "nf4", {}), tier=tier, buffers=buffers, cache_dir=tmp_path
    )
    o_logits, o_grads = _loss_and_grads(other, ids)
    assert torch.equal(logits, o_logits)
    assert all(torch.equal(grads[n], o_grads[n]) for n in grads)


def test_disk_tier_writes_once_and_reuses(tiny_models, tmp_path):
    path = tiny_models["qwen2"]["hf"]
    first = StreamedModel(assay.load(path), tier="disk", cache_dir=tmp_path)
    second = StreamedModel(assay.load(path), tier="disk", cache_dir=tmp_path)
    assert not first.store.reused and second.store.reused
    assert first.store.directory == second.store.directory
    shards = sorted(p.name for p in first.store.directory.glob("layer-*.safetensors"))
    assert shards == ["layer-0000.safetensors", "layer-0001.safetensors"]


def test_disk_tier_keys_on_content(tiny_models, tmp_path):
    a = StreamedModel(assay.load(tiny_models["mistral"]["hf"]), tier="disk", cache_dir=tmp_path)
    b = StreamedModel(assay.load(tiny_models["llama3"]["hf"]), tier="disk", cache_dir=tmp_path)
    assert a.store.directory != b.store.directory


def test_device_base_bytes_are_buffers_times_largest_layer(tiny_models):
    model = StreamedModel(assay.load(tiny_models["qwen2"]["hf"]), buffers=2)
    info = model.describe()
    assert info["device_base_bytes"] == 2 * info["largest_layer_bytes"]
    assert info["bytes"] == sum(layout.nbytes for layout in model.layouts)


def test_owner_check_raises_on_a_recycled_slot(tiny_models):
    model = StreamedModel(assay.load(tiny_models["qwen2"]["hf"]), buffers=2)
    ids = torch.randint(0, 320, (1, 8))
    model(ids)
    holder = model.pool._holder(1)
    holder.loaded = 0  # as if another layer's bytes had landed in layer 1's slot
    with pytest.raises(StreamError, match="expected layer 1"), model.pool.use(1):
        pass


def test_full_method_refuses_the_disk_tier(tiny_models, tmp_path):
    model = attach(assay.load(tiny_models["qwen2"]["hf"]), "full")
    with pytest.raises(ConfigError, match=r"^method full streams from the RAM tier only"):
        StreamedModel(model, tier="disk", cache_dir=tmp_path)


def test_full_method_trains_the_host_weights(tiny_models):
    model = attach(assay.load(tiny_models["qwen2"]["hf"]), "full")
    streamed = StreamedModel(model)
    weight = model.layers[0].mlp.up_proj.weight
    before = weight.detach().clone()
    optimizer = torch.optim.SGD([p for p in streamed.parameters() if p.requires_grad], lr=0.1)
    streamed(torch.randint(0, 320, (1, 8))).sum().backward()
    optimizer.step()
    assert not torch.equal(before, weight.detach())
    block = streamed.store.layouts[0].views(streamed.store.block(0))["mlp.up_proj.weight"]
    assert torch.equal(block, weight.detach())  # the arena is what the next fetch reads


@pytest.mark.parametrize("buffers", [2, 3])
def test_full_method_trains_like_resident_over_optimizer_steps(tiny_models, buffers):
    """Each step's forward reads the weights the last optimizer step wrote to the store, not a
    slot copied before it (with as many slots as layers, every slot still holds one)."""
    path = tiny_models["qwen2"]["hf"]
    ids = torch.randint(0, 320, (2, 20), generator=torch.Generator().manual_seed(6))
    runs = {}
    for name, model in (
        ("resident", _model(path, "full", "float32", {})),
        ("streamed", StreamedModel(_model(path, "full", "float32", {}), buffers=buffers)),
    ):
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
        losses = []
        for _ in range(3):
            logits = model(ids)
            loss = torch.nn.functional.cross_entropy(
                logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()
            )
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
        runs[name] = losses
    assert runs["streamed"] == runs["resident"]
    assert runs["resident"][0] != runs["resident"][2]


def test_full_method_refuses_kept_mode(tiny_models):
    model = _model(tiny_models["qwen2"]["hf"], "full", "float32", {})
    with pytest.raises(ConfigError, match="recompute"):
        StreamedModel(model, recompute=False)


@pytest.mark.parametrize("tier", ["ram", "disk"])
def test_kept_mode_fetches_each_layer_once_per_pass_and_never_recomputes(
    tiny_models, tmp_path, tier
):
    """Forward fetches every layer once, backward once more; no layer runs twice."""
    model = _model(tiny_models["mistral"]["hf"], "lora", "nf4", {})
    streamed = StreamedModel(model, tier=tier, buffers=2, cache_dir=tmp_path, recompute=False)
    calls = []
    for layer in model.layers:
        layer.register_forward_hook(lambda *_: calls.append(1))
    ids = torch.randint(0, 320, (1, 16), generator=torch.Generator().manual_seed(2))
    before = streamed.pool.fetches
    for _ in range(2):  # the second step must start cleanly after the first backward
        _loss_and_grads(streamed, ids)
    layers = len(model.layers)
    assert len(calls) == 2 * layers
    assert streamed.pool.fetches - before <= 2 * 2 * layers


def test_kept_mode_matches_recompute_mode_over_two_optimizer_steps(tiny_models):
    path = tiny_models["mistral"]["hf"]
    ids = torch.randint(0, 320, (2, 20), generator=torch.Generator().manual_seed(4))
    losses = {}
    for recompute in (True, False):
        streamed = StreamedModel(_model(path, "dora", "nf4", {}), recompute=recompute)
        trainable = [p for p in streamed.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=1e-2)
        seen = []
        for _ in range(3):
            logits = streamed(ids)
            loss = torch.nn.functional.cross_entropy(
                logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()
            )
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            seen.append(loss.item())
        losses[recompute] = seen
    assert losses[True] == losses[False]
    assert losses[True][0] != losses[True][2]


def test_kept_mode_backward_reads_weights_fetched_again_not_the_forward_slots(tiny_models):
    """Wiping every slot between forward and backward leaves the gradients exact."""
    path = tiny_models["qwen2"]["hf"]
    ids = torch.randint(0, 320, (1, 16), generator=torch.Generator().manual_seed(5))
    _, grads = _loss_and_grads(_model(path, "lora", "nf4_double_quant", {}), ids)
    streamed = StreamedModel(_model(path, "lora", "nf4_double_quant", {}), recompute=False)
    logits = streamed(ids)
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
    streamed.kept.release()
    for slot in streamed.pool.slots:
        if slot.pending is not None:
            slot.pending.result()
        slot.buffer.fill_(255)
        slot.requested = slot.loaded = None
    params = [(n, p) for n, p in streamed.named_parameters() if p.requires_grad]
    s_grads = torch.autograd.grad(loss, [p for _, p in params])
    for (name, _), g in zip(params, s_grads, strict=True):
        assert torch.equal(grads[name.removeprefix("model.")], g), name


@pytest.mark.parametrize("recompute", [True, False], ids=["recompute", "keep-activations"])
def test_delayed_torn_reordered_copies_change_nothing(tiny_models, recompute):
    from assay_testing.copies import DelayingCopies

    path = tiny_models["qwen2"]["hf"]
    ids = torch.randint(0, 320, (2, 24), generator=torch.Generator().manual_seed(0))
    logits, grads = _loss_and_grads(_model(path, "lora", "float32", {}), ids)
    streamed = StreamedModel(_model(path, "lora", "float32", {}), buffers=2, recompute=recompute)
    engine = DelayingCopies(seed=1)
    streamed.pool.set_copy_engine(engine)
    s_logits, s_grads = _loss_and_grads(streamed, ids)
    assert engine.copies == streamed.pool.fetches >= 2  # every fetch went through it
    assert torch.equal(logits, s_logits)
    assert all(torch.equal(grads[n], s_grads[n]) for n in grads)


def test_a_torn_disk_shard_is_rebuilt_or_refused(tiny_models, tmp_path):
    from assay.stream.store import DiskStore

    path = tiny_models["qwen2"]["hf"]
    first = StreamedModel(assay.load(path), tier="disk", cache_dir=tmp_path)
    shard = first.store.directory / "layer-0001.safetensors"
    shard.write_bytes(shard.read_bytes()[:100])
    key = first.store.directory.name
    with pytest.raises(StreamError.__mro__[1], match="no valid stream cache"):
        DiskStore(tmp_path, key + "0" * 32, first.layouts, None)
    again = StreamedModel(assay.load(path), tier="disk", cache_dir=tmp_path)
    assert not again.store.reused  # rebuilt from the model's tensors


@pytest.mark.parametrize(
    ("method", "options"), [("lora", {}), ("tinylora", {"sharing": "per_target"})]
)
def test_adapter_gradients_land_in_one_block_allocated_before_the_layers(
    tiny_models, method, options
):
    """Why the streamed peak RSS stays flat in depth (gate-scale's depth.step_peak_flat): every
    adapter gradient of a streamed backward is a view of one block, so none is a separate heap
    chunk left between a layer's freed transients. Its sums stay the resident ones (above)."""
    streamed = StreamedModel(_model(tiny_models["qwen2"]["hf"], method, "float32", options))
    ids = torch.randint(0, 320, (1, 12), generator=torch.Generator().manual_seed(1))
    streamed(ids).sum().backward()
    adapters = [p for n, p in streamed.named_parameters() if p.requires_grad and "embed" not in n]
    assert len(adapters) > 1 and all(p.grad is not None for p in adapters)
    blocks = {p.grad.untyped_storage().data_ptr() for p in adapters}
    assert len(blocks) == 1
