"""The rule for a diverging run: `assay train` never writes a number that `assay status` or
`--resume` would refuse. At the first step whose gradients or loss are not finite the run stops
in one line naming the step, the step is neither logged nor saved, the run's state says failed
with that line, and the last good checkpoint still resumes."""

from __future__ import annotations

import json

import pytest
import yaml

from assay.cli import main
from assay.train.run.state import RUN_STATE


@pytest.mark.parametrize("lr", [1e30, float("inf")])
def test_a_diverged_run_stops_with_one_line_and_leaves_readable_files(
    tmp_path, capsys, tiny_lora_config, lr
):
    config = tiny_lora_config(steps=6)
    body = yaml.safe_load(config.read_text())
    body["optim"] = {"lr": lr, "grad_clip": None}
    body["output"]["save_every"] = 1
    config.write_text(yaml.safe_dump(body))
    run = tmp_path / "run"
    capsys.readouterr()  # the fixture's own output
    if lr == float("inf"):  # refused as a setting before any step
        assert main(["train", str(config), "--no-progress"]) == 2
        assert "optim.lr" in capsys.readouterr().err
        return
    assert main(["train", str(config), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "diverged" in err and "Traceback" not in err, err
    step = int(err.split("step ")[1].split(":")[0])
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in logged if "loss" in m] == list(range(1, step))
    state = json.loads((run / RUN_STATE).read_text())
    assert state["state"] == "failed" and "diverged" in state["reason"]
    assert main(["status", str(run), "--json"]) == 0  # every file train wrote reads back
    assert json.loads(capsys.readouterr().out)["state"] == "failed"
    saved = sorted(run.glob("step-*"))
    assert len(saved) == step - 1
    if saved:  # the last good checkpoint resumes (and the run diverges again at the same step)
        assert main(["train", str(config), "--no-progress", "--resume", str(run)]) == 2
        assert f"step {step}:" in capsys.readouterr().err
