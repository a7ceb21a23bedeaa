"""The rule for the disk tier's cache: a store serves exactly the bytes its key names. Whatever
happened to its shards on disk (a flipped bit anywhere, shards swapped, one cut short, a header
whose length or block offsets are no byte range, one taken from another model), the next run
that opens it, built from a resident model or loaded straight into the disk tier, computes what
the model's own weights give."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import assay
from assay.stream import StreamedModel
from assay.stream.offload import load_into_disk_tier
from assay.stream.store import shard_path, stored_key
from assay_testing.tiny import save_tiny

IDS = torch.tensor([[1, 5, 9, 2, 7, 3]])


def _flip(store, data) -> None:
    path = shard_path(store.directory, data.draw(st.integers(0, len(store.layouts) - 1)))
    raw = bytearray(path.read_bytes())
    header = 8 + int.from_bytes(raw[:8], "little")
    # the header's length, the header or the bytes: flips in the block are the usual draw
    at = data.draw(
        st.one_of(st.integers(header, len(raw) - 1), st.integers(0, header - 1)), label="byte"
    )
    raw[at] ^= 1 << data.draw(st.integers(0, 7), label="bit")
    path.write_bytes(bytes(raw))


def _swap(store, data) -> None:
    a, b = shard_path(store.directory, 0), shard_path(store.directory, 1)
    first, second = a.read_bytes(), b.read_bytes()
    a.write_bytes(second)
    b.write_bytes(first)


def _truncate(store, data) -> None:
    path = shard_path(store.directory, 1)
    path.write_bytes(path.read_bytes()[: data.draw(st.integers(0, 200), label="kept")])


def _bad_offsets(store, data) -> None:
    """The header's block offsets replaced by something that is not a byte range of it."""
    path = shard_path(store.directory, data.draw(st.integers(0, len(store.layouts) - 1)))
    raw = path.read_bytes()
    length = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + length])
    start, end = header["block"]["data_offsets"]
    bad = [
        [float(start), float(end)],
        [str(start), end],
        [end, start],
        [-1, end - start - 1],
        [start, True],
        [start],
        None,
    ]
    header["block"]["data_offsets"] = data.draw(st.sampled_from(bad), label="offsets")
    encoded = json.dumps(header).encode()
    path.write_bytes(len(encoded).to_bytes(8, "little") + encoded + raw[8 + length :])


def _bad_length(store, data) -> None:
    """The header's length field past the shard's end, up to the largest 8-byte value."""
    path = shard_path(store.directory, data.draw(st.integers(0, len(store.layouts) - 1)))
    raw = path.read_bytes()
    length = data.draw(st.integers(len(raw) - 7, 2**64 - 1), label="length")
    path.write_bytes(length.to_bytes(8, "little") + raw[8:])


DAMAGE = {
    "flip": _flip,
    "swap": _swap,
    "truncate": _truncate,
    "offsets": _bad_offsets,
    "length": _bad_length,
}


def _fresh_logits(path) -> torch.Tensor:
    with torch.no_grad():
        return assay.load(path)(IDS)


def _open_built(path, cache):
    return StreamedModel(assay.load(path), tier="disk", cache_dir=cache)


def _open_loaded(path, cache):
    model, store, _ = load_into_disk_tier(path, cache_dir=cache)
    return StreamedModel(model, tier="disk", store=store)


OPENERS = {"built": _open_built, "loaded": _open_loaded}


@pytest.mark.parametrize("opener", sorted(OPENERS))
@pytest.mark.parametrize("damage", sorted(DAMAGE))
@settings(
    max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_a_damaged_store_is_never_served(tiny_models, tmp_path_factory, opener, damage, data):
    path = tiny_models["llama3"]["hf"]
    cache = tmp_path_factory.mktemp("cache")
    expected = _fresh_logits(path)
    first = _open_built(path, cache)
    key = stored_key(first.store.directory, first.layouts)
    DAMAGE[damage](first.store, data)
    # a flip in header metadata the reader never uses leaves the bytes, and the key, intact
    damaged = stored_key(first.store.directory, first.layouts) != key
    again = OPENERS[opener](path, cache)
    assert not (damaged and again.store.reused)
    assert stored_key(again.store.directory, again.layouts) == key
    with torch.no_grad():
        assert torch.equal(again(IDS), expected)
    shutil.rmtree(cache)


def test_a_shard_from_another_model_of_the_same_shape_is_not_served(tiny_models, tmp_path):
    """Two models of one shape give shards of one length: only the bytes tell them apart."""
    a, b = tiny_models["llama3"]["hf"], save_tiny("llama3", tmp_path / "other", seed=99)["hf"]
    first = _open_built(a, tmp_path / "a")
    other = _open_built(b, tmp_path / "b")
    assert first.layouts == other.layouts
    assert first.store.directory.name != other.store.directory.name
    shutil.copyfile(shard_path(other.store.directory, 0), shard_path(first.store.directory, 0))
    again = _open_built(a, tmp_path / "a")
    assert not again.store.reused
    with torch.no_grad():
        assert torch.equal(again(IDS), _fresh_logits(a))


def test_an_intact_store_is_reused_and_hashes_to_its_key(tiny_models, tmp_path):
    path = tiny_models["llama3"]["hf"]
    first = _open_built(path, tmp_path)
    second = _open_built(path, tmp_path)
    assert (first.store.reused, second.store.reused) == (False, True)
    assert stored_key(second.store.directory, second.layouts).startswith(
        second.store.directory.name
    )
