"""Bounded loaders: size caps, alias-bomb counting, depth limits and JSON hazards."""

from __future__ import annotations

import pytest
import yaml

from assay.bounded import (
    InputTooLarge,
    count_expanded,
    loads_json,
    lone_surrogate,
    non_finite,
    read_capped,
    read_json_file,
)
from assay.errors import AssayError, ConfigError
from assay.train.config_schema import read_yaml

BOMB = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9)
)


def test_read_capped_refuses_a_file_over_its_cap(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 11)
    assert read_capped(path, 11, "file") == b"x" * 11
    with pytest.raises(InputTooLarge, match=r"f: file is 11 bytes; the limit is 10 bytes"):
        read_capped(path, 10, "file")


def test_alias_expansion_is_counted_without_expanding():
    node = yaml.compose(BOMB)
    assert count_expanded(node, 10_000) > 10_000  # 9**8 leaves, counted in a few ms
    assert count_expanded(yaml.compose("a: &x [1, 2]\nb: *x\n"), 100) == 9


def test_an_alias_bomb_config_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    with pytest.raises(ConfigError, match=r"bomb\.yaml: YAML aliases expand to over"):
        read_yaml(path)


def test_benign_aliases_still_load(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("a: &t [q_proj, v_proj]\nb: *t\n")
    assert read_yaml(path) == {"a": ["q_proj", "v_proj"], "b": ["q_proj", "v_proj"]}


@pytest.mark.parametrize("text", ["k: " + "[" * 5000 + "]" * 5000, "x: &r [*r]"])
def test_deep_or_recursive_yaml_is_one_config_error(tmp_path, text):
    path = tmp_path / "deep.yaml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError, match=r"deep\.yaml: "):
        read_yaml(path)


def test_json_hazards_are_one_line_errors(tmp_path):
    with pytest.raises(AssayError, match=r"w: invalid JSON \(NaN is not a finite number\)"):
        loads_json('{"a": NaN}', "w")
    with pytest.raises(AssayError, match=r"w: a\[0\]: lone surrogate"):
        loads_json('{"a": ["\\ud800"]}', "w")
    with pytest.raises(AssayError, match="nested too deeply"):
        loads_json("[" * 100_000 + "]" * 100_000, "w")
    assert loads_json('{"a": "\\ud83d\\ude00"}', "w") == {"a": "\U0001f600"}  # a valid pair
    with pytest.raises(ConfigError, match="no such file"):
        read_json_file(tmp_path / "missing.json", ConfigError)


def test_walkers_name_the_first_bad_path():
    assert non_finite({"a": {"b": [1.0, float("inf")]}}) == "a.b[1]"
    assert non_finite({"a": 1e308}) is None
    assert lone_surrogate({"x": {"y": "ok", "z": "\udc00"}}) == "x.z"


def test_a_modest_alias_blowup_is_refused_not_just_a_bomb(tmp_path):
    """Ten thousand nodes from four short lines: cheap to expand, so only the count stops it."""
    levels = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 4)
    )
    path = tmp_path / "blowup.yaml"
    path.write_text(levels)
    with pytest.raises(ConfigError, match=r"blowup\.yaml: YAML aliases expand to over 2,000"):
        read_yaml(path)
