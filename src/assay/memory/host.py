"""Host-memory accounting that sees pinned memory: RssAnon, RssFile and RssShmem.

Pinned (page-locked) host memory that CUDA hands out is mapped through the driver and counts
as ``RssShmem`` in ``/proc/<pid>/status``, not ``RssAnon`` where pageable ``malloc`` memory
lands. An accounting that reads only RssAnon (or VmRSS minus file pages) therefore misses a
pinned arena. ``arena_delta`` allocates an arena, touches every page and returns how much each
counter grew, so a gate can say which counters carry which kind of memory on this box.
"""

from __future__ import annotations

import gc
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

FIELDS = ("RssAnon", "RssFile", "RssShmem", "VmRSS")


def rss_breakdown(status: Path = Path("/proc/self/status")) -> dict[str, int]:
    """Bytes of each of ``FIELDS`` from a ``/proc/<pid>/status`` file (0 if a field is absent)."""
    found = dict.fromkeys(FIELDS, 0)
    for line in status.read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in found:
            found[key] = int(rest.split()[0]) * 1024  # the file states kB
    return found


@dataclass(frozen=True)
class ArenaDelta:
    """Growth of each host counter while one arena of ``nbytes`` was alive (bytes)."""

    nbytes: int
    pinned: bool
    anon: int
    shmem: int
    file: int

    @property
    def anon_plus_shmem_ratio(self) -> float:
        """(RssAnon + RssShmem growth) / arena bytes: about 1 when both kinds are counted."""
        return (self.anon + self.shmem) / self.nbytes

    @property
    def anon_only_ratio(self) -> float:
        """RssAnon growth / arena bytes: what an accounting blind to pinned memory sees."""
        return self.anon / self.nbytes

    def to_dict(self) -> dict[str, object]:
        return {
            **asdict(self),
            "anon_plus_shmem_ratio": self.anon_plus_shmem_ratio,
            "anon_only_ratio": self.anon_only_ratio,
        }


def arena_delta(nbytes: int, *, pinned: bool) -> ArenaDelta:
    """Allocate a uint8 host arena (pinned needs CUDA), write every page, and measure.

    Guarantees: the arena is alive and fully written when the "after" counters are read, and
    released before returning. Pinned allocation raises RuntimeError where CUDA is absent.
    """
    gc.collect()
    before = rss_breakdown()
    arena = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
    arena.fill_(1)  # touch every page so it is resident
    after = rss_breakdown()
    del arena
    gc.collect()
    return ArenaDelta(
        nbytes=nbytes,
        pinned=pinned,
        anon=after["RssAnon"] - before["RssAnon"],
        shmem=after["RssShmem"] - before["RssShmem"],
        file=after["RssFile"] - before["RssFile"],
    )
