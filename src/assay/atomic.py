"""Crash-safe writes: files and whole directories appear complete or not at all.

Every helper writes to a temporary name in the destination's own directory (so the final
rename never crosses a filesystem), fsyncs the data, renames into place and fsyncs the parent
directory so that the rename itself survives a power cut. A failure or a kill at any moment
leaves the previous content of the destination untouched; at worst a temporary file or
directory (named ``.<name>.tmp-*``) stays behind, which :func:`remove_stale_temporaries`
clears.

Bytes go out through :func:`write_all`, which loops until the kernel has taken every byte (a
``write`` may legally take fewer). What appears gets the mode a plain ``open`` or ``mkdir``
would give it under the process's umask (the temporary names are created owner-only).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TMP_MARK = ".tmp-"


def _umask() -> int:
    """The process's umask, read without changing it where the system shows it (Linux), so a
    thread creating a file meanwhile never sees a cleared one."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o077)  # elsewhere: set and restore at once, owner-only in between
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode ``open(path, "w")`` gives a new file now: 0o666 less the umask."""
    return 0o666 & ~_umask()


def dir_mode() -> int:
    """The mode ``mkdir`` gives a new folder now: 0o777 less the umask."""
    return 0o777 & ~_umask()


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd``, looping over short writes."""
    view = memoryview(data)
    written = 0
    while written < len(view):
        written += os.write(fd, view[written:])


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Flush a directory's entries (renames, creations) to disk; a no-op where refused."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on directories; the rename is still atomic
    finally:
        os.close(fd)


def fsync_file(path: str | os.PathLike[str]) -> None:
    """Flush a file that something else (a library writer) has written and closed."""
    with open(path, "rb+") as handle:
        os.fsync(handle.fileno())


def _tmp_prefix(target: Path) -> str:
    return f".{target.name}{TMP_MARK}"


def _named(exc: OSError, target: Path) -> OSError:
    """``exc`` with ``target`` as its file name when it carries none (a write to an fd)."""
    if exc.filename is None:
        return OSError(exc.errno, exc.strerror or str(exc), str(target))
    return exc


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, replace: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically; the parent directory is created if needed.

    Guarantee: after a crash ``path`` holds either its old content or ``data``, never a mix.
    With ``replace=False`` an existing ``path`` is never replaced: FileExistsError instead (the
    temporary file is hard-linked into place, which fails when the name exists, so two writers
    never both win).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=_tmp_prefix(target), dir=target.parent)
    try:
        try:
            os.fchmod(fd, file_mode())  # mkstemp's 0600 would leave the file owner-only
            write_all(fd, data)
            os.fsync(fd)
        except OSError as exc:  # a full disk names the file it was writing
            raise _named(exc, target) from None
        finally:
            os.close(fd)
        if replace:
            os.replace(tmp, target)
        else:
            os.link(tmp, target)  # FileExistsError when target exists: create-only, no race
            os.unlink(tmp)
        fsync_dir(target.parent)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def check_generated(path: str | os.PathLike[str], data: bytes) -> None:
    """AssayError naming ``path`` unless it is absent or a regular file whose first line is
    ``data``'s: what a writer of generated files checks before it writes any of them."""
    target = Path(path)
    first = data.split(b"\n", 1)[0] + b"\n"
    if not (target.exists() or target.is_symlink()):
        return
    theirs = b""
    if target.is_file() and not target.is_symlink():  # never open a FIFO or a device
        with contextlib.suppress(OSError), open(target, "rb") as handle:
            theirs = handle.read(len(first))
    if theirs != first:
        from assay.errors import AssayError

        raise AssayError(
            f"{target}: exists and was not written by this command (its first line is not "
            f"{first.decode('utf-8', 'replace').strip()!r}); nothing was changed; move it "
            "away or choose another folder"
        )


def replace_generated(path: str | os.PathLike[str], data: bytes) -> None:
    """:func:`atomic_write_bytes` for a generated file whose first line says what wrote it: an
    existing ``path`` is replaced only when its first line is the same (a file this writer
    made before), so a user's file of the same name is never overwritten
    (:func:`check_generated`)."""
    check_generated(path, data)
    atomic_write_bytes(path, data)


def json_bytes(obj: Any) -> bytes:
    """Sorted, indented UTF-8 JSON with a trailing newline; NaN and infinity are refused."""
    text = json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False)
    return (text + "\n").encode("utf-8")


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """:func:`atomic_write_bytes` of :func:`json_bytes` (ValueError on NaN before any write)."""
    atomic_write_bytes(path, json_bytes(obj))


def write_synced(path: str | os.PathLike[str], data: bytes) -> None:
    """Write a new file and fsync it (for files inside a staged directory, not yet visible)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # less the umask
    try:
        write_all(fd, data)
        os.fsync(fd)
    except OSError as exc:
        raise _named(exc, Path(path)) from None
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    for dirpath, _dirnames, filenames in os.walk(root, topdown=False):
        for name in filenames:
            path = os.path.join(dirpath, name)
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            except OSError as exc:  # a full disk names the file it was flushing
                raise _named(exc, Path(path)) from None
            finally:
                os.close(fd)
        fsync_dir(dirpath)


@contextlib.contextmanager
def staged_directory(final: str | os.PathLike[str], *, replace: bool = False) -> Iterator[Path]:
    """Yield an empty temporary directory that becomes ``final`` when the block succeeds.

    On success every file under it is fsynced, then it is renamed to ``final`` and the parent
    fsynced. On an exception it is deleted and ``final`` is untouched. An existing ``final``
    is an error (FileExistsError) unless ``replace``, in which case it is moved aside, the new
    directory renamed in, and the old one deleted; a kill between those two renames leaves
    ``final`` absent (the old copy survives under a ``.tmp-`` name), so callers must not
    replace a directory that a pointer still names.
    """
    target = Path(final)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists() and not replace:
        raise FileExistsError(f"{target}: already exists")
    staging = Path(tempfile.mkdtemp(prefix=_tmp_prefix(target), dir=target.parent))
    try:
        os.chmod(staging, dir_mode())  # mkdtemp's 0700 would leave the folder owner-only
        yield staging
        _fsync_tree(staging)
        old: Path | None = None
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=_tmp_prefix(target), dir=target.parent))
            os.rmdir(old)
            os.rename(target, old)
        os.rename(staging, target)
        fsync_dir(target.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def remove_stale_temporaries(directory: str | os.PathLike[str]) -> list[str]:
    """Delete leftovers of interrupted writes (``.<name>.tmp-*``) in ``directory``.

    Only call this when no other process writes into ``directory``. Returns the names removed.
    """
    removed: list[str] = []
    root = Path(directory)
    if not root.is_dir():
        return removed
    for entry in sorted(root.iterdir()):
        if entry.name.startswith(".") and TMP_MARK in entry.name:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            removed.append(entry.name)
    return removed
