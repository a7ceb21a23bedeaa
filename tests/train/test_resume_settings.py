"""The rule for a resumed run's settings: they come from its config, never from the checkpoint.

A checkpoint whose optimizer hyperparameters, learning rates, scheduler fields or cursor say
anything but what the run's config gives at that step (an edit, with the manifest re-sealed so
the sha256 check passes) is refused in one line naming the file and the field, before anything
is restored. An untouched checkpoint resumes to the unbroken run's losses; one that lacks a
setting takes the config's.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from assay.settings.loader import train_config_from_dict
from assay.train.checkpoint.state import CheckpointError
from assay.train.loop import Trainer
from assay_testing.forgery import reseal
from assay_testing.text_run import save_text_run

STEP = "step-000002"
SCHEDULE = {"lr": 1e-2, "warmup_steps": 1, "schedule": "cosine"}  # lr moves every step
JSON_VALUES = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.integers(-3, 3),
    st.booleans(),
    st.none(),
    st.text(max_size=3),
    st.lists(st.floats(0, 1, width=32), max_size=3),
)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(root, base config, the unbroken run's losses, a run stopped after step 2)."""
    root = tmp_path_factory.mktemp("settings")
    base = save_text_run(root, seed=2)
    whole = Trainer(_config(root, base, "whole"), progress=False).train()["losses"]
    Trainer(_config(root, base, "half"), progress=False).train(stop_at=2)
    return root, base, whole, root / "half"


def _config(root: Path, base: dict, name: str):
    raw = {**json.loads(json.dumps(base)), "steps": 4, "seed": 1, "optim": SCHEDULE}
    raw["output"] = {"dir": str(root / name), "save_every": 2}
    return train_config_from_dict(raw, root / f"{name}.yaml")


def _forged(run, name: str, file: str, edit) -> Trainer:
    """A copy of the stopped run with ``edit`` applied to ``file`` of its step 2, re-sealed,
    and a fresh trainer of the same config writing into the copy."""
    root, base, _, half = run
    copy = root / "forged" / name
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(half, copy)
    path = copy / STEP / file
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    reseal(copy / STEP)
    return Trainer(_config(root / "forged", base, name), progress=False)


def _refused(trainer: Trainer, run_dir: Path, file: str, field: str) -> None:
    with pytest.raises(CheckpointError) as info:
        trainer.resume(run_dir)
    message = str(info.value)
    assert "\n" not in message and f"{file}: {field}:" in message, message


def _differs(new, old) -> bool:
    numeric = (int, float)
    same_number = (
        isinstance(new, numeric)
        and isinstance(old, numeric)
        and not any(isinstance(v, bool) for v in (new, old))
    )
    return not (new == old and (type(new) is type(old) or same_number))


def _saved_group(run) -> dict:
    return json.loads((run[3] / STEP / "optimizer.json").read_text())["param_groups"][0]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_an_edited_optimizer_setting_is_refused_naming_it(run, data):
    group = _saved_group(run)
    key = data.draw(st.sampled_from(sorted(set(group) - {"param_names"})), label="key")
    value = data.draw(JSON_VALUES, label="value")
    assume(_differs(value, group[key]))

    def edit(saved):
        saved["param_groups"][0][key] = value

    trainer = _forged(run, "optimizer", "optimizer.json", edit)
    _refused(trainer, run[0] / "forged" / "optimizer", "optimizer.json", f"param_groups[0].{key}")


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_an_edited_scheduler_field_is_refused_naming_it(run, data):
    state = json.loads((run[3] / STEP / "scheduler.json").read_text())
    key = data.draw(st.sampled_from(sorted(set(state) - {"last_epoch", "_step_count"})))
    value = data.draw(st.one_of(JSON_VALUES, st.just([0.5])), label="value")
    assume(_differs(value, state[key]))

    def edit(saved):
        saved[key] = value

    trainer = _forged(run, "scheduler", "scheduler.json", edit)
    _refused(trainer, run[0] / "forged" / "scheduler", "scheduler.json", key)


@pytest.mark.parametrize(
    ("name", "file", "field", "edit"),
    [
        (
            "unknown_setting",
            "optimizer.json",
            "param_groups[0].momentum",
            lambda d: d["param_groups"][0].update(momentum=0.9),
        ),
        (
            "lr_tampered_consistently",
            "scheduler.json",
            "_last_lr",
            lambda d: d.update(_last_lr=[0.5]),
        ),
        ("unknown_scheduler_field", "scheduler.json", "gamma", lambda d: d.update(gamma=0.1)),
        ("cursor_unshuffled", "cursor.json", "shuffle", lambda d: d.update(shuffle=False)),
    ],
)
def test_named_forgeries_are_refused(run, name, file, field, edit):
    _refused(_forged(run, name, file, edit), run[0] / "forged" / name, file, field)


@pytest.mark.parametrize("dropped", [None, "eps", "betas", "weight_decay", "amsgrad"])
def test_an_honest_or_thinner_checkpoint_resumes_to_the_unbroken_run(run, dropped):
    """The control: untouched, the forged copy resumes exactly; a setting missing from the
    checkpoint is the config's, not torch's default, so the run is still exact."""

    def edit(saved):
        if dropped:
            del saved["param_groups"][0][dropped]

    trainer = _forged(run, f"thin-{dropped}", "optimizer.json", edit)
    trainer.resume(run[0] / "forged" / f"thin-{dropped}")
    assert trainer.train()["losses"] == run[2][2:]
