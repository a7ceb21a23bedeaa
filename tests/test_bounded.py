"""Bounded loaders: size caps, alias-bomb counting, depth limits and JSON hazards."""

from __future__ import annotations

import json

import pytest
import yaml

from assay.bounded import (
    INT_DIGITS,
    InputTooLarge,
    RefusedFile,
    count_expanded,
    loads_json,
    lone_surrogate,
    non_finite,
    parse_json,
    read_capped,
    read_json_file,
    read_text_bounded,
)
from assay.errors import AssayError, ConfigError
from assay.settings.yaml_reader import read_yaml

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
    with pytest.raises(AssayError, match="nested deeper than 100 levels"):
        loads_json("[" * 100_000 + "]" * 100_000, "w")
    with pytest.raises(AssayError, match="nested deeper than 100 levels"):
        loads_json("[" * 101 + "]" * 101, "w")  # parses, but deeper than any real file
    assert loads_json("[" * 100 + "]" * 100, "w") is not None
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


def test_integers_past_the_digit_limit_are_json_errors_at_their_place():
    long = "1" + "0" * INT_DIGITS
    with pytest.raises(json.JSONDecodeError, match=r"an integer of 4,301 digits.*column 7"):
        parse_json('{"a": ' + long + "}")
    assert parse_json('{"a": ' + long[:-1] + "}")["a"] == int(long[:-1])  # the limit itself
    with pytest.raises(json.JSONDecodeError, match="4,301 digits"):
        parse_json(b'{"n": -' + long.encode() + b"}")


def test_yaml_integers_past_the_digit_limit_name_their_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model: m\nseed: " + "9" * (INT_DIGITS + 1) + "\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: line 2: invalid YAML \(an integer of 4,301"):
        read_yaml(path)
    path.write_text("seed: " + "9" * INT_DIGITS + "\n")
    assert read_yaml(path)["seed"] == int("9" * INT_DIGITS)


def test_bounded_text_refuses_links_out_of_the_folder_devices_and_oversize(tmp_path):
    home = tmp_path / "gate"
    home.mkdir()
    (home / "ok").write_text("fine\n")
    assert read_text_bounded(home / "ok", within=home) == "fine\n"
    (home / "zero").symlink_to("/dev/zero")
    with pytest.raises(RefusedFile, match="outside"):
        read_text_bounded(home / "zero", within=home)
    with pytest.raises(RefusedFile, match="not a regular file"):
        read_text_bounded(home / "zero")  # no folder given: still not read forever
    (home / "big").write_bytes(b"a" * 101)
    with pytest.raises(RefusedFile, match="limit is 100 bytes"):
        read_text_bounded(home / "big", cap=100)
    (home / "inside").symlink_to(home / "ok")  # a link that stays home is followed
    assert read_text_bounded(home / "inside", within=home) == "fine\n"


def test_merge_keys_share_settings_and_x_keys_hold_anchors(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "x-optim: &optim {lr: 0.001, warmup_steps: 2}\n"
        "optim:\n  <<: *optim\n  lr: 0.01\n"  # a key beside the merge overrides it
        "steps: 3\n"
    )
    assert read_yaml(path) == {"optim": {"lr": 0.01, "warmup_steps": 2}, "steps": 3}
    path.write_text("optim: {lr: 0.1, lr: 0.2}\n")  # duplicates are still refused
    with pytest.raises(ConfigError, match="duplicate key 'lr'"):
        read_yaml(path)


def test_read_capped_never_allocates_its_cap_under_an_address_space_limit(tmp_path):
    """A 2 KB data file read with the 4 GiB JSONL cap under ``ulimit -v 3GiB``: a reader that
    asks for cap + 1 bytes at once dies with MemoryError."""
    import subprocess
    import sys

    path = tmp_path / "train.jsonl"
    path.write_bytes(b'{"text": "hello"}\n' * 110)
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n"
        "from assay.bounded import JSONL_BYTES, read_capped\n"
        "data = read_capped(sys.argv[1], JSONL_BYTES, 'data file')\n"
        "print(len(data))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-300:]
    assert done.stdout.strip() == str(110 * 18)


def test_read_capped_reads_a_special_file_in_chunks_up_to_its_cap():
    with pytest.raises(InputTooLarge, match=r"/dev/zero: data is over the limit of 3,000,000"):
        read_capped("/dev/zero", 3_000_000, "data")
