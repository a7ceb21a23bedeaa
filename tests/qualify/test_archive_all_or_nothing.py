"""``import-gpu`` is all or nothing: a refusal writes nothing (not even a gate folder); a
full disk at any write leaves the records as they were or completable by importing the same
archive again, and so does a kill -9 at any write (slow); archive caps hold while streaming;
a malformed manifest or a corrupt deflate stream is one line."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from test_archive import DEVICE_GATE, _box_run, _import, _rewrite

from assay.errors import AssayError
from assay.qualify import verify_all
from assay.qualify.ledger.archive import import_archive, read_archive
from assay.qualify.ledger.tar_stream import Caps, read_members
from assay_testing.faults import FailAt


@pytest.fixture
def home(gates):
    gates.write("alpha", DEVICE_GATE)
    gates.run().assert_outcomes(passed=1)
    return gates


def _tree(folder: Path) -> dict[str, bytes | None]:
    """Every path under ``folder`` (folders too: an empty one counts) with its bytes."""
    return {
        str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(folder.rglob("*"))
    }


def test_a_refused_import_creates_no_gate_folder(home, tmp_path, capsys):
    archive, _ = _box_run(home, tmp_path)

    def add_gate(members):
        manifest = json.loads(members["manifest.json"])
        manifest["gates"]["zeta"] = {"chained_onto": None, "receipts": ["missing.json"]}
        members["manifest.json"] = json.dumps(manifest).encode()

    _rewrite(archive, add_gate)
    before = _tree(home.records)
    assert _import(archive, home.receipts) == 2
    assert (
        "receipts/zeta/missing.json is listed for gate zeta but absent" in capsys.readouterr().err
    )
    assert _tree(home.records) == before and not (home.receipts / "zeta").exists()


@pytest.mark.parametrize(
    ("files", "says"),
    [
        ([{"path": 7, "bytes": 1, "sha256": "0" * 64}], "files[0]: expected {path: text"),
        ({"path": "x"}, "files: expected a list"),
        ([["x"]], "files[0]: expected"),
    ],
)
def test_a_malformed_manifest_files_entry_is_one_line(home, tmp_path, capsys, files, says):
    archive, _ = _box_run(home, tmp_path)

    def change(members):
        manifest = json.loads(members["manifest.json"])
        manifest["files"] = files
        members["manifest.json"] = json.dumps(manifest).encode()

    _rewrite(archive, change)
    assert _import(archive, home.receipts) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(archive) in err and says in err, err


def test_a_corrupt_deflate_stream_is_one_line(home, tmp_path, capsys):
    import random
    import zlib

    archive, _ = _box_run(home, tmp_path)
    noise = random.Random(0).randbytes(100_000)  # a large member, so damage lands inside it
    _rewrite(archive, lambda members: members.update({"logs/noise.bin": noise}))
    raw = archive.read_bytes()
    for at in range(len(raw) // 2, len(raw) - 32):  # damage zlib rejects, past the manifest
        broken = raw[:at] + b"\x55" * 16 + raw[at + 16 :]
        try:
            zlib.decompressobj(31).decompress(broken)
        except zlib.error as err:  # "invalid ...": the stream itself, not its checksum
            if "invalid" in str(err) and len(zlib.decompressobj(31).decompress(raw[:at])) > 2048:
                break
    archive.write_bytes(broken)
    before = _tree(home.records)
    assert _import(archive, home.receipts) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(archive) in err and "Traceback" not in err, err
    assert _tree(home.records) == before


def _targz(path: Path, blocks: bytes, tail: bytes = b"") -> Path:
    """A .tar.gz of raw tar ``blocks`` (hand-made headers) followed by ``tail`` bytes."""
    path.write_bytes(gzip.compress(blocks + tail, compresslevel=1))
    return path


def _header(name: str, kind: bytes, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size
    return info.tobuf(format=tarfile.GNU_FORMAT)


class _CountingGzip(gzip.GzipFile):
    read_total = 0

    def read(self, size=-1):
        data = super().read(size)
        _CountingGzip.read_total += len(data)
        return data


@pytest.mark.parametrize(
    ("kind", "says"),
    [(tarfile.GNUTYPE_LONGNAME, "a long name declares"), (tarfile.XHDTYPE, "a pax header")],
)
def test_a_header_declaring_megabytes_is_refused_before_it_is_read(
    tmp_path, monkeypatch, kind, says
):
    """8 MiB of a declared long name or pax header: refused after reading its header block,
    where tarfile reads the whole declared size first (gigabytes, for a hostile archive)."""
    declared = 8 << 20
    archive = _targz(tmp_path / "a.tar.gz", _header("x", kind, declared), bytes(declared))
    monkeypatch.setattr(gzip, "GzipFile", _CountingGzip)
    _CountingGzip.read_total = 0
    with pytest.raises(AssayError) as info:
        read_archive(archive)
    assert says in str(info.value) and str(archive) in str(info.value)
    assert _CountingGzip.read_total < 64 << 10


def test_every_cap_is_enforced_while_streaming(tmp_path):
    def member(name: str, size: int) -> bytes:
        return _header(name, tarfile.REGTYPE, size) + bytes(size + (-size % 512))

    two = _targz(tmp_path / "two.tar.gz", member("a", 3000) + member("b", 3000))
    with pytest.raises(AssayError, match="member 'a' declares 3,000 bytes; the limit is 2,000"):
        list(read_members(two, Caps(member_bytes=2000)))
    with pytest.raises(AssayError, match="unpacks to over"):
        list(read_members(two, Caps(total_bytes=5000)))
    long_name = _targz(tmp_path / "n.tar.gz", member("n" * 300, 1))
    with pytest.raises(AssayError, match="a long name declares 301 bytes; the limit is 200"):
        list(read_members(long_name, Caps(name_bytes=200)))
    info = tarfile.TarInfo("p" * 300)
    pax = _targz(tmp_path / "p.tar.gz", info.tobuf(format=tarfile.PAX_FORMAT))
    with pytest.raises(AssayError, match="a member name is over 200 bytes"):
        list(read_members(pax, Caps(name_bytes=200)))
    with pytest.raises(AssayError, match="a pax header declares"):
        list(read_members(pax, Caps(pax_bytes=100)))
    assert [n for n, _ in read_members(two)] == ["a", "b"]


def _reference(home, archive: Path, tmp_path: Path) -> dict[str, bytes | None]:
    """The receipts and figures after a clean import into a copy of the home records."""
    clean = tmp_path / "clean"
    shutil.copytree(home.records, clean)
    import_archive(archive, clean / "receipts", clean)
    return _tree(clean)


def test_a_full_disk_at_any_write_leaves_the_records_whole_or_completable(home, tmp_path):
    archive, _ = _box_run(home, tmp_path)
    want = _reference(home, archive, tmp_path)
    pristine = tmp_path / "pristine"
    shutil.copytree(home.records, pristine)
    shutil.copytree(pristine, tmp_path / "counted")
    with FailAt(0) as counting:
        import_archive(archive, tmp_path / "counted" / "receipts", tmp_path / "counted")
    assert len(counting.events) >= 6, counting.events
    for n in range(1, len(counting.events) + 1):
        records = tmp_path / f"trial-{n}"
        shutil.copytree(pristine, records)
        with FailAt(n) as fault:
            try:
                import_archive(archive, records / "receipts", records)
            except AssayError as err:
                assert "No space left on device" in str(err) and "\n" not in str(err)
                # the process survived: everything it staged or placed is gone again
                assert _tree(records) == _tree(pristine), f"write {n} left files behind"
            else:  # a failed fsync of a folder is no error (some filesystems refuse it), nor
                # a failed mkdir of a folder that exists
                assert fault.events[n - 1] in ("fsync", "mkdir") and _tree(records) == want
        assert fault.failed
        import_archive(archive, records / "receipts", records)  # the same command again
        assert _tree(records) == want, f"write {n} ({fault.events[-1]}) was not completable"


CHILD = """
import sys
from pathlib import Path
from assay_testing.faults import pause_at_event
from assay.qualify.ledger.archive import import_archive
archive, records, kill_at = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
pause_at_event(kill_at)
import_archive(archive, records / "receipts", records)
print("DONE", flush=True)
"""


@pytest.mark.slow
def test_a_kill_at_any_write_leaves_the_records_whole_or_completable(home, tmp_path):
    archive, _ = _box_run(home, tmp_path)
    want = _reference(home, archive, tmp_path)
    pristine = tmp_path / "pristine"
    shutil.copytree(home.records, pristine)
    n = 0
    while True:
        n += 1
        records = tmp_path / f"kill-{n}"
        shutil.copytree(pristine, records)
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(archive), str(records), str(n)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = child.stdout.readline()
        if line.startswith("DONE"):
            child.wait()
            break
        assert line.startswith("PAUSE"), (line, child.communicate())
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        import_archive(archive, records / "receipts", records)
        assert _tree(records) == want, f"a kill at event {n} was not completable"
    assert n > 4  # the import had several events to be killed at


def test_a_receipt_left_by_an_interrupted_import_is_listed_on_the_next(home, tmp_path, capsys):
    """The shape of the old failure: receipt written, LEDGER line not; importing again used
    to be refused forever ("exists but is not in the ledger")."""
    archive, _ = _box_run(home, tmp_path)
    _, members = read_archive(archive)
    name = next(n for n in members if n.startswith("receipts/alpha/"))
    (home.receipts / "alpha" / Path(name).name).write_bytes(members[name])
    assert _import(archive, home.receipts) == 0, capsys.readouterr()
    assert verify_all(home.receipts, home.records) == []
