"""``assay status``: the state a run directory's files say, including a run whose process died."""

from __future__ import annotations

import json

import pytest

from assay.cli import main
from assay.train.run_state import RUN_STATE


def _status(capsys, run):
    assert main(["status", str(run), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_status_follows_a_run_from_stopped_to_finished_and_spots_a_dead_process(
    tmp_path, capsys, tiny_lora_config
):
    config, run = tiny_lora_config(), tmp_path / "run"
    assert main(["train", str(config), "--no-progress", "--stop-at", "2"]) == 0
    capsys.readouterr()
    status = _status(capsys, run)
    assert (status["state"], status["reason"], status["step"], status["steps"]) == (
        "stopped", "stop_at", 2, 6
    )  # fmt: skip
    assert status["checkpoint"] == str(run / "step-000002") and status["loss"] > 0
    assert status["tokens_per_s"] > 0 and status["eta_s"] is None
    assert main(["train", str(config), "--no-progress", "--resume", str(run)]) == 0
    capsys.readouterr()
    assert _status(capsys, run)["state"] == "finished"
    state = json.loads((run / RUN_STATE).read_text())
    (run / RUN_STATE).write_text(json.dumps({**state, "state": "running", "pid": 2**22 + 7}))
    status = _status(capsys, run)  # no such process: it was killed or crashed
    assert status["state"] == "failed" and "is gone" in status["reason"]
    assert main(["status", str(run)]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"{run}: failed (process {2**22 + 7} is gone") and "eta -" in text


def test_status_of_a_folder_that_is_not_a_run_is_one_line(tmp_path, capsys):
    assert main(["status", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"assay: error: {tmp_path}: not a run directory (no config.yaml)\n"
    )


@pytest.mark.parametrize(
    ("file", "body", "where"),
    [
        ("run-state.json", b"[]", "run-state.json: expected a JSON object, got list"),
        ("run-state.json", b'{"state": 3}', "run-state.json: state: expected one of"),
        ("metrics.jsonl", b'{"step": 1, "seconds": "0.5"}\n', "metrics.jsonl:1: seconds:"),
        ("metrics.jsonl", b'{"step": 1, "seconds": Infinity}\n', "metrics.jsonl:1: seconds:"),
        ("metrics.jsonl", b'{"step": 1}\n{"step": "2"}\n', "metrics.jsonl:2: step:"),
        ("latest", b"\xff\xfestep", "latest: not UTF-8 text"),
        ("latest", b"../../etc", "latest: '../../etc' is not a checkpoint name"),
    ],
)
def test_a_malformed_run_file_is_one_line_naming_it(tmp_path, capsys, file, body, where):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("steps: 4\n")
    (run / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0, "seconds": 0.5}\n')
    (run / file).write_bytes(body)
    assert main(["status", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and where in err and str(run / file) in err, err


def test_a_metrics_line_split_by_a_line_separator_still_counts(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("steps: 4\n")
    line = json.dumps({"step": 3, "loss": 1.5, "seconds": 0.5, "note": "a\u2028b"},
                      ensure_ascii=False)  # fmt: skip
    (run / "metrics.jsonl").write_text(line + "\n", "utf-8")
    status = _status(capsys, run)
    assert (status["step"], status["loss"]) == (3, 1.5)
