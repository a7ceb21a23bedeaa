"""assay.digest against hashlib on whole bytes: the run marker's record, the GGUF seal and the
export manifest all hash through it on both sides (writing and checking), so a defect in it
would be shared by both and invisible to them; this compares it with an independent reading."""

from __future__ import annotations

import hashlib
import io

from hypothesis import given, settings
from hypothesis import strategies as st

from assay import digest

# sizes around the chunk boundaries, where a streaming loop goes wrong
SIZES = st.sampled_from(
    [0, 1, digest.CHUNK - 1, digest.CHUNK, digest.CHUNK + 1, 3 * digest.CHUNK + 7]
)


@settings(max_examples=30, deadline=None)
@given(size=SIZES, seed=st.integers(0, 255), cut=st.one_of(st.none(), st.integers(0, 4 << 20)))
def test_feed_hashes_exactly_the_bytes_asked_for(size, seed, cut):
    data = (bytes(range(seed, 256)) + bytes(range(seed))) * (size // 256 + 1)
    data = data[:size]
    found = hashlib.sha256()
    read = digest.feed(found, io.BytesIO(data), cut)
    expected = data if cut is None else data[:cut]
    assert read == len(expected)
    assert found.hexdigest() == hashlib.sha256(expected).hexdigest()


def test_file_sha256_is_the_sha256_of_the_whole_file(tmp_path):
    path = tmp_path / "f.bin"
    data = bytes(range(256)) * (digest.CHUNK // 128 + 3)
    path.write_bytes(data)
    assert digest.file_sha256(path) == hashlib.sha256(data).hexdigest()
