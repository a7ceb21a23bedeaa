"""Run directories: refused when occupied, --overwrite starts clean, a run killed before its
first checkpoint resumes from step 0, and re-sealed checkpoints are checked field by field."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from assay.cli import main
from assay.train.run.folder import RUN_FORMAT, RUN_MARKER, claim_run_dir, not_started
from assay_testing.text_run import save_text_run
from assay_testing.tiny import edit_config


@pytest.fixture
def workspace(tmp_path):
    keys = save_text_run(tmp_path / "ws", seed=0)
    config = {
        **keys,
        "adapter": {"rank": 2, "targets": ["q_proj"]},
        "steps": 2,
        "seed": 1,
        "output": {"dir": str(tmp_path / "run"), "save_every": 1},
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, tmp_path / "run"


def _steps(run):
    return [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_an_occupied_run_dir_is_refused_and_left_alone(workspace, capsys):
    config, run = workspace
    assert main(["train", str(config), "--json", "--no-progress", "--stop-at", "1"]) == 0
    before = {p: p.stat().st_mtime_ns for p in run.rglob("*")}
    capsys.readouterr()
    assert main(["train", str(config), "--json", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{config}: output.dir: {run} already holds a run" in err
    assert {p: p.stat().st_mtime_ns for p in run.rglob("*")} == before


def test_overwrite_starts_clean(workspace):
    config, run = workspace
    assert main(["train", str(config), "--json", "--no-progress"]) == 0
    assert main(["train", str(config), "--json", "--no-progress", "--overwrite"]) == 0
    assert _steps(run) == [1, 2]


def test_a_run_killed_before_its_first_checkpoint_resumes_from_step_zero(workspace):
    config, run = workspace
    run.mkdir()
    (run / RUN_MARKER).write_text(json.dumps({"format": RUN_FORMAT}))  # as a claim writes it
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 9.0}) + "\n")
    assert not_started(run)
    assert main(["train", str(config), "--json", "--no-progress", "--resume", str(run)]) == 0
    assert _steps(run) == [1, 2]
    assert json.loads((run / "metrics.jsonl").read_text().splitlines()[0])["loss"] != 9.0


def test_resume_and_overwrite_together_are_refused(tmp_path):
    from assay.errors import ConfigError

    with pytest.raises(ConfigError, match="exclude each other"):
        claim_run_dir(tmp_path, "c.yaml", resume=True, overwrite=True)


@pytest.mark.parametrize(
    ("file", "edit", "field"),
    [
        ("cursor.json", {"position": 999}, "position"),
        ("scheduler.json", {"last_epoch": "x"}, "last_epoch"),
        ("scheduler.json", {"base_lrs": [1e9]}, "base_lrs"),
    ],
)
def test_a_resealed_checkpoint_is_checked_field_by_field(workspace, capsys, file, edit, field):
    config, run = workspace
    assert main(["train", str(config), "--json", "--no-progress", "--stop-at", "1"]) == 0
    step = run / "step-000001"
    data = json.loads((step / file).read_text())
    data.update(edit)
    (step / file).write_text(json.dumps(data))
    manifest = json.loads((step / "manifest.json").read_text())
    raw = (step / file).read_bytes()
    manifest["files"][file] = {"sha256": hashlib.sha256(raw).hexdigest(), "bytes": len(raw)}
    (step / "manifest.json").write_text(json.dumps(manifest))
    capsys.readouterr()
    assert main(["train", str(config), "--json", "--no-progress", "--resume", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"assay: error: {step / file}: {field}: "), err


def test_resume_from_a_folder_without_a_checkpoint_is_refused(workspace, tmp_path, capsys):
    """Data loss of issue 30: --resume of an empty folder used to start at step 0 and write
    into output.dir, over the run there."""
    config, run = workspace
    assert main(["train", str(config), "--json", "--no-progress", "--stop-at", "1"]) == 0
    before = {p: p.stat().st_mtime_ns for p in run.rglob("*")}
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    capsys.readouterr()
    assert main(["train", str(config), "--json", "--no-progress", "--resume", str(empty)]) == 2
    assert f"--resume {empty}: holds no .assay-run marker" in capsys.readouterr().err
    assert main(["train", str(config), "--json", "--no-progress", "--resume", "nowhere"]) == 2
    assert {p: p.stat().st_mtime_ns for p in run.rglob("*")} == before


def test_another_runs_checkpoint_never_writes_into_this_run(workspace, tmp_path, capsys):
    config, run = workspace
    assert main(["train", str(config), "--json", "--no-progress", "--stop-at", "1"]) == 0
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    before = {p: p.stat().st_mtime_ns for p in run.rglob("*")}
    capsys.readouterr()
    assert main(["train", str(config), "--json", "--no-progress", "--resume", str(copy)]) == 2
    assert "holds another run" in capsys.readouterr().err
    assert {p: p.stat().st_mtime_ns for p in run.rglob("*")} == before
    # the run's own step folder still resumes it
    step = run / "step-000001"
    assert main(["train", str(config), "--json", "--no-progress", "--resume", str(step)]) == 0
    assert _steps(run) == [1, 2]


def test_overwrite_that_cannot_delete_keeps_the_new_run_and_names_the_old(
    workspace, monkeypatch, capsys
):
    """The old run goes only in exchange for a new one: moved aside whole, deleted after the
    new run's first checkpoint; if that fails, one line names the folder left behind."""
    import shutil

    config, run = workspace
    assert main(["train", str(config), "--json", "--no-progress", "--stop-at", "1"]) == 0
    old = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}

    def refuse(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(shutil, "rmtree", refuse)
    capsys.readouterr()
    assert main(["train", str(config), "--json", "--no-progress", "--overwrite"]) == 0
    err = capsys.readouterr().err.strip()
    aside = next(run.parent.glob(f".{run.name}.replaced-*"))
    assert err.count("\n") == 0 and "could not be deleted" in err and str(aside) in err
    assert {p.relative_to(aside): p.read_bytes() for p in aside.rglob("*") if p.is_file()} == old
    assert _steps(run) == [1, 2]  # the new run, whole


def test_overwrite_whose_new_run_fails_before_a_checkpoint_keeps_the_old_run(
    workspace, monkeypatch, capsys
):
    from assay.train.loop import Trainer

    config, run = workspace
    assert main(["train", str(config), "--json", "--no-progress", "--stop-at", "1"]) == 0
    old = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}

    def broken_step(self):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Trainer, "train_step", broken_step)
    capsys.readouterr()
    assert main(["train", str(config), "--json", "--no-progress", "--overwrite"]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()} == old
    assert sorted(p.name for p in run.parent.iterdir() if p.name.startswith(".")) == []


def test_export_into_the_run_itself_is_refused(workspace, capsys):
    config, run = workspace
    assert main(["train", str(config), "--json", "--no-progress"]) == 0
    files = sorted(run.rglob("*"))
    for out in (run, run / "exported", run.parent):
        capsys.readouterr()
        argv = ["export", str(run), "--format", "peft", "--out", str(out), "--force"]
        assert main(argv) == 2
        assert "lies inside the run" in capsys.readouterr().err
    assert sorted(run.rglob("*")) == files


def test_resuming_a_finished_run_leaves_it_byte_for_byte_and_says_so(workspace, capsys):
    config, run = workspace
    assert main(["train", str(config), "--json", "--no-progress"]) == 0
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in run.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(["train", str(config), "--no-progress", "--resume", str(run)]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith(f"{run}: already finished (step 2 of 2)")
    after = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in run.rglob("*") if p.is_file()}
    assert after == before


def test_eval_of_a_checkpoint_trained_on_another_model_is_refused(workspace, tmp_path, capsys):
    """A silent wrong answer of issue 30: eval used to score another model's checkpoint."""
    config, run = workspace
    assert main(["train", str(config), "--json", "--no-progress"]) == 0
    other = {**yaml.safe_load(config.read_text()), **save_text_run(tmp_path / "other", seed=5)}
    other_config = tmp_path / "other.yaml"
    other_config.write_text(yaml.safe_dump(other))
    rows = ["--data", other["data"]["train"], "--json"]
    capsys.readouterr()
    assert main(["eval", str(other_config), "--checkpoint", str(run), *rows]) == 2
    err = capsys.readouterr().err
    assert "was trained on another model" in err and err.count("\n") == 1, err
    assert main(["eval", str(config), "--checkpoint", str(run), *rows]) == 0, (
        capsys.readouterr().err
    )


def test_a_finished_run_of_another_model_is_refused_before_the_shortcut(
    workspace, tmp_path, capsys
):
    """Issue 52, rule 2: "already finished" used to answer before the fingerprint checks, so
    a run finished on another model exited 0 saying nothing changed."""
    config, run = workspace
    assert main(["train", str(config), "--json", "--no-progress"]) == 0
    other = yaml.safe_load(config.read_text())
    other["model"] = save_text_run(tmp_path / "other", seed=7)["model"]
    path = tmp_path / "other.yaml"
    path.write_text(yaml.safe_dump(other))
    before = {p: p.stat().st_mtime_ns for p in run.rglob("*")}
    capsys.readouterr()
    assert main(["train", str(path), "--no-progress", "--resume", str(run)]) == 2
    captured = capsys.readouterr()
    assert "already finished" not in captured.out
    assert captured.err.count("\n") == 1 and "model" in captured.err
    assert {p: p.stat().st_mtime_ns for p in run.rglob("*")} == before


@pytest.mark.parametrize("phase", ["command_imports", "config_load", "model_load"])
def test_a_stop_signal_while_loading_leaves_no_run_folder(workspace, capsys, monkeypatch, phase):
    """Issue 52, rule 6: SIGTERM during model load used to end the process by the signal,
    with no line, leaving a run folder; so did one while torch imported and the config loaded
    (the adversary's case, the same window earlier). The signal is sent for real, from inside
    the phase."""
    import os
    import signal
    import time

    from assay.cli import dispatch
    from assay.settings import loader
    from assay.train import loop

    config, run = workspace

    def signalled(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this returns
        raise AssertionError("SIGTERM did not stop the load")

    if phase == "model_load":
        monkeypatch.setattr(loop.Trainer, "__init__", signalled)
    elif phase == "config_load":
        monkeypatch.setattr(loader, "load_train_config", signalled)
    else:  # the third adversary's case: a traceback, or the process ended by the signal
        monkeypatch.setattr(dispatch, "build_parser", signalled)
    assert main(["train", str(config), "--json", "--no-progress"]) == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "stopped by SIGTERM before training started" in err
    assert not run.exists()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler is put back


def test_a_run_the_python_trainer_started_resumes_from_the_cli(workspace, tmp_path):
    """The Trainer takes no claim, but a folder it creates carries the run marker, so the CLI
    resumes it; a folder that already held files when it trained there is left unmarked."""
    from assay.settings.loader import load_train_config
    from assay.train.loop import Trainer

    config, run = workspace
    Trainer(load_train_config(config)).train(stop_at=1)
    assert (run / RUN_MARKER).is_file()
    assert main(["train", str(config), "--json", "--no-progress", "--resume", str(run)]) == 0
    assert _steps(run) == [1, 2]
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.md").write_text("mine\n")
    other = yaml.safe_load(config.read_text())
    other["output"]["dir"] = str(busy)
    path = tmp_path / "busy.yaml"
    path.write_text(yaml.safe_dump(other))
    Trainer(load_train_config(path)).train(stop_at=1)
    assert not (busy / RUN_MARKER).exists()


def test_a_run_resumes_into_a_new_output_folder(workspace, tmp_path):
    """Resuming run A with output.dir naming a new folder writes the resumed run there (the
    check under the lock must not take its own lock file for another run)."""
    config, run = workspace
    assert main(["train", str(config), "--json", "--no-progress", "--stop-at", "1"]) == 0
    moved = yaml.safe_load(config.read_text())
    moved["output"]["dir"] = str(tmp_path / "elsewhere")
    path = tmp_path / "moved.yaml"
    path.write_text(yaml.safe_dump(moved))
    assert main(["train", str(path), "--json", "--no-progress", "--resume", str(run)]) == 0
    assert _steps(tmp_path / "elsewhere") == [2]


def test_resume_under_another_tokenizer_is_refused(workspace, tmp_path, capsys):
    """Issue 52, rule 2 (found by its adversary): the same data file under a tokenizer of the
    same size but two ids traded gives other token ids, and --resume trained on them. The
    checkpoint now holds a fingerprint of the token ids; the control, the same tokenizer
    again, resumes."""
    from assay_testing.byte_tokenizer import save_byte_tokenizer

    config, run = workspace
    assert main(["train", str(config), "--json", "--no-progress", "--stop-at", "1"]) == 0
    other = yaml.safe_load(config.read_text())
    other["tokenizer"] = str(save_byte_tokenizer(tmp_path / "other.gguf", swapped="ae"))
    path = tmp_path / "other.yaml"
    path.write_text(yaml.safe_dump(other))
    before = {p: p.stat().st_mtime_ns for p in run.rglob("*")}
    capsys.readouterr()
    assert main(["train", str(path), "--no-progress", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tokens fingerprint differs" in err, err
    assert {p: p.stat().st_mtime_ns for p in run.rglob("*")} == before
    assert main(["train", str(config), "--json", "--no-progress", "--resume", str(run)]) == 0


def test_resume_onto_the_same_weights_under_another_config_is_refused(workspace, capsys):
    """Issue 51's attack: a base whose config.json changed a value of the forward pass (here the
    norm epsilon; Granite's multipliers in the attack) has the same weights, and --resume used
    to carry on under the other math. The checkpoint names the base's numerics too; the
    controls: a change no forward pass reads (the context length) resumes, and so does the
    first config put back."""
    config, run = workspace
    model = Path(yaml.safe_load(config.read_text())["model"])
    original = (model / "config.json").read_text()
    assert main(["train", str(config), "--json", "--no-progress", "--stop-at", "1"]) == 0
    edit_config(model, rms_norm_eps=1e-2)
    before = {p: p.stat().st_mtime_ns for p in run.rglob("*")}
    capsys.readouterr()
    assert main(["train", str(config), "--no-progress", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model_numerics fingerprint differs" in err, err
    assert {p: p.stat().st_mtime_ns for p in run.rglob("*")} == before
    (model / "config.json").write_text(original)
    edit_config(model, max_position_embeddings=4096)
    assert main(["train", str(config), "--json", "--no-progress", "--resume", str(run)]) == 0


def test_generate_from_a_checkpoint_onto_another_config_is_refused(workspace, capsys):
    """The second attack: generate --checkpoint restored a run onto the same weights under
    another config (eval and export refused it). The control: the first config generates."""
    config, run = workspace
    model = Path(yaml.safe_load(config.read_text())["model"])
    original = (model / "config.json").read_text()
    assert main(["train", str(config), "--json", "--no-progress"]) == 0
    edit_config(model, rms_norm_eps=1e-2)
    capsys.readouterr()
    prompt = ["--prompt", "a", "--max-new-tokens", "1"]
    assert main(["generate", str(config), "--checkpoint", str(run), *prompt]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the same weights under another config" in err, err
    (model / "config.json").write_text(original)
    assert main(["generate", str(config), "--checkpoint", str(run), *prompt]) == 0
