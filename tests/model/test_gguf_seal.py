"""A sealed GGUF file is byte for byte what was sealed: the seal holds on the file as written
and breaks under any edit (one byte changed anywhere, bytes appended or cut), and a file
without the key, or with it twice, carries no seal."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGUFWriter
from hypothesis import given, settings
from hypothesis import strategies as st

from assay.model.gguf_export import finish_gguf
from assay.model.gguf_seal import PLACEHOLDER, placeholder_metadata, seal, seal_holds

KEY = "test.seal"


def _written(folder, *, sealed=True, extra=None):
    tmp, target = folder / ".tmp.gguf", folder / "model.gguf"
    writer = GGUFWriter(str(tmp), "llama")
    writer.add_block_count(1)
    for key, (value, kind) in {**(extra or {}), **placeholder_metadata(KEY)}.items():
        writer.add_key_value(key, value, kind)
    writer.add_tensor("w", np.arange(64, dtype=np.float32).reshape(8, 8))
    finish_gguf(writer, tmp, target, seal_key=KEY if sealed else None)
    return target


def test_the_seal_holds_on_the_file_as_written(tmp_path):
    assert seal_holds(_written(tmp_path), KEY)


def test_a_placeholder_never_sealed_does_not_hold(tmp_path):
    """The control: the check reads the stored hash, not the key's presence."""
    path = _written(tmp_path, sealed=False)
    assert PLACEHOLDER.encode() in path.read_bytes()
    assert not seal_holds(path, KEY)


@settings(max_examples=40, deadline=None)
@given(where=st.floats(0, 1, exclude_max=True), flip=st.integers(1, 255))
def test_any_byte_changed_breaks_the_seal(tmp_path_factory, where, flip):
    path = _written(tmp_path_factory.mktemp("seal"))
    data = bytearray(path.read_bytes())
    data[int(where * len(data))] ^= flip
    path.write_bytes(bytes(data))
    assert not seal_holds(path, KEY)


@pytest.mark.parametrize("edit", ["appended", "cut"])
def test_bytes_appended_or_cut_break_the_seal(tmp_path, edit):
    path = _written(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data + b"\0" if edit == "appended" else data[:-1])
    assert not seal_holds(path, KEY)


def test_a_file_without_a_placeholder_cannot_be_sealed(tmp_path):
    path = tmp_path / "x.gguf"
    path.write_bytes(b"GGUF" + bytes(60))
    with pytest.raises(ValueError, match=KEY):
        seal(path, KEY)
    assert not seal_holds(path, KEY)
