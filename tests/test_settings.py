"""The settings tree is the one home of every train-config key: the shipped schema, the docs
table and ``assay train --help`` are generated from it, and the loader fills its defaults."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from assay import settings
from assay.cli.docs import packaged_doc
from assay.settings import schema as settings_schema
from assay.settings.schema import generated_files, main, setting_rows

ROOT = Path(__file__).resolve().parents[1]


def test_the_shipped_schema_and_docs_are_what_the_tree_generates():
    stale = [p for p, text in generated_files().items() if (ROOT / p).read_text("utf-8") != text]
    assert stale == [], f"run `python -m assay.settings.schema --write`; stale: {stale}"


def test_the_check_command_notices_an_edited_tree(tmp_path, monkeypatch, capsys):
    """Control: a help line changed in the tree (and not regenerated) is reported stale."""
    for path, text in generated_files().items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text, "utf-8")
    assert main(["--check", "--root", str(tmp_path)]) == 0
    field = next(f for f in dataclasses.fields(settings.DataConfig) if f.name == "seq_len")
    edited = dataclasses.replace(field.metadata["rule"], help="Tokens per row, at most.")
    monkeypatch.setattr(field, "metadata", {"rule": edited})
    assert main(["--check", "--root", str(tmp_path)]) == 1
    assert sorted(capsys.readouterr().out.split()) == sorted(
        ["stale:", settings_schema.SCHEMA_FILE, "stale:", settings_schema.DOCS_FILE]
    )


def test_the_generated_schema_is_valid_and_states_each_fixed_default():
    schema = settings_schema.build_schema()
    Draft202012Validator.check_schema(schema)
    for key, found in setting_rows():
        node = schema
        for part in key.split("."):
            node = node["properties"][part]
        if found.kind != "section" and found.default_text is None and found.default is not None:
            assert node.get("default") == json.loads(json.dumps(found.default)), key


def test_the_loader_validates_with_the_generated_schema(tmp_path):
    from assay.settings.yaml_reader import validator

    assert validator().schema == settings_schema.build_schema()


def test_every_key_is_in_the_docs_the_help_and_the_schema():
    docs = packaged_doc("settings")
    help_text = subprocess.run(
        [sys.executable, "-m", "assay.cli", "train", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for key, found in setting_rows():
        assert f"`{key}`" in docs, key
        leaf = key.rsplit(".", 1)[-1]
        assert leaf in help_text, key
        if found.choices is not None:
            assert all(str(choice) in docs for choice in found.choices), key


@pytest.mark.parametrize(
    ("key", "selector", "expected"),
    [
        ("loss.beta", "simpo", 2.0),
        ("loss.beta", "dpo", 0.1),
        ("loss.beta", "ce", None),
        ("adapter.rank", "tinylora", None),
        ("adapter.u", "tinylora", 13),
        ("data.seq_len", None, 512),
    ],
)
def test_defaults_depend_on_the_selector_where_the_tree_says(key, selector, expected):
    assert settings.default(key, selector) == expected


def test_the_cli_and_the_predictor_take_their_choices_and_defaults_from_the_tree():
    from assay.cli.dispatch import build_parser
    from assay.memory.predict import Plan
    from assay.train.data.dataset import SEQ_LEN
    from assay.train.losses import CHUNK_SIZE

    info = build_parser()._subparsers._group_actions[0].choices["info"]
    storage = next(a for a in info._actions if a.dest == "storage")
    assert tuple(storage.choices) == settings.STORAGES == settings.rule("storage").choices
    plan = Plan(model=None)  # type: ignore[arg-type]
    assert plan.seq_len == SEQ_LEN == settings.default("data.seq_len")
    assert plan.chunk_size == CHUNK_SIZE == settings.default("loss.chunk_size", "chunked_ce")
    assert plan.rank == settings.default("adapter.rank", "lora")
    assert plan.tiny_u == settings.default("adapter.u", "tinylora")
