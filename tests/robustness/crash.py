"""Crash-safety harness: kill -9 a writer at random fsync/rename events, and inject write
faults (a read-only directory, a full disk); after each, check the last good state."""

from __future__ import annotations

import builtins
import contextlib
import errno
import os
import random
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import robust_state as state

CHILD = Path(__file__).with_name("kill_child.py")
# The highest event index to pause at, per mode: a few saves' worth of fsync/rename events.
EVENTS = {"checkpoint": 50, "receipt": 30, "naive": 30}
SEED = {"checkpoint": state.write_checkpoint, "naive": state.naive_write}
READ = {
    "checkpoint": state.checkpoint_step,
    "receipt": state.receipts_step,
    "naive": state.naive_step,
}


@dataclass
class KillReport:
    """Kills performed and how many left the last good state unreadable or older."""

    mode: str
    kills: int = 0
    lost: int = 0
    steps: list[int] = field(default_factory=list)


def _seed(mode: str, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    if mode == "receipt":
        from assay.atomic import atomic_write_json
        from assay.qualify.ledger.receipt import write_atomic

        write_atomic(directory / "r000000.json", state.receipt_bytes(0), overwrite=False)
        atomic_write_json(directory / "index.json", {"count": 0})
    else:
        SEED[mode](directory if mode == "checkpoint" else directory / "state.json", 0)


def kill_trials(mode: str, directory: Path, kills: int, seed: int) -> KillReport:
    """Chain ``kills`` child writers, each killed -9 at a random event; check after each."""
    _seed(mode, directory)
    rng = random.Random(seed)
    report = KillReport(mode)
    last_good = 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(CHILD.parent), *sys.path])}
    for _ in range(kills):
        kill_at = rng.randint(1, EVENTS[mode])
        process = subprocess.Popen(
            [sys.executable, str(CHILD), mode, str(directory), str(last_good + 1), str(kill_at)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("PAUSE"):
                break
        process.kill()
        process.wait()
        report.kills += 1
        try:
            step = READ[mode](directory)
        except Exception:
            report.lost += 1
            report.steps.append(-1)
            continue
        if step < last_good:
            report.lost += 1
        last_good = max(last_good, step)
        report.steps.append(step)
    return report


class _FullDisk:
    """A file whose writes store half their bytes, then fail with ENOSPC."""

    def __init__(self, handle) -> None:
        self._handle = handle

    def write(self, data: bytes) -> int:
        self._handle.write(data[: len(data) // 2])
        self._handle.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __enter__(self) -> _FullDisk:
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.close()

    def __getattr__(self, name: str):
        return getattr(self._handle, name)


@contextlib.contextmanager
def full_disk() -> Iterator[None]:
    """Every file opened for writing fails mid-write with ENOSPC, whether it is written through
    a file object or through raw ``os.write`` (as ``assay.atomic.write_all`` does)."""
    real_open, real_fdopen, real_write = builtins.open, os.fdopen, os.write

    def raw_write(fd: int, data) -> int:
        if fd <= 2:  # the test's own stdout and stderr
            return real_write(fd, data)
        real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def opener(real: Callable):
        def inner(*args, **kwargs):
            handle = real(*args, **kwargs)
            mode = args[1] if len(args) > 1 else kwargs.get("mode", "r")
            return _FullDisk(handle) if any(c in mode for c in "wax+") else handle

        return inner

    with (
        mock.patch("builtins.open", opener(real_open)),
        mock.patch("os.fdopen", opener(real_fdopen)),
        mock.patch("os.write", raw_write),
    ):
        yield


@contextlib.contextmanager
def read_only(directory: Path) -> Iterator[None]:
    """``directory`` refuses new entries (EROFS): chmod where that binds (not root), plus a
    fault-injected os.open/os.mkdir/open that refuses writes under it (root ignores modes)."""
    root = str(directory.resolve())
    real_os_open, real_mkdir, real_open = os.open, os.mkdir, builtins.open

    def under(path: object) -> bool:
        return str(Path(os.fspath(path)).resolve()).startswith(root)

    def refuse(path: object) -> OSError:
        return OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))

    def os_open(path, flags, *args, **kwargs):
        if under(path) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise refuse(path)
        return real_os_open(path, flags, *args, **kwargs)

    def mkdir(path, *args, **kwargs):
        if under(path):
            raise refuse(path)
        return real_mkdir(path, *args, **kwargs)

    def open_(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and under(file) and any(c in mode for c in "wax+"):
            raise refuse(file)
        return real_open(file, mode, *args, **kwargs)

    old_mode = directory.stat().st_mode
    directory.chmod(0o555)
    try:
        with (
            mock.patch("os.open", os_open),
            mock.patch("os.mkdir", mkdir),
            mock.patch("builtins.open", open_),
        ):
            yield
    finally:
        directory.chmod(old_mode)


def fault_trials(root: Path, writers: dict[str, Callable[[Path, int], object]]) -> dict[str, int]:
    """For each writer and each fault: seed step 1, attempt step 2 under the fault, expect an
    OSError and step 1 still readable. Returns {"<writer>/<fault>": 1 if state was lost}."""
    out = {}
    for name, write in writers.items():
        for fault in ("read_only", "full_disk"):
            directory = root / f"{name}-{fault}"
            directory.mkdir(parents=True)
            write(directory, 1)
            context = read_only(directory) if fault == "read_only" else full_disk()
            refused = False
            with context:
                try:
                    write(directory, 2)
                except OSError:
                    refused = True
            try:
                kept = _read_back(name, directory) == 1
            except Exception:
                kept = False
            out[f"{name}/{fault}"] = int(not (refused and kept))
    return out


def _read_back(name: str, directory: Path) -> int:
    if name == "checkpoint":
        return state.checkpoint_step(directory)
    if name == "receipt":
        return state.receipts_step(directory)
    return state.naive_step(directory)


def write_receipt_state(directory: Path, step: int) -> None:
    """A receipt write and its index, as the receipt mode of the kill child does it."""
    from assay.atomic import atomic_write_json
    from assay.qualify.ledger.receipt import write_atomic

    write_atomic(directory / f"r{step:06d}.json", state.receipt_bytes(step), overwrite=False)
    atomic_write_json(directory / "index.json", {"count": step})


def naive_state(directory: Path, step: int) -> None:
    state.naive_write(directory / "state.json", step)


WRITERS = {
    "checkpoint": state.write_checkpoint,
    "receipt": write_receipt_state,
}
