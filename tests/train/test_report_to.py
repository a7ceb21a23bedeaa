"""``--report-to tensorboard``: event files that hold the same numbers as metrics.jsonl, and one
line saying how to install the package when it is missing."""

from __future__ import annotations

import json

import pytest

from assay.cli import main


def test_tensorboard_events_mirror_the_metrics_lines(tmp_path, tiny_lora_config):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    config = tiny_lora_config(steps=3)
    assert main(["train", str(config), "--no-progress", "--report-to", "tensorboard"]) == 0
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    events.Reload()
    for name in ("loss", "lr", "grad_norm", "tokens_per_s"):
        logged = [(e.step, e.value) for e in events.Scalars(f"train/{name}")]
        assert logged == [(r["step"], pytest.approx(r[name], rel=1e-6)) for r in lines], name


def test_a_missing_tensorboard_is_one_line_before_anything_loads(
    tmp_path, capsys, monkeypatch, tiny_lora_config
):
    import importlib.util

    config = tiny_lora_config(steps=3)
    capsys.readouterr()  # the model writer's own progress output
    real = importlib.util.find_spec

    def no_tensorboard(name, *rest):
        return None if name == "tensorboard" else real(name, *rest)

    monkeypatch.setattr(importlib.util, "find_spec", no_tensorboard)
    assert main(["train", str(config), "--report-to", "tensorboard"]) == 2
    assert capsys.readouterr().err == (
        "assay: error: --report-to tensorboard needs the tensorboard package: pip install "
        "tensorboard (or the assay[tensorboard] extra)\n"
    )
    assert not (tmp_path / "run").exists()
