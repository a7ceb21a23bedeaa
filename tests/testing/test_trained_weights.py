"""Claims that need trained weights are not tested on the travelling stand-in, and the device a
claim reports is read from its tensors."""

from __future__ import annotations

import pytest
import torch

from assay_testing.placement import device_of
from assay_testing.trained_weights import TRAVELLING, needs_trained_weights


class _Gate:
    """The one method of the gate fixture the helper calls."""

    def __init__(self) -> None:
        self.recorded: list[tuple[str, str]] = []

    def not_tested(self, item: str, reason: str) -> None:
        self.recorded.append((item, reason))


def _gate() -> _Gate:
    return _Gate()


def test_real_weights_run_the_claim(monkeypatch):
    monkeypatch.delenv("ASSAY_SMOLLM2_GGUF", raising=False)
    gate = _gate()
    needs_trained_weights(gate, "sft.held_out_exact_match")  # returns: nothing skipped
    assert gate.recorded == []


def test_travelling_weights_skip_and_say_so(monkeypatch, tmp_path):
    stand_in = tmp_path / "travel.gguf"
    stand_in.write_bytes(b"GGUF")
    monkeypatch.setenv("ASSAY_SMOLLM2_GGUF", str(stand_in))
    gate = _gate()
    with pytest.raises(pytest.skip.Exception, match="travelling weights"):
        needs_trained_weights(gate, "a", "b")
    assert [item for item, _ in gate.recorded] == ["a", "b"]
    assert all(reason.startswith(TRAVELLING) for _, reason in gate.recorded)


def test_device_is_read_from_tensors_and_modules():
    assert device_of(torch.zeros(1)) == "cpu"
    assert device_of(torch.nn.Linear(2, 2)) == "cpu"
    assert device_of(torch.nn.Identity()) == "cpu"
    meta = torch.nn.Linear(2, 2, device="meta")
    assert device_of(meta) == "meta"
