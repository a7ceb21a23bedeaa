"""run_limited: a child over its cgroup limit is killed and said to be, one under it completes,
and its peak is its own (not an earlier, larger child's)."""

from __future__ import annotations

import sys

import pytest

from assay_testing.memory_limit import LimitUnavailable, run_limited

MIB = 1 << 20


def _allocating(mib: int) -> list[str]:
    return [
        sys.executable,
        "-c",
        f"x = bytearray({mib} << 20); x[::4096] = b'1' * len(x[::4096]); print('done')",
    ]


@pytest.fixture
def limited():
    def run(mib: int, limit_mib: int):
        try:
            return run_limited(_allocating(mib), limit_mib * MIB, timeout=120)
        except LimitUnavailable as why:
            pytest.skip(str(why))

    return run


def test_over_the_limit_is_killed_under_it_completes(limited):
    over = limited(400, 200)
    assert over.returncode != 0 and over.oom_killed and "done" not in over.stdout
    under = limited(60, 200)
    assert (under.returncode, under.oom_killed, under.stdout.strip()) == (0, False, "done")
    assert 60 * MIB <= under.max_rss_bytes < 200 * MIB  # its own peak, not the killed child's
