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


def _forbid_loading(monkeypatch) -> None:
    """Fail the test if the model and data start loading."""
    from assay.train.loop import Trainer

    def refuse(*args, **kwargs):
        raise AssertionError("the model and data loaded before the refusal")

    monkeypatch.setattr(Trainer, "__init__", refuse)


def test_an_events_folder_that_cannot_be_written_is_refused_before_loading(
    tmp_path, capsys, monkeypatch, tiny_lora_config
):
    pytest.importorskip("tensorboard")
    config, run = tiny_lora_config(steps=3), tmp_path / "run"
    assert main(["train", str(config), "--no-progress", "--stop-at", "1"]) == 0
    (run / "tensorboard").write_text("a file where the events folder goes")
    before = sorted(run.rglob("*"))
    _forbid_loading(monkeypatch)
    capsys.readouterr()
    argv = ["train", str(config), "--no-progress", "--report-to", "tensorboard", "--resume"]
    assert main([*argv, str(run)]) == 2
    # refused by the resume's own check (a name train writes holding something else), which
    # runs first and names the same path and the same fault
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{run / 'tensorboard'} exists and is not a folder" in err
    assert sorted(run.rglob("*")) == before


def test_a_tensorboard_that_does_not_import_is_refused_before_loading(
    tmp_path, capsys, monkeypatch, tiny_lora_config
):
    import sys

    pytest.importorskip("tensorboard")
    config = tiny_lora_config(steps=3)
    _forbid_loading(monkeypatch)
    capsys.readouterr()
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails
    assert main(["train", str(config), "--report-to", "tensorboard"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "installed but does not import (ModuleNotFoundError" in err
    assert not (tmp_path / "run").exists()


def test_a_full_disk_under_the_writer_thread_ends_the_run_on_one_line_after_a_checkpoint(
    tmp_path, capsys, monkeypatch, tiny_lora_config
):
    import errno

    pytest.importorskip("tensorboard")
    from tensorboard.summary.writer import record_writer

    config = tiny_lora_config(steps=4)
    real, records = record_writer.RecordWriter.write, []

    def full_after_the_first_records(self, data):
        records.append(len(data))
        if len(records) > 6:  # the file header and step 1's scalars fit; step 2's do not
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, data)

    monkeypatch.setattr(record_writer.RecordWriter, "write", full_after_the_first_records)
    capsys.readouterr()
    assert main(["train", str(config), "--no-progress", "--report-to", "tensorboard"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "Exception in thread" not in err
    run = tmp_path / "run"
    assert f"{run / 'tensorboard'}: cannot write event files (No space left on device)" in err
    step = int(err.split("stopped after step ")[1].split(" ")[0])
    assert (run / "latest").read_text().strip() == f"step-{step:06d}"
    monkeypatch.undo()
    assert main(["train", str(config), "--no-progress", "--resume", str(run)]) == 0
