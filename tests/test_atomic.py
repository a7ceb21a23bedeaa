"""Atomic writes: complete or absent, never partial, and a failure keeps the old content."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from assay.atomic import (
    atomic_write_bytes,
    atomic_write_json,
    remove_stale_temporaries,
    staged_directory,
    write_synced,
)


def test_atomic_write_bytes_replaces_content_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "file.bin"
    atomic_write_bytes(target, b"one")
    atomic_write_bytes(target, b"two")
    assert target.read_bytes() == b"two"
    assert sorted(p.name for p in target.parent.iterdir()) == ["file.bin"]


def test_failed_write_keeps_previous_content(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "file.bin"
    atomic_write_bytes(target, b"good")

    def boom(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_bytes(target, b"bad")
    monkeypatch.undo()
    assert target.read_bytes() == b"good"
    assert [p.name for p in tmp_path.iterdir()] == ["file.bin"]


def test_a_full_disk_names_the_file_it_was_writing(tmp_path: Path, monkeypatch) -> None:
    """Issue 52, rule 6: a checkpoint save on a full disk used to print ": No space left on
    device" with no path, since a write to a file descriptor carries no file name."""
    import errno

    target = tmp_path / "step" / "optimizer.safetensors"

    def full(fd: int, data) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError) as caught:
        atomic_write_bytes(target, b"x")
    assert caught.value.filename == str(target) and caught.value.errno == errno.ENOSPC


def test_atomic_write_json_is_sorted_and_refuses_nan_before_writing(tmp_path: Path) -> None:
    target = tmp_path / "x.json"
    atomic_write_json(target, {"b": 1, "a": [1.5]})
    assert target.read_text() == '{\n  "a": [\n    1.5\n  ],\n  "b": 1\n}\n'
    with pytest.raises(ValueError):
        atomic_write_json(target, {"a": float("nan")})
    assert json.loads(target.read_text()) == {"a": [1.5], "b": 1}


def test_staged_directory_appears_whole_on_success(tmp_path: Path) -> None:
    final = tmp_path / "ckpt"
    with staged_directory(final) as staging:
        write_synced(staging / "a", b"1")
        assert not final.exists()  # invisible until the block ends
    assert (final / "a").read_bytes() == b"1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_staged_directory_failure_keeps_the_old_directory(tmp_path: Path) -> None:
    final = tmp_path / "ckpt"
    with staged_directory(final) as staging:
        write_synced(staging / "a", b"old")
    with pytest.raises(RuntimeError), staged_directory(final, replace=True) as staging:
        write_synced(staging / "a", b"new")
        raise RuntimeError("killed halfway")
    assert (final / "a").read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_staged_directory_refuses_or_replaces_existing(tmp_path: Path) -> None:
    final = tmp_path / "ckpt"
    final.mkdir()
    (final / "stale").write_bytes(b"x")
    with pytest.raises(FileExistsError), staged_directory(final):
        pass
    with staged_directory(final, replace=True) as staging:
        write_synced(staging / "fresh", b"y")
    assert sorted(p.name for p in final.iterdir()) == ["fresh"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_remove_stale_temporaries_only_touches_temporaries(tmp_path: Path) -> None:
    (tmp_path / ".step-000002.tmp-abc").mkdir()
    (tmp_path / ".latest.tmp-xyz").write_bytes(b"")
    (tmp_path / "step-000001").mkdir()
    (tmp_path / "latest").write_bytes(b"step-000001\n")
    removed = remove_stale_temporaries(tmp_path)
    assert removed == [".latest.tmp-xyz", ".step-000002.tmp-abc"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step-000001"]


def test_short_writes_are_looped_until_every_byte_is_written(tmp_path):
    from assay_testing import defects

    data = bytes(range(256)) * 5
    with defects.inject("atomic.short_write", "7"):
        atomic_write_bytes(tmp_path / "f.bin", data)
    assert (tmp_path / "f.bin").read_bytes() == data
    with (
        defects.inject("atomic.short_write", "7"),
        defects.inject("atomic.ignore_short_write"),
    ):
        atomic_write_bytes(tmp_path / "g.bin", data)
    assert (tmp_path / "g.bin").read_bytes() == data[:7]  # the defect the loop prevents


def test_a_full_disk_while_flushing_names_the_file(tmp_path, monkeypatch):
    """Issue 52, rule 6: an fsync on a descriptor fails without a file name, so a full disk
    while a checkpoint's files were flushed printed "error: No space left on device" naming
    nothing. A folder's own fsync stays best effort (some filesystems refuse it)."""
    import errno

    from assay import atomic

    def failing(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(OSError) as raised, atomic.staged_directory(tmp_path / "step") as staging:
        (staging / "weights.bin").write_bytes(b"x")
    assert raised.value.filename.endswith("weights.bin") and not (tmp_path / "step").exists()
    atomic.fsync_dir(tmp_path)  # no error: the rename before it is atomic either way


@pytest.fixture(params=[0o022, 0o077, 0o002])
def umask(request):
    before = os.umask(request.param)
    yield request.param
    os.umask(before)


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_what_appears_has_the_mode_a_plain_open_or_mkdir_gives(tmp_path: Path, umask) -> None:
    """Files and folders written through a temporary name get the umask's mode, like the
    reference written by open() and mkdir() under the same umask; the control: a bare mkstemp
    file (what the writers start from) is owner-only, so the check tells them apart."""
    reference_file, reference_dir = tmp_path / "plain", tmp_path / "plain-dir"
    reference_file.write_bytes(b"x")
    reference_dir.mkdir()
    atomic_write_bytes(tmp_path / "atomic", b"x")
    atomic_write_json(tmp_path / "atomic.json", {"a": 1})
    with staged_directory(tmp_path / "staged") as staging:
        write_synced(staging / "inside", b"x")
    files = [tmp_path / "atomic", tmp_path / "atomic.json", tmp_path / "staged" / "inside"]
    assert {_mode(p) for p in files} == {_mode(reference_file)} == {0o666 & ~umask}
    assert _mode(tmp_path / "staged") == _mode(reference_dir) == 0o777 & ~umask
    fd, bare = tempfile.mkstemp(dir=tmp_path)
    os.close(fd)
    assert (_mode(Path(bare)) != _mode(reference_file)) is (umask != 0o077)
