"""Config checks against the model header, before any weight loads."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from assay.errors import ConfigError
from assay.settings.loader import load_train_config
from assay.train.data.rows import DataError, read_rows
from assay.train.preflight import check_against_model, check_rows
from assay_testing.text_run import save_text_run


@pytest.fixture
def config_with(tmp_path):
    keys = save_text_run(tmp_path / "ws", seed=0)

    def make(**changes):
        body = {**keys, "steps": 1, "adapter": {"rank": 2}}
        for section, value in changes.items():
            body[section] = {**body.get(section, {}), **value}
        path = tmp_path / "c.yaml"
        path.write_text(yaml.safe_dump(body))
        return load_train_config(path)

    return make


def test_a_layer_the_model_lacks_names_the_field_and_range(config_with):
    config = config_with(adapter={"rank": 2, "layers": [30]})
    with pytest.raises(ConfigError, match=r"c\.yaml: adapter\.layers: 30 .*valid 0\.\.1"):
        check_against_model(config)
    check_against_model(config_with(adapter={"rank": 2, "layers": [1]}))


def test_seq_len_past_the_context_length_is_refused(config_with):
    with pytest.raises(ConfigError, match=r"data\.seq_len: 4096 exceeds .* context length 512"):
        check_against_model(config_with(data={"seq_len": 4096}))
    check_against_model(config_with(data={"seq_len": 512}))


def test_a_tinylora_rank_past_the_targets_bound_is_refused_before_loading(config_with):
    """Third adversary, rule 3: TinyLoRA r=1e6 was refused only after the model loaded, in a
    line naming no file or field. The bound is formed from the header: the smaller dimension
    of each target's weight. The control: r at the bound passes."""
    from assay.train.preflight import model_config

    def tiny(r: int):
        config = config_with()
        body = yaml.safe_load(Path(config.source).read_text())
        body["adapter"] = {"method": "tinylora", "u": 2, "r": r, "targets": ["q_proj", "v_proj"]}
        Path(config.source).write_text(yaml.safe_dump(body))
        return load_train_config(config.source)

    model = model_config(tiny(1))
    bound = min(model.kv_size, model.hidden_size)  # v_proj is (kv, h): the tighter one
    with pytest.raises(ConfigError, match=rf"c\.yaml: adapter\.r: 1000000 .*valid 1\.\.{bound}\b"):
        check_against_model(tiny(1_000_000))
    check_against_model(tiny(bound))


def test_rows_are_read_before_the_model(config_with, tmp_path):
    config = config_with()
    (tmp_path / "ws" / "train.jsonl").write_text('{"text": "a\\ud800"}\n')
    with pytest.raises(DataError, match=r"train\.jsonl:1: text: lone surrogate"):
        check_rows(config)


@pytest.mark.parametrize("role", ["asistant", "robot", ""])
def test_unknown_roles_are_refused_naming_line_and_role(tmp_path, role):
    path = tmp_path / "m.jsonl"
    path.write_text(
        '{"messages": [{"role": "user", "content": "a"}, '
        f'{{"role": "{role}", "content": "b"}}]}}\n'
    )
    with pytest.raises(DataError, match=rf"m\.jsonl:1: messages\[1\]\.role '{role}'"):
        read_rows(path)
