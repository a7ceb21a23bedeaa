"""One source of truth for adapter settings: the shipped schema, the config dataclasses, the
parser, the YAML writer and ``attach`` must all say what the registry says."""

from __future__ import annotations

import dataclasses
import json
import re
from importlib import resources
from pathlib import Path

import pytest
import yaml

from assay.adapters import attach
from assay.errors import ConfigError
from assay.settings import AdapterConfig, TrainConfig
from assay.settings.loader import config_as_yaml, train_config_from_dict
from assay.settings.methods import (
    LORA_FAMILY,
    METHODS,
    NAMES,
    PEFT_METHODS,
    build_options,
    defaults,
    help_text,
    option_names,
)


def _schema() -> dict:
    text = resources.files("assay").joinpath("schemas/train-config.schema.json").read_text()
    return json.loads(text)


def _config(tmp_path: Path, **adapter) -> TrainConfig:
    raw = {"model": "m", "data": {"train": "t.jsonl"}, "steps": 1, "adapter": adapter}
    return train_config_from_dict(raw, tmp_path / "c.yaml")


def test_schema_method_enum_is_the_registry():
    assert _schema()["properties"]["adapter"]["properties"]["method"]["enum"] == list(NAMES)


def test_schema_adapter_options_are_the_registry_options():
    properties = _schema()["properties"]["adapter"]["properties"]
    declared = {k for k in properties if k not in ("method", "targets", "layers")}
    registered = {name for method in NAMES for name in option_names(method)}
    assert declared == registered


@pytest.mark.parametrize("method", [m for m in NAMES if m != "full"])
def test_schema_defaults_are_the_registry_defaults(method):
    properties = _schema()["properties"]["adapter"]["properties"]
    for key, value in defaults(method).items():
        assert properties[key]["default"] == value, (method, key)
        described = re.search(r"Default ([^ ,(]+?)\.?(?: |$)", properties[key]["description"])
        if described and described.group(1) not in ("off",):
            assert yaml.safe_load(described.group(1)) == value, (method, key)


@pytest.mark.parametrize("method", [m for m in NAMES if m != "full"])
def test_parsed_yaml_defaults_equal_attach_defaults(tmp_path, tiny_models, method):
    import assay

    config = _config(tmp_path, method=method)
    model = attach(assay.load(tiny_models["llama3"]["hf"]), method)
    spec = model.assay_adapter_spec
    parsed = config.adapter.options()
    from_attach = {"rank": spec.rank, "alpha": spec.alpha, **defaults(method), **spec.options}
    assert {k: from_attach[k] for k in parsed} == parsed
    assert parsed == defaults(method)


def test_config_dataclass_defaults_are_the_registry_defaults():
    fields = {f.name: f.default for f in dataclasses.fields(AdapterConfig)}
    for key, value in defaults("lora").items():
        assert fields[key] == value, key


@pytest.mark.parametrize("method", NAMES)
def test_every_method_round_trips_through_the_yaml_writer(tmp_path, method):
    config = _config(tmp_path, method=method)
    again = train_config_from_dict(config_as_yaml(config), tmp_path / "c.yaml")
    assert again == config


def test_family_lists_derive_from_the_registry():
    from assay.adapters.attachment import METHODS as ATTACH_METHODS

    assert ATTACH_METHODS == NAMES == tuple(METHODS)
    assert set(PEFT_METHODS) <= set(LORA_FAMILY) <= set(NAMES)
    assert all(name in help_text() for name in NAMES)


@pytest.mark.parametrize(
    ("method", "given", "word"),
    [
        ("lora", {"u": 3}, "takes no option"),
        ("tinylora", {"dropout": 0.1}, "takes no option"),
        ("lora", {"dropout": 1.0}, "dropout must be a finite number >= 0 and < 1, got 1.0"),
        ("lora", {"rank": 0}, "rank must be an integer >= 1, got 0"),
        ("lora", {"rank": 2.0}, "rank must be an integer >= 1, got 2.0"),
        ("lora", {"alpha": float("nan")}, "alpha must be a finite number > 0"),
        ("dora", {"alpha": float("inf")}, "alpha must be a finite number > 0"),
        ("rslora", {"alpha": -16.0}, "alpha must be a finite number > 0"),
        ("lora", {"alpha": 0}, "alpha must be a finite number > 0"),
        ("loraplus", {"lr_ratio": True}, "lr_ratio must be a finite number > 0"),
        ("tinylora", {"sharing": "all"}, "sharing"),
        ("nope", {}, "expected one of full, lora"),
    ],
)
def test_bad_options_are_refused_by_name(method, given, word):
    """Unknown options by the registry; values by the setting rules (the one statement of
    their bounds, from which the YAML schema is generated too)."""
    with pytest.raises(ConfigError, match=re.escape(word)):
        build_options(method, given, where="c.yaml: adapter")


def test_config_refuses_an_option_of_another_method(tmp_path):
    with pytest.raises(ConfigError, match=r"adapter\.dropout: does not apply"):
        _config(tmp_path, method="tinylora", dropout=0.1)


def test_cli_help_lists_every_method():
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "assay.cli", "train", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert all(name in out for name in NAMES)


# Configs under which every optional field applies (a field that does not apply is None).
_CONTEXTS = [
    *({"adapter": {"method": name}} for name in NAMES if name != "full"),  # each method's options
    {"loss": {"type": "chunked_ce"}},
    {"loss": {"type": "simpo"}, "data": {"train": "t.jsonl", "format": "preference"}},
    {"loss": {"type": "kto"}, "data": {"train": "t.jsonl", "format": "kto"}},
    {"loss": {"type": "dpo"}, "data": {"train": "t.jsonl", "format": "preference"}},
    {
        "loss": {"type": "dpo", "dpo_variant": "robust"},
        "data": {"train": "t.jsonl", "format": "preference"},
    },
    {"stream": {}, "distributed": {}},
]


def test_every_default_of_the_settings_tree_is_the_parsed_default(tmp_path):
    """Each key with one default value, omitted, loads as that value under a config where it
    applies (the schema, docs and help state the same default: they are generated from it)."""
    from assay.settings.schema import setting_rows

    configs = []
    for context in _CONTEXTS:
        raw = {"model": "m", "data": {"train": "t.jsonl"}, "steps": 1, **context}
        configs.append(train_config_from_dict(raw, tmp_path / "c.yaml").to_dict())
    checked = 0
    for key, found in setting_rows():
        if found.kind == "section" or found.default is None or found.default_text is not None:
            continue
        values = []
        for body in configs:
            value = body
            for part in key.split("."):
                value = value.get(part) if isinstance(value, dict) else None
            if value is not None:
                values.append(value)
        expected = json.loads(json.dumps(found.default))
        assert values, f"{key}: no context makes it apply"
        assert values[0] == expected, f"{key}: the tree says {expected}, parser {values[0]}"
        checked += 1
    assert checked >= 30


def test_an_option_declared_twice_or_shadowing_a_shared_key_is_refused(monkeypatch):
    """The adapter section takes each method option from one declaration: two options classes
    giving one name two rules, or an option named like a shared key, stop the import."""
    from dataclasses import dataclass as frozen_dataclass

    import assay.settings.training as training
    from assay.settings.methods import Method
    from assay.settings.rule import setting

    @frozen_dataclass(frozen=True)
    class OtherRank:
        rank: int = setting("Another rank.", "integer", 4, minimum=2)

    @frozen_dataclass(frozen=True)
    class Targets:
        targets: int = setting("A clash.", "integer", 1)

    for options, word in ((OtherRank, "declared twice"), (Targets, "shared adapter key")):
        monkeypatch.setattr(training, "METHODS", {**METHODS, "x": Method("x", "x", options)})
        with pytest.raises(TypeError, match=word):
            shared = {"method": "str", "targets": "tuple[str, ...]"}
            training.with_method_options(type("Section", (), {"__annotations__": shared}))
