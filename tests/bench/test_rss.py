"""Peak RSS of a step (assay_bench.rss): it counts an allocation made after the reset and not
an earlier peak, and a failing child is reported with its stderr."""

from __future__ import annotations

import mmap
import subprocess

import pytest

from assay.memory.measure import status_kib
from assay_bench import rss


def touched(nbytes: int) -> mmap.mmap:
    """Fresh anonymous pages, every one written: resident whatever malloc's heap holds."""
    pages = mmap.mmap(-1, nbytes)
    for offset in range(0, nbytes, mmap.PAGESIZE):
        pages[offset] = 1
    return pages


def test_a_step_peak_counts_the_steps_own_allocation_only():
    before = status_kib("VmRSS") << 10
    touched(256 << 20).close()  # an earlier peak, forgotten at the reset
    assert status_kib("VmHWM") << 10 >= before + (250 << 20)
    loaded, step = rss.step_peak(lambda: touched(64 << 20).close())
    assert loaded < before + (128 << 20)
    assert 60 << 20 <= step < 128 << 20
    _, step = rss.step_peak(lambda: None)
    assert step < 16 << 20


@pytest.mark.parametrize(
    ("code", "stdout", "shown"),
    [(1, "", "exit 1"), (0, "", "exit 0"), (0, "not json\n", "'not json'")],
)
def test_a_failing_child_names_the_subject(monkeypatch, tmp_path, code, stdout, shown):
    def failed(argv, **kwargs):
        return subprocess.CompletedProcess(argv, code, stdout, "ValueError: unknown subject(s)")

    monkeypatch.setattr("assay_bench.child.subprocess.run", failed)
    with pytest.raises(RuntimeError, match="child for nobody failed") as raised:
        rss.in_subprocess("nobody", 8, tmp_path / "model.gguf")
    assert shown in str(raised.value) and "ValueError" in str(raised.value)
