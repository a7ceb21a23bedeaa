"""Host accounting: /proc status fields parsed, a pageable arena counted in RssAnon."""

from __future__ import annotations

from pathlib import Path

import pytest

from assay.memory.host import arena_delta, rss_breakdown


def test_status_fields_are_read_in_bytes(tmp_path: Path):
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nVmRSS:\t  300 kB\nRssAnon:\t  200 kB\nRssShmem:\t 64 kB\n")
    assert rss_breakdown(status) == {
        "RssAnon": 200 * 1024,
        "RssFile": 0,
        "RssShmem": 64 * 1024,
        "VmRSS": 300 * 1024,
    }


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_pageable_arena_lands_in_rss_anon():
    delta = arena_delta(64 << 20, pinned=False)
    assert delta.anon_only_ratio > 0.9
    assert delta.anon_plus_shmem_ratio >= delta.anon_only_ratio
