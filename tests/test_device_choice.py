"""``--device auto`` (the default of train and eval): CUDA when this torch sees it, else the
CPU; the choice is in the progress bar and the summary and recorded with the run, and a resumed
run keeps its device where it still exists or says it changed."""

from __future__ import annotations

import argparse
import json

import pytest
import torch

from assay.cli import main
from assay.cli.dispatch import resolve_device
from assay.train.loop import recorded_device


@pytest.fixture
def cuda_seen(monkeypatch):
    """Fake the presence (or absence) of CUDA: ``cuda_seen(True)``."""

    def fake(present: bool) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: present)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 1 if present else 0)

    return fake


def test_auto_is_cuda_when_torch_sees_it_else_the_cpu(cuda_seen):
    cuda_seen(True)
    assert resolve_device("auto") == ("cuda", "auto: CUDA is available")
    assert resolve_device("cpu") == ("cpu", "--device")  # the control: asked for, kept
    assert resolve_device("auto", used_before="cpu")[0] == "cpu"  # a resumed CPU run stays
    cuda_seen(False)
    assert resolve_device("auto") == ("cpu", "auto: no CUDA device")
    assert resolve_device("auto", used_before="cuda") == ("cpu", "auto: no CUDA device")


def test_a_cpu_run_says_and_records_its_device(tiny_lora_config, capsys, cuda_seen):
    cuda_seen(False)
    config = tiny_lora_config(steps=2)
    assert main(["train", str(config), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "trained 2 steps (to step 2) on cpu (auto: no CUDA device): final loss" in out
    run = config.parent / "run"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["device"] for row in rows] == ["cpu", "cpu"]
    assert "# trained on device cpu" in (run / "config.yaml").read_text()
    assert recorded_device(run) == "cpu"


def test_a_resumed_run_says_when_its_device_changed(tmp_path, capsys, cuda_seen, monkeypatch):
    """The steps before ran on CUDA, which is gone now: auto falls back to the CPU and says so;
    the control: with CUDA present, auto keeps the run's device and says nothing changed."""
    import assay.cli.train as train_cli

    monkeypatch.setattr("assay.train.loop.recorded_device", lambda run: "cuda")
    args = argparse.Namespace(device="auto", resume=tmp_path, json=False)
    cuda_seen(False)
    train_cli._choose_device(args)
    assert args.device == "cpu"
    assert args.device_choice == "cpu (auto: no CUDA device); the steps before ran on cuda"
    cuda_seen(True)
    args = argparse.Namespace(device="auto", resume=tmp_path, json=False)
    train_cli._choose_device(args)
    assert args.device == "cuda"
    assert args.device_choice == "cuda (auto: the device the run used before)"
    assert capsys.readouterr().err == ""  # said in the summary, never before an error


def test_the_recorded_device_is_the_newest_rows_and_none_before_it_was_recorded(tmp_path):
    assert recorded_device(tmp_path) is None  # no metrics
    rows = [{"step": 1}, {"step": 2, "device": "cuda"}, {"step": 3, "device": "cpu"}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert recorded_device(tmp_path) == "cpu"
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1}) + "\n{torn")
    assert recorded_device(tmp_path) is None  # rows from before the field existed
