"""One writer per run folder: a second ``assay train`` into a folder another process is
writing exits 2 naming the holder's pid and start time, with real concurrent processes; a
refusal writes nothing; ``assay status`` tests the lock and the pid's start time, never a bare
pid."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from assay.cli import main
from assay.errors import ConfigError
from assay.train.run.lock import LOCK_NAME, acquire, lock_held, same_process, start_ticks
from assay.train.run.state import RUN_STATE

CHILD = Path(__file__).with_name("_paused_train_child.py")


def _config(tmp_path: Path, name: str, lr: float) -> Path:
    from assay_testing.text_run import save_text_run

    keys = save_text_run(tmp_path / "ws", seed=0)
    body = {
        **keys,
        "adapter": {"rank": 2, "targets": ["q_proj"]},
        "steps": 4,
        "seed": 1,
        "optim": {"lr": lr},
        "output": {"dir": str(tmp_path / "run"), "save_every": 2},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def _wait_for(path: Path, process: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_a_second_writer_is_refused_naming_the_first_while_it_trains(tmp_path, capsys):
    first, second = _config(tmp_path, "first", 1e-3), _config(tmp_path, "second", 2e-3)
    gate = tmp_path / "gate"
    gate.mkdir()
    holder = subprocess.Popen(
        [sys.executable, str(CHILD), str(gate), "train", str(first), "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    run = tmp_path / "run"
    try:
        _wait_for(gate / "holding", holder)  # trained step 1, now inside its first save
        capsys.readouterr()
        for argv in (
            ["train", str(second), "--no-progress"],
            ["train", str(second), "--no-progress", "--overwrite"],
            ["train", str(first), "--no-progress", "--resume", str(run)],
        ):
            assert main(argv) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1, err
            assert f"{run} is in use by another assay process (pid {holder.pid}, started " in err
        assert main(["status", str(run), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["state"] == "running"
    finally:
        (gate / "release").write_text("1")
        _, err = holder.communicate(timeout=300)
    assert holder.returncode == 0, err
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().split("\n") if x]
    assert [r["step"] for r in lines] == [1, 2, 3, 4]
    assert {r["lr"] for r in lines} == {1e-3}
    assert yaml.safe_load((run / "config.yaml").read_text())["optim"]["lr"] == 1e-3
    assert not (run / LOCK_NAME).exists()  # released: a finished run keeps no lock file


@pytest.mark.slow
def test_two_runs_started_together_into_one_folder_exactly_one_trains(tmp_path):
    configs = [_config(tmp_path, "a", 1e-3), _config(tmp_path, "b", 2e-3)]
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "assay.cli", "train", str(c), "--no-progress"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for c in configs
    ]
    done = [(p.wait(timeout=300), p.communicate()[1]) for p in runs]
    assert sorted(code for code, _ in done) == [0, 2], done
    err = next(e for code, e in done if code == 2)
    assert err.count("\n") == 1 and (
        "is in use by another assay process" in err or "already holds a run" in err
    )
    lines = [
        json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().split("\n") if x
    ]
    winner = configs[[code for code, _ in done].index(0)]
    assert [r["step"] for r in lines] == [1, 2, 3, 4]
    assert {r["lr"] for r in lines} == {yaml.safe_load(winner.read_text())["optim"]["lr"]}


def test_the_lock_names_its_holder_and_is_gone_after_release(tmp_path):
    folder = tmp_path / "a" / "run"
    lock = acquire(folder, "c.yaml")
    assert lock_held(folder) is True
    with pytest.raises(ConfigError) as info:
        acquire(folder, "c.yaml", retry_s=0)
    assert f"(pid {os.getpid()}, started " in str(info.value)
    lock.release()
    assert lock_held(folder) is None and not (tmp_path / "a").exists()  # created only for it


def test_a_stale_lock_file_of_a_killed_writer_is_taken_over(tmp_path):
    (tmp_path / LOCK_NAME).write_text('{"pid": 1, "started": "long ago"}')
    assert lock_held(tmp_path) is False
    lock = acquire(tmp_path, "c.yaml", retry_s=0)
    assert lock_held(tmp_path) is True
    lock.release()
    assert sorted(tmp_path.iterdir()) == []


def test_a_refused_claim_writes_nothing(tmp_path, capsys):
    """Bad rows found only once the run folder is claimed: the folder it created goes."""
    config = _config(tmp_path, "c", 1e-3)
    body = yaml.safe_load(config.read_text())
    body["data"]["seq_len"] = 4  # every row is longer: refused while tokenizing
    config.write_text(yaml.safe_dump(body))
    assert main(["train", str(config), "--no-progress"]) == 2
    assert "exceed seq_len 4" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_status_does_not_trust_a_reused_pid(tmp_path, capsys, tiny_lora_config):
    config, run = tiny_lora_config(steps=2), tmp_path / "run"
    assert main(["train", str(config), "--no-progress"]) == 0
    state = json.loads((run / RUN_STATE).read_text())
    alive = os.getppid()  # a live process that is not the run's
    assert same_process(alive, start_ticks(alive))
    for fields, word in (
        ({"pid": alive, "start_ticks": start_ticks(alive) + 1}, "failed"),
        ({"pid": alive}, "unknown"),  # written before start times: cannot be confirmed
    ):
        (run / RUN_STATE).write_text(json.dumps({**state, "state": "running", **fields}))
        capsys.readouterr()
        assert main(["status", str(run), "--json"]) == 0
        status = json.loads(capsys.readouterr().out)
        assert (status["state"], status["eta_s"]) == (word, None), status
        assert f"process {alive}" in status["reason"]


@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("what", ["a file", "a dangling symlink"])
def test_an_output_dir_that_is_not_a_folder_is_refused_and_kept(tmp_path, capsys, what, overwrite):
    config = _config(tmp_path, "a", 1e-3)
    out = tmp_path / "run"
    if what == "a file":
        out.write_text("precious\n")
    else:
        out.symlink_to(tmp_path / "nowhere")
    capsys.readouterr()
    assert main(["train", str(config), *(["--overwrite"] if overwrite else [])]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "output.dir" in err, err
    assert ("is a file, not a folder" if what == "a file" else "expected a folder") in err
    assert out.is_symlink() if what != "a file" else out.read_text() == "precious\n"


def _stand_at_lock(folder: Path, kind: str, outside: Path) -> None:
    """Put something that is not a lock file at ``folder``'s lock name."""
    lock = folder / LOCK_NAME
    if kind == "link_to_file":
        lock.symlink_to(outside / "thesis.tex")
    elif kind == "link_to_missing":
        lock.symlink_to(outside / "not-yet")
    elif kind == "folder":
        lock.mkdir()
        (lock / "mine.txt").write_bytes(b"kept")
    elif kind == "fifo":
        os.mkfifo(lock)
    elif kind == "users_file":
        lock.write_bytes(b"a user's notes under the lock's name\n")


@pytest.mark.parametrize(
    "kind", ["link_to_file", "link_to_missing", "folder", "fifo", "users_file"]
)
@pytest.mark.parametrize("how", ["fresh", "overwrite", "resume"])
def test_the_lock_is_never_written_through_a_link_or_over_a_users_file(tmp_path, kind, how):
    """Third adversary, rule 1: a symlinked lock file made train --overwrite and --resume write
    the holder record into the file the link named. Whatever stands at the lock's name and is
    not a lock file is refused in one line naming it, and nothing here or outside changes."""
    from assay_testing.tree_listing import tree_listing

    config = _config(tmp_path, "c", 1e-3)
    run, outside = tmp_path / "run", tmp_path / "outside"
    outside.mkdir()
    (outside / "thesis.tex").write_bytes(b"\\documentclass{article}\n")
    if how == "fresh":
        run.mkdir()
        (run / ".assay-run").write_text('{"format": "assay.run/1"}')
    else:
        assert main(["train", str(config), "--no-progress", "--stop-at", "2"]) == 0
    _stand_at_lock(run, kind, outside)
    before, beside = tree_listing(run), tree_listing(outside)
    extra = {"fresh": [], "overwrite": ["--overwrite"], "resume": ["--resume", str(run)]}[how]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["train", str(config), "--no-progress", *extra])
    assert code == 2 and err.getvalue().count("\n") == 1, err.getvalue()
    assert str(run / LOCK_NAME) in err.getvalue(), err.getvalue()
    assert tree_listing(run) == before and tree_listing(outside) == beside


def test_control_a_lock_left_by_a_killed_writer_or_an_empty_one_is_taken(tmp_path):
    """The refusals above are not refusals of every lock file: an empty file and a killed
    writer's holder record are taken over."""
    for body in (b"", b'{"pid": 1, "started": "long ago"}'):
        (tmp_path / LOCK_NAME).write_bytes(body)
        lock = acquire(tmp_path, "c.yaml", retry_s=0)
        assert json.loads((tmp_path / LOCK_NAME).read_bytes())["pid"] == os.getpid()
        lock.release()
