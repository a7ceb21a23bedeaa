"""Peak RSS of a step (assay_bench.rss): the high-water mark it reads moves with an allocation
made after the reset, and a failing child is reported with its stderr."""

from __future__ import annotations

import mmap
import subprocess

import pytest

from assay_bench import rss


def touched(nbytes: int) -> mmap.mmap:
    """Fresh anonymous pages, every one written: resident whatever malloc's heap holds."""
    pages = mmap.mmap(-1, nbytes)
    for offset in range(0, nbytes, mmap.PAGESIZE):
        pages[offset] = 1
    return pages


def test_the_reset_high_water_mark_sees_only_later_peaks():
    before = rss._status_bytes("VmRSS")
    touched(256 << 20).close()
    assert rss._status_bytes("VmHWM") >= before + (250 << 20)
    rss.CLEAR_REFS.write_text("5")
    after_reset = rss._status_bytes("VmHWM")
    assert after_reset < before + (128 << 20)  # the 256 MiB peak is forgotten
    again = touched(64 << 20)
    grown = rss._status_bytes("VmHWM")
    again.close()
    assert grown >= after_reset + (60 << 20)


def test_a_step_peak_counts_the_steps_own_allocation_only():
    touched(192 << 20).close()  # an earlier peak, forgotten at the reset
    loaded, peak = rss.step_peak(lambda: touched(64 << 20).close())
    assert 60 << 20 <= peak - loaded < 128 << 20
    loaded, peak = rss.step_peak(lambda: None)
    assert peak - loaded < 16 << 20


def test_a_missing_status_field_is_a_clear_error(monkeypatch, tmp_path):
    status = tmp_path / "status"
    status.write_text("Name:\tpython\n")
    monkeypatch.setattr(rss, "STATUS", status)
    with pytest.raises(RuntimeError, match="no VmHWM line"):
        rss._status_bytes("VmHWM")


@pytest.mark.parametrize(
    ("code", "stdout", "shown"),
    [(1, "", "exit 1"), (0, "", "exit 0"), (0, "not json\n", "'not json'")],
)
def test_a_failing_child_names_the_subject(monkeypatch, tmp_path, code, stdout, shown):
    def failed(argv, **kwargs):
        return subprocess.CompletedProcess(argv, code, stdout, "ValueError: unknown subject(s)")

    monkeypatch.setattr(rss.subprocess, "run", failed)
    with pytest.raises(RuntimeError, match="child for nobody failed") as raised:
        rss.in_subprocess("nobody", 8, tmp_path / "model.gguf")
    assert shown in str(raised.value) and "ValueError" in str(raised.value)
