"""YAML 1.1 surprises in a config (``010`` as octal 8, ``no`` as false, ``1:30`` as 90): a
setting never takes a value other than what its text reads as in YAML 1.2; where YAML 1.1
would read it otherwise, the config is refused in one line naming the file, line and key."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assay.errors import ConfigError
from assay.settings.yaml_reader import read_yaml

MINIMAL = "model: m.gguf\ndata:\n  train: d.jsonl\n"


def _read(tmp_path: Path, text: str) -> dict:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return read_yaml(path)


def _refusal(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        _read(tmp_path, text)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(tmp_path / "run.yaml"))
    return message


@pytest.mark.parametrize(
    ("line", "where", "says"),
    [
        ("steps: 010", "line 4: steps:", "YAML 1.1 reads as octal 8 and YAML 1.2 as 10"),
        ("steps: 09", "line 4: steps:", "write 9"),
        ("seed: 0x1F", "seed:", "hexadecimal integer; settings take decimal integers: write 31"),
        ("seed: 0o17", "seed:", "an octal integer"),
        ("seed: 0b101", "seed:", "write 5"),
        ("seed: 1:30", "seed:", "base-60 number 90"),
        ("tokenizer: no", "tokenizer:", "the boolean false"),
        ("tokenizer: On", "tokenizer:", "quote it ('On')"),
        ("tokenizer: 2026-01-01", "tokenizer:", "as a date"),
        ("adapter: {layers: [1, 02]}", "adapter.layers[1]:", "leading zero"),
        ("x-rank: &r 010\nadapter: {rank: *r}", "adapter.rank:", "octal 8"),
    ],
)
def test_a_yaml_11_surprise_is_refused_naming_the_key(tmp_path, line, where, says):
    message = _refusal(tmp_path, MINIMAL + line + "\n")
    assert where in message and says in message


@pytest.mark.parametrize(
    ("line", "value"),
    [("data: {train: d.jsonl, truncate: yes}", True), ("gradient_checkpointing: off", False)],
)
def test_yes_and_off_keep_their_meaning_on_a_boolean_setting(tmp_path, line, value):
    data = _read(tmp_path, "model: m.gguf\n" + line + "\n")
    flag = data["data"]["truncate"] if "truncate" in line else data["gradient_checkpointing"]
    assert flag is value


def test_plain_values_and_unknown_keys_read_as_written(tmp_path):
    data = _read(tmp_path, MINIMAL + "steps: 1_000\nseed: 0\ntokenizer: '010'\nyes: 1\n")
    assert data["steps"] == 1000 and data["seed"] == 0 and data["tokenizer"] == "010"
    assert "yes" in data  # the schema then names the unknown key 'yes'


INTEGER_TEXT = st.builds(
    lambda sign, zeros, digits, base: f"{sign}{base}{'0' * zeros}{digits}",
    st.sampled_from(["", "-", "+"]),
    st.integers(0, 3),
    st.integers(0, 10**6).map(str),
    st.sampled_from(["", "", "0x", "0o", "0b"]),
)


@settings(max_examples=200, deadline=None)
@given(text=INTEGER_TEXT)
def test_an_integer_setting_is_its_decimal_text_or_refused(tmp_path_factory, text):
    folder = tmp_path_factory.mktemp("int")
    try:
        value = _read(folder, MINIMAL + f"seed: {text}\n").get("seed")
    except ConfigError as err:
        assert "seed:" in str(err)
        return
    # accepted: exactly what the text means as a decimal (YAML 1.2), never octal or hex
    if text.lstrip("+-").isdigit():
        assert value == int(text, 10)
    else:  # not a number in either YAML (0b2): text, which the schema then refuses
        assert value == text


WORD = st.sampled_from(
    ["yes", "Yes", "no", "NO", "on", "Off", "y", "n", "true", "12:30", "2026-01-02", "1:2:3"]
)


@settings(max_examples=60, deadline=None)
@given(word=WORD)
def test_a_text_setting_is_its_text_or_refused(tmp_path_factory, word):
    folder = tmp_path_factory.mktemp("word")
    try:
        value = _read(folder, MINIMAL + f"tokenizer: {word}\n").get("tokenizer")
    except ConfigError as err:
        assert "tokenizer:" in str(err)
        return
    assert value == word or (word == "true" and value is True)  # the schema refuses a bool
