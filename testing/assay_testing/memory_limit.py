"""Run a command inside a memory cgroup with a hard limit, and say how it ended.

The kernel kills a process of the group that needs more than the limit (page cache is
reclaimed first), so "it completed" under the limit means the run fits, whatever the host has.
cgroup v1's memory controller (``/sys/fs/cgroup/memory``) and cgroup v2 (``memory.max``) are
both handled; creating a group needs root. The child joins the group before it executes, so
everything it allocates is charged. Swap is limited too where the kernel offers it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path("/sys/fs/cgroup")
# A child's ru_maxrss counts the resident set it had when it was forked, before it executed:
# the parent's. So a small launcher (stdlib only, no site) forks the command and reports the
# command's own peak from wait4, then ends as the command ended (same code, same signal).
_LAUNCHER = """
import os, signal, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as out:
    out.write(f"{usage.ru_maxrss} {usage.ru_majflt}")
if os.WIFSIGNALED(status):
    signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
    os.kill(os.getpid(), os.WTERMSIG(status))
sys.exit(os.WEXITSTATUS(status))
"""


class LimitUnavailable(RuntimeError):
    """No memory cgroup can be made here (no controller, or not root)."""


@dataclass(frozen=True)
class LimitedRun:
    """How a command ended under a memory limit."""

    limit_bytes: int
    returncode: int
    oom_killed: bool
    max_rss_bytes: int
    major_faults: int  # pages read from disk on a fault: weights paged in from a mapped file
    wall_s: float
    stdout: str
    stderr: str
    controller: str

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["stdout"], out["stderr"] = self.stdout[-2000:], self.stderr[-2000:]
        return out


def _group_folder() -> tuple[Path, str]:
    v1 = ROOT / "memory"
    if (v1 / "memory.limit_in_bytes").exists():
        return v1 / f"assay-limit-{uuid.uuid4().hex[:12]}", "cgroup v1"
    if (ROOT / "cgroup.controllers").exists() and "memory" in (
        ROOT / "cgroup.controllers"
    ).read_text().split():
        return ROOT / f"assay-limit-{uuid.uuid4().hex[:12]}", "cgroup v2"
    raise LimitUnavailable(f"no memory cgroup controller under {ROOT}")


def _oom_kills(folder: Path, controller: str) -> int:
    name = "memory.oom_control" if controller == "cgroup v1" else "memory.events"
    with contextlib.suppress(OSError):
        for line in (folder / name).read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
    return 0


def _kill_all(procs: Path) -> None:
    """SIGKILL every process of the group (``cgroup.procs``)."""
    with contextlib.suppress(OSError):
        for pid in procs.read_text().split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)


def run_limited(
    argv: list[str],
    limit_bytes: int,
    *,
    env: dict[str, str] | None = None,
    timeout: float = 3600,
    cwd: Path | None = None,
) -> LimitedRun:
    """``argv`` run to the end inside a fresh memory cgroup of ``limit_bytes``; the group is
    removed afterwards. LimitUnavailable where no group can be made."""
    folder, controller = _group_folder()
    try:
        folder.mkdir()
    except OSError as error:
        raise LimitUnavailable(f"cannot create {folder}: {error.strerror}") from None
    try:
        try:
            if controller == "cgroup v1":
                (folder / "memory.limit_in_bytes").write_text(str(limit_bytes))
                with contextlib.suppress(OSError):  # absent without swap accounting
                    (folder / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))
            else:
                (folder / "memory.max").write_text(str(limit_bytes))
                with contextlib.suppress(OSError):
                    (folder / "memory.swap.max").write_text("0")
        except OSError as error:
            raise LimitUnavailable(f"cannot set a limit on {folder}: {error.strerror}") from None
        procs = folder / "cgroup.procs"

        def join() -> None:  # in the child, before exec: all it allocates is charged
            procs.write_text(str(os.getpid()))

        handle, name = tempfile.mkstemp(prefix="assay-maxrss-")
        os.close(handle)
        peak_file = Path(name)
        started = time.perf_counter()
        try:
            launcher = subprocess.Popen(
                [sys.executable, "-S", "-c", _LAUNCHER, str(peak_file), *argv],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, **(env or {})},
                cwd=cwd,
                preexec_fn=join,
            )
        except subprocess.SubprocessError as error:  # the child could not join the group
            peak_file.unlink(missing_ok=True)
            raise LimitUnavailable(f"cannot move a process into {folder}: {error}") from None
        try:
            stdout, stderr = launcher.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:  # kill the whole group, the command included
            _kill_all(procs)
            stdout, stderr = launcher.communicate()
        done = subprocess.CompletedProcess(argv, launcher.returncode, stdout, stderr)
        wall = time.perf_counter() - started
        try:
            kib, faults = (int(n) for n in peak_file.read_text().split())
            max_rss = kib * 1024  # Linux reports KiB
        except (OSError, ValueError):
            max_rss = faults = 0  # the launcher was killed too: nothing to report
        finally:
            peak_file.unlink(missing_ok=True)
        return LimitedRun(
            limit_bytes=limit_bytes,
            returncode=done.returncode,
            oom_killed=_oom_kills(folder, controller) > 0,
            max_rss_bytes=max_rss,
            major_faults=faults,
            wall_s=wall,
            stdout=done.stdout,
            stderr=done.stderr,
            controller=controller,
        )
    finally:
        with contextlib.suppress(OSError):
            folder.rmdir()
