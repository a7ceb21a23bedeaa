"""``assay status``: the state a run directory's files say, including a run whose process died."""

from __future__ import annotations

import json

import pytest

from assay.cli import main
from assay.train.run.state import RUN_STATE


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
        "stopped",
        "stop_at",
        2,
        6,
    )
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
        ("metrics.jsonl", b'{"step": 1, "loss": 1' + b"0" * 400 + b"}\n", "metrics.jsonl:1: loss:"),
        ("metrics.jsonl", b'{"step": 1, "seconds": -100}\n', "metrics.jsonl:1: seconds: expected"),
        ("metrics.jsonl", b'{"step": 100000000000000000000000000000}\n', "metrics.jsonl:1: step:"),
        ("metrics.jsonl", b'{"step": 1}\ngarbage\n{"step": 2}\n', "metrics.jsonl:2: not a JSON"),
        ("metrics.jsonl", b'{"step": 1}\n\x00\x00\x00\n{"step": 2}\n', "metrics.jsonl:2: not"),
        ("metrics.jsonl", b'{"step": 1}\n[1]\n', "metrics.jsonl:2: expected a JSON object"),
        ("config.yaml", b"steps: four\n", "config.yaml: steps: expected a whole number"),
        ("metrics.jsonl", b'{"step": 2}\n{"step": 1}\n', "metrics.jsonl:2: step 1 after"),
        ("run-state.json", b'{"state": "stopped", "step": 2.5}', "run-state.json: step: expected"),
        ("run-state.json", b'{"state": "stopped", "steps": [1, 2]}', "run-state.json: steps: exp"),
        ("config.yaml", b"steps: -5\n", "config.yaml: steps: expected a whole number"),
        ("config.yaml", b"steps: true\n", "config.yaml: steps: expected a whole number"),
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
    line = json.dumps(
        {"step": 3, "loss": 1.5, "seconds": 0.5, "note": "a\u2028b"}, ensure_ascii=False
    )
    (run / "metrics.jsonl").write_text(line + "\n", "utf-8")
    status = _status(capsys, run)
    assert (status["step"], status["loss"]) == (3, 1.5)


def _run_folder(root):
    run = root / "run"
    (run / "step-000001").mkdir(parents=True)
    (run / "config.yaml").write_text("steps: 4\n")
    (run / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0, "seconds": 0.5}\n')
    (run / "latest").write_text("step-000001\n")
    (run / RUN_STATE).write_text(json.dumps({"state": "stopped", "reason": "stop_at"}))
    return run


@pytest.mark.parametrize("file", ["config.yaml", RUN_STATE, "metrics.jsonl", "latest"])
@pytest.mark.parametrize("kind", ["folder", "fifo", "dangling link"])
def test_a_run_file_that_is_not_a_file_is_one_line_never_taken_as_absent(
    tmp_path, capsys, file, kind
):
    """Rule: each run file is absent or a regular file; anything else (which a reader could
    block on, or mistake for "no metrics yet") is one line naming it, and nothing hangs."""
    import os
    import signal

    run = _run_folder(tmp_path)
    assert _status(capsys, run)["state"] == "stopped"  # the control: the same folder reads
    (run / file).unlink()
    if kind == "folder":
        (run / file).mkdir()
    elif kind == "fifo":
        os.mkfifo(run / file)
    else:
        (run / file).symlink_to(tmp_path / "nowhere")

    def hung(*_):
        raise TimeoutError(f"assay status blocked on {file}")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)  # a blocking open of the FIFO would hang the test, not pass it
    try:
        assert main(["status", str(run)]) == 2
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(run / file) in err, err


@pytest.mark.parametrize(
    ("state", "field"),
    [
        ({"pid": "123"}, "pid"),
        ({"pid": True}, "pid"),
        ({"pid": -4}, "pid"),
        ({"pid": 12, "start_ticks": 1.5}, "start_ticks"),
        ({"pid": 12, "start_ticks": "9"}, "start_ticks"),
    ],
)
def test_run_state_fields_the_liveness_test_reads_are_checked(tmp_path, capsys, state, field):
    run = _run_folder(tmp_path)
    (run / RUN_STATE).write_text(json.dumps({"state": "running", **state}))
    assert main(["status", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{RUN_STATE}: {field}: expected a whole number" in err, err


def test_a_running_state_with_no_pid_is_failed_not_gone(tmp_path, capsys):
    run = _run_folder(tmp_path)
    (run / RUN_STATE).write_text(json.dumps({"state": "running", "start_ticks": None}))
    status = _status(capsys, run)
    assert status["state"] == "failed" and "no process id" in status["reason"]


def test_latest_naming_a_missing_checkpoint_is_one_line(tmp_path, capsys):
    run = _run_folder(tmp_path)
    assert _status(capsys, run)["checkpoint"] == str(run / "step-000001")
    (run / "step-000001").rmdir()
    assert main(["status", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "names step-000001, which is not a folder" in err, err


def test_a_lock_file_that_is_a_fifo_is_one_line_not_a_hang(tmp_path, capsys):
    import os

    from assay.train.run.lock import LOCK_NAME

    run = _run_folder(tmp_path)
    (run / RUN_STATE).write_text(json.dumps({"state": "running", "pid": 2**22 + 7}))
    assert _status(capsys, run)["state"] == "failed"  # the control: no lock file at all
    os.mkfifo(run / LOCK_NAME)
    assert main(["status", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{LOCK_NAME}: not a regular file" in err, err


def test_a_torn_last_metrics_line_is_skipped_and_a_long_line_refused(tmp_path, capsys, monkeypatch):
    run = _run_folder(tmp_path)
    (run / "metrics.jsonl").write_bytes(b'{"step": 1, "seconds": 0.5}\n{"step": 2, "sec')
    assert _status(capsys, run)["step"] == 1  # a crash's torn write: resume drops it too
    monkeypatch.setattr("assay.bounded.JSONL_LINE_BYTES", 64)
    (run / "metrics.jsonl").write_bytes(b"\x00" * 1000)  # a sparse file: one endless line
    assert main(["status", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "metrics.jsonl:1: line over 64 bytes" in err, err


def test_finished_with_steps_left_says_the_files_disagree(tmp_path, capsys):
    run = _run_folder(tmp_path)
    (run / RUN_STATE).write_text(json.dumps({"state": "finished"}))
    status = _status(capsys, run)
    assert status["state"] == "finished" and "ends at step 1 of 4" in status["reason"]


def test_a_failure_with_a_multi_line_message_is_one_line_in_the_state():
    from assay.train.run.state import failure_line

    error = RuntimeError("first line of torch's text\n\nSet TORCHDYNAMO_VERBOSE=1 for more\n")
    assert failure_line(error) == "RuntimeError: first line of torch's text"
    assert failure_line(ValueError()) == "ValueError"
    assert len(failure_line(OSError("x" * 1000))) == 300
