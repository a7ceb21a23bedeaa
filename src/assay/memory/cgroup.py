"""The memory limit a control group puts on this process, v1 or v2 (Linux; no torch).

A process in a memory cgroup is killed at the group's limit whatever ``MemAvailable`` says, so
a fit check on a host must read the tighter of the two. The limit that applies is the lowest
one on the way from this process's group up to the root. Page cache counts towards a group's
usage but the kernel reclaims it before killing, so it counts as free here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

UNLIMITED = 1 << 60  # v1 reports "no limit" as a page-rounded 2**63 - 1


@dataclass(frozen=True)
class GroupMemory:
    """The binding limit (bytes), what the group uses that cannot be reclaimed, and where."""

    limit: int
    used: int
    path: Path

    @property
    def free(self) -> int:
        return max(0, self.limit - self.used)


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None


def _stat(path: Path) -> dict[str, int]:
    found: dict[str, int] = {}
    try:
        lines = path.read_text("ascii", "replace").splitlines()
    except OSError:
        return found
    for line in lines:
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            found[key] = int(value)
    return found


def _groups(proc_cgroup: Path) -> tuple[str | None, str | None]:
    """(v1 memory group path, v2 group path) of this process, None where absent."""
    v1 = v2 = None
    try:
        lines = proc_cgroup.read_text("ascii", "replace").splitlines()
    except OSError:
        return None, None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if "memory" in controllers.split(","):
            v1 = path
        elif parts[0] == "0" and controllers == "":
            v2 = path
    return v1, v2


def _ancestors(base: Path, group: str) -> list[Path]:
    """``base/group`` and every folder above it up to ``base``, innermost first."""
    parts = [p for p in group.split("/") if p]
    return [base.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def group_memory(
    proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")
) -> GroupMemory | None:
    """The tightest memory limit over this process's cgroup and its ancestors, with that
    group's unreclaimable usage; None where no group sets one (or there are no cgroups)."""
    v1, v2 = _groups(proc_cgroup)
    best: GroupMemory | None = None
    if v1 is not None:
        for folder in _ancestors(root / "memory", v1):
            limit = _read_int(folder / "memory.limit_in_bytes")
            usage = _read_int(folder / "memory.usage_in_bytes")
            if limit is None or usage is None or limit >= UNLIMITED:
                continue
            stat = _stat(folder / "memory.stat")
            cache = stat.get("total_cache", stat.get("cache", 0))
            found = GroupMemory(limit, max(0, usage - cache), folder)
            best = found if best is None or found.free < best.free else best
    if v2 is not None:
        for folder in _ancestors(root, v2):
            limit = _read_int(folder / "memory.max")  # "max" (no limit) is not a number
            usage = _read_int(folder / "memory.current")
            if limit is None or usage is None:
                continue
            cache = _stat(folder / "memory.stat").get("file", 0)
            found = GroupMemory(limit, max(0, usage - cache), folder)
            best = found if best is None or found.free < best.free else best
    return best
