"""Train config: schema validation, defaults, one-line errors, combinations, fingerprint."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from assay.errors import ConfigError
from assay.settings.loader import config_fingerprint, load_train_config, model_path

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.yaml"))
MINIMAL = "model: m.gguf\ndata:\n  train: d.jsonl\nsteps: 3\n"


def _write(tmp_path: Path, text: str, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _error(tmp_path: Path, text: str) -> str:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_train_config(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(path))
    return message


def test_schema_is_valid_draft_2020_12_and_closed_everywhere() -> None:
    path = Path(__file__).parents[2] / "schemas/train-config.schema.json"
    schema = json.loads(path.read_text())
    Draft202012Validator.check_schema(schema)
    open_objects = []

    def walk(node: object, where: str) -> None:
        if isinstance(node, dict):
            kind = node.get("type")
            is_object = kind == "object" or (isinstance(kind, list) and "object" in kind)
            if is_object and node.get("additionalProperties") is not False:
                open_objects.append(where)
            for key, value in node.items():
                walk(value, f"{where}.{key}")

    walk(schema, "$")
    assert open_objects == []


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_each_example_config_validates(path: Path) -> None:
    config = load_train_config(path)
    assert Path(config.data.train).is_file()
    # a GGUF, or the Hugging Face folder examples/write_smollm2_folder.py writes beside it
    model = model_path(config)
    assert model.name.endswith(".gguf") or model == path.parent / "smollm2-hf"


def test_examples_exist() -> None:
    assert {p.name for p in EXAMPLES} >= {"smollm2-lora.yaml", "smollm2-tinylora-nf4.yaml"}


def test_minimal_config_gets_defaults_and_resolved_paths(tmp_path: Path) -> None:
    config = load_train_config(_write(tmp_path, MINIMAL))
    assert config.model == str(tmp_path / "m.gguf")
    assert config.data.train == str(tmp_path / "d.jsonl")
    assert config.output.dir == str(tmp_path / "runs" / "run")
    assert (config.storage, config.adapter.method, config.adapter.rank) == ("float32", "lora", 8)
    assert config.adapter.u is None and config.loss.chunk_size is None
    assert config.optim.betas == (0.9, 0.999) and config.optim.lr == 2e-4
    assert (config.batch.micro_batch, config.batch.grad_accum, config.seed) == (1, 1, 0)
    assert config.data.truncate is False and config.stream is None


def test_yaml_exponent_without_dot_is_a_float(tmp_path: Path) -> None:
    config = load_train_config(_write(tmp_path, MINIMAL + "optim:\n  lr: 1e-4\n"))
    assert config.optim.lr == 1e-4


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("optim:\n  lrr: 0.1\n", "optim.lrr: unknown key (did you mean 'lr'?)"),
        ("stepz: 4\n", "stepz: unknown key (did you mean 'steps'?)"),
        ("adapter:\n  methd: lora\n", "adapter.methd: unknown key (did you mean 'method'?)"),
        ("storage: nf5\n", "storage: 'nf5' is not one of"),
        ("optim:\n  lr: fast\n", "optim.lr: expected number, got string 'fast'"),
        ("batch:\n  micro_batch: 0\n", "batch.micro_batch: must be >= 1, got 0"),
        ("batch:\n  grad_accum: -2\n", "batch.grad_accum: must be >= 1, got -2"),
        ("data:\n  train: d.jsonl\n  truncate: 3\n", "data.truncate: expected boolean"),
        ("optim:\n  betas: [0.9]\n", "optim.betas: needs at least 2 item(s)"),
        ("budget: lots\n", "budget: 'lots' is not a size"),
    ],
)
def test_bad_field_is_one_line_naming_it(tmp_path: Path, extra: str, expected: str) -> None:
    text = MINIMAL
    if extra.startswith("data:"):
        text = MINIMAL.replace("data:\n  train: d.jsonl\n", "")
    assert expected in _error(tmp_path, text + extra)


def test_missing_required_key_is_named(tmp_path: Path) -> None:
    assert "data.train: required key is missing" in _error(
        tmp_path, "model: m\ndata:\n  format: text\nsteps: 1\n"
    )
    assert "steps: required key is missing" in _error(tmp_path, "model: m\ndata: {train: d}\n")


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("storage: nf4\nadapter:\n  method: full\n", "needs storage float32, not nf4"),
        (
            "storage: nf4_double_quant\nadapter:\n  method: full\n",
            "needs storage float32, not nf4_double_quant",
        ),
        ("storage: bf16\nadapter:\n  method: full\n", "needs storage float32, not bf16"),
        ("adapter:\n  method: full\n  layers: [1]\n", "adapter.layers: does not apply"),
        ("loss:\n  type: chunked_ce\n  chunk_size: 0\n", "loss.chunk_size: must be >= 1"),
        ("loss:\n  type: ce\n  chunk_size: 64\n", "loss.chunk_size: does not apply to loss ce"),
        ("adapter:\n  method: lora\n  u: 3\n", "adapter.u: does not apply to method lora"),
        ("adapter:\n  method: tinylora\n  rank: 3\n", "adapter.rank: does not apply"),
        ("optim:\n  warmup_steps: 9\n", "optim.warmup_steps: 9 exceeds steps (3)"),
        ("loss:\n  type: dpo\n", None),
    ],
)
def test_impossible_combination_names_the_field(tmp_path: Path, extra: str, expected) -> None:
    if expected is None:  # dpo with auto format is fine; dpo with text rows is not
        load_train_config(_write(tmp_path, MINIMAL + extra))
        text = MINIMAL.replace("train: d.jsonl", "train: d.jsonl\n  format: text") + extra
        assert "data.format: text rows cannot train loss dpo" in _error(tmp_path, text)
        return
    assert expected in _error(tmp_path, MINIMAL + extra)


def test_completion_only_mask_on_text_rows_is_refused(tmp_path: Path) -> None:
    fields = "train: d.jsonl\n  format: text\n  mask: completion_only"
    text = MINIMAL.replace("train: d.jsonl", fields)
    assert "data.mask: completion_only needs a completion" in _error(tmp_path, text)


def test_duplicate_key_and_bad_yaml_name_the_line(tmp_path: Path) -> None:
    duplicate = _error(tmp_path, MINIMAL + "steps: 4\n")
    assert "line 5: invalid YAML (duplicate key 'steps')" in duplicate
    assert "line 2" in _error(tmp_path, "model: m\n  bad: [\n")
    assert "expected a mapping" in _error(tmp_path, "- a\n- b\n")
    assert "the file is empty" in _error(tmp_path, "")


def test_missing_config_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such config file"):
        load_train_config(tmp_path / "absent.yaml")


def test_budget_sizes_parse_to_bytes(tmp_path: Path) -> None:
    config = load_train_config(_write(tmp_path, MINIMAL + "budget: 1.5GiB\n"))
    assert config.budget == 3 * 2**29
    assert load_train_config(_write(tmp_path, MINIMAL + "budget: 1000\n")).budget == 1000
    assert "budget: a size must be at least 1 byte" in _error(tmp_path, MINIMAL + "budget: 0GiB\n")


def test_config_fingerprint_tracks_training_fields_only(tmp_path: Path) -> None:
    base = config_fingerprint(load_train_config(_write(tmp_path, MINIMAL)))
    assert len(base) == 64
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    same_elsewhere = load_train_config(_write(moved, MINIMAL + "output:\n  log_every: 3\n"))
    assert config_fingerprint(same_elsewhere) == base
    changed_lr = load_train_config(_write(tmp_path, MINIMAL + "optim:\n  lr: 0.001\n", "b.yaml"))
    assert config_fingerprint(changed_lr) != base
    changed_seed = load_train_config(_write(tmp_path, MINIMAL + "seed: 1\n", "c.yaml"))
    assert config_fingerprint(changed_seed) != base


@pytest.mark.parametrize("example", sorted((Path(__file__).parents[2] / "examples").glob("*.yaml")))
def test_config_as_yaml_round_trips(example: Path, tmp_path: Path) -> None:
    from assay.settings.loader import config_as_yaml, train_config_from_dict

    config = load_train_config(example)
    again = train_config_from_dict(config_as_yaml(config), tmp_path / "copy.yaml")
    assert dataclasses.replace(again, source=config.source) == config
