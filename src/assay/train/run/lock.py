"""One writer per run folder: an exclusive ``flock`` on ``<run>/.assay-run.lock``.

The process that trains into a run folder (fresh, resumed or overwritten) holds the lock for
the life of the run. A second writer does not wait: it is refused with one line naming the
holder's pid and start time, read from the lock file. Guarantees:

- the lock file is created with ``O_CREAT`` (atomic) and removed by its holder when the run
  ends, so a finished run keeps no trace of it; a killed holder leaves the file behind but
  not the lock (the kernel drops a dead process's locks), and the next writer takes it over;
- a writer that took the lock checks that the path still names the file it locked (the
  holder may have removed it meanwhile) and otherwise tries again, so two processes never
  both believe they hold it;
- the lock file is never opened through a symlink and the holder record is written only over
  an empty file or an earlier holder record: a link, a folder or a user's file standing at the
  lock's name is refused in one line and left as it was (the record would otherwise land in
  whatever the link names);
- :func:`lock_held` tells a reader (``assay status``) whether a live process holds the lock
  without ever blocking a writer for longer than the probe itself; writers retry for
  :data:`RETRY_S` before concluding that the lock is taken.

A process is named by its pid and its start time in clock ticks since boot (field 22 of
``/proc/<pid>/stat``): a pid the kernel handed to another process since has another start
time, so :func:`same_process` never mistakes it for the run's.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import json
import os
import stat
import time
from pathlib import Path
from typing import Any

from assay.errors import ConfigError

LOCK_NAME = ".assay-run.lock"
RETRY_S = 1.0  # a reader's probe holds a shared lock for microseconds; wait it out
HOLDER_BYTES = 256  # the holder record is padded to this size and written in one pwrite


def start_ticks(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot (``/proc/<pid>/stat``
    field 22), or None when there is no such process or no ``/proc``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read(4096)
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: count from the last ')'
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def same_process(pid: Any, ticks: Any) -> bool:
    """Whether ``pid`` is alive and is the process that had start time ``ticks`` (a pid
    reused by another process has another start time)."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return False
    if isinstance(ticks, bool) or not isinstance(ticks, int):
        return False
    return start_ticks(pid) == ticks


def _started_text(ticks: int | None) -> str:
    """The wall-clock time (UTC) a process with start time ``ticks`` started, else now."""
    when = time.time()
    if ticks is not None:
        with contextlib.suppress(OSError, ValueError, StopIteration):
            with open("/proc/stat", "rb") as handle:
                line = next(x for x in handle if x.startswith(b"btime "))
            when = int(line.split()[1]) + ticks / os.sysconf("SC_CLK_TCK")
    moment = datetime.datetime.fromtimestamp(when, datetime.timezone.utc)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def _holder_record() -> bytes:
    ticks = start_ticks(os.getpid())
    body = {"pid": os.getpid(), "start_ticks": ticks, "started": _started_text(ticks)}
    return json.dumps(body).encode().ljust(HOLDER_BYTES - 1) + b"\n"


def is_lock_record(path: Path) -> bool:
    """True when ``path`` is a regular file holding an assay lock's holder record (a JSON
    object with an integer ``pid``, as :func:`acquire` writes it): a lock a killed writer left,
    not a user's file that happens to have the lock's name."""
    if path.is_symlink() or not path.is_file() or path.stat().st_size > HOLDER_BYTES:
        return False
    try:
        return _is_holder(path.read_bytes())
    except OSError:
        return False


def _is_holder(raw: bytes) -> bool:
    """True when ``raw`` is a holder record: a JSON object with an integer ``pid``."""
    try:
        holder = json.loads(raw)
    except ValueError:
        return False
    return isinstance(holder, dict) and type(holder.get("pid")) is int


def _holder_words(path: Path) -> str:
    """ "pid N, started T" from the lock file at ``path``, or words saying it is unknown."""
    try:
        with open(path, "rb") as handle:
            holder = json.loads(handle.read(HOLDER_BYTES))
        return f"pid {int(holder['pid'])}, started {holder['started']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "pid not yet recorded"


def _in_use(folder: Path, source: str) -> ConfigError:
    return ConfigError(
        f"{source}: output.dir: {folder} is in use by another assay process "
        f"({_holder_words(folder / LOCK_NAME)}); wait for it to end, or choose another output.dir"
    )


def refuse_if_held(folder: Path, source: str) -> None:
    """ConfigError naming the holder when another process holds ``folder``'s lock: said
    before any other complaint about the folder, since that process is why it looks busy."""
    if Path(folder).is_dir() and lock_held(folder):
        raise _in_use(Path(folder), source)


class RunLock:
    """The held lock of one run folder. ``folder`` follows the folder if it is renamed
    (:meth:`moved`); :meth:`release` removes the lock file, then the folders this lock
    created if they are still empty."""

    def __init__(self, folder: Path, fd: int, created: list[Path]) -> None:
        self.folder, self._fd, self._created = folder, fd, created

    @property
    def path(self) -> Path:
        return self.folder / LOCK_NAME

    def moved(self, folder: Path) -> None:
        """The locked folder was renamed to ``folder`` (the open lock file moved with it)."""
        self.folder = folder
        self._created = []  # a renamed folder is no longer one this lock may remove

    def release(self) -> None:
        """Remove the lock file (only if it is still ours), unlock, and remove the folders
        :func:`acquire` created that are still empty. Idempotent."""
        if self._fd < 0:
            return
        with contextlib.suppress(OSError):
            if os.path.samestat(os.fstat(self._fd), os.stat(self.path)):
                os.unlink(self.path)
        os.close(self._fd)  # closing drops the lock
        self._fd = -1
        for folder in self._created:  # deepest first
            with contextlib.suppress(OSError):
                folder.rmdir()  # only succeeds while empty


def _missing_ancestors(folder: Path) -> list[Path]:
    """``folder`` and its parents that do not exist yet, deepest first."""
    out = []
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            break
        out.append(candidate)
    return out


def _not_ours(path: Path, source: str, what: str) -> ConfigError:
    return ConfigError(
        f"{source}: output.dir: {path} {what}, not the lock file assay train writes; nothing "
        "was changed; move it away"
    )


def _open_lock(path: Path, source: str) -> int:
    """Open (creating) the lock file itself: never through a symlink, since writing the holder
    record through one would overwrite a file outside the run; ConfigError for a link, a folder,
    a pipe or a device standing at the lock's name."""
    try:
        fd = os.open(
            path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644
        )
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise _not_ours(path, source, "is a symlink") from None
        if err.errno in (errno.EISDIR, errno.ENXIO):
            raise _not_ours(path, source, "is not a regular file") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _not_ours(path, source, "is not a regular file")
    return fd


def _refuse_foreign_content(fd: int, path: Path, source: str) -> None:
    """Under the lock, before the holder record is written over it: the file is empty (just
    created, or created by a writer that has not yet written) or holds a holder record (one a
    killed writer left); anything else is a user's file with the lock's name, kept."""
    size = os.fstat(fd).st_size
    if size == 0:
        return
    if size <= HOLDER_BYTES and _is_holder(os.pread(fd, HOLDER_BYTES, 0)):
        return
    os.close(fd)
    raise _not_ours(path, source, "holds something else")


def acquire(folder: Path, source: str, *, retry_s: float = RETRY_S) -> RunLock:
    """Create ``folder`` if needed and hold its lock; ConfigError naming ``source``, the
    folder and the holder (pid, start time) when another process holds it."""
    folder = Path(folder)
    created = _missing_ancestors(folder)
    folder.mkdir(parents=True, exist_ok=True)
    import fcntl

    path = folder / LOCK_NAME
    deadline = time.monotonic() + retry_s
    while True:
        fd = _open_lock(path, source)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            if time.monotonic() < deadline:
                time.sleep(0.05)
                continue
            raise _in_use(folder, source) from None
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if not same:  # the holder removed the file between our open and our lock
            os.close(fd)
            continue
        _refuse_foreign_content(fd, path, source)
        os.pwrite(fd, _holder_record(), 0)
        os.ftruncate(fd, HOLDER_BYTES)
        return RunLock(folder, fd, created)


def lock_held(folder: Path) -> bool | None:
    """Whether a live process holds the lock of ``folder``: True or False, or None when the
    folder has no lock file (no writer since it was last released, or an older run) or what
    stands at its name is not one (a link is not followed, a pipe never waited on)."""
    import fcntl

    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(Path(folder) / LOCK_NAME, flags)
    except FileNotFoundError:
        return None
    except OSError as err:
        if err.errno == errno.ELOOP:
            return None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return True
        raise
    finally:
        os.close(fd)  # also drops the shared lock, if taken
    return False
