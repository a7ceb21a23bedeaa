"""Run directories: refused when occupied, --overwrite starts clean, a run killed before its
first checkpoint resumes from step 0, and re-sealed checkpoints are checked field by field."""

from __future__ import annotations

import hashlib
import json

import pytest
import yaml

from assay.cli import main
from assay.train.run_dir import claim_run_dir, not_started
from assay_testing.text_run import save_text_run


@pytest.fixture
def workspace(tmp_path):
    keys = save_text_run(tmp_path / "ws", seed=0)
    config = {**keys, "adapter": {"rank": 2, "targets": ["q_proj"]}, "steps": 2, "seed": 1,
              "output": {"dir": str(tmp_path / "run"), "save_every": 1}}  # fmt: skip
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
