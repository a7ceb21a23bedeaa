"""An adapter names the base model it was trained on, in both formats, and loading it onto
another base is refused as exactly that (issue 54's attack: an adapter for a 30-layer model
attached to a 2-layer one was blamed on its own files disagreeing), before any of its fields
are read against the model."""

from __future__ import annotations

import json
import shutil

import pytest

import assay
from assay.adapters import attach, load_adapter, save_adapter
from assay.errors import ConfigError
from assay.model.hf_fields import GRANITE_SCALARS

FORMATS = {"lora": "assay_adapter.json", "tinylora": "tinylora_config.json"}


@pytest.fixture
def other_base(tiny_models):
    """A tiny model of another family, shape and weights (Mistral against the Qwen2 base)."""
    return lambda: assay.load(tiny_models["mistral"]["hf"])


@pytest.mark.parametrize("method", sorted(FORMATS))
def test_an_adapter_on_another_base_is_refused_as_that(fresh, other_base, tmp_path, method):
    folder = save_adapter(attach(fresh(), method, rank=2, targets="attention"), tmp_path / "a")
    recorded = json.loads((folder / FORMATS[method]).read_text())["base_model_sha256"]
    assert recorded == fresh().fingerprint.canonical_sha256
    with pytest.raises(ConfigError, match=r"base_model_sha256: trained on another base model"):
        load_adapter(other_base(), folder)
    load_adapter(fresh(), folder)  # the control: its own base loads it


@pytest.mark.parametrize("method", sorted(FORMATS))
def test_an_adapter_that_records_no_base_warns_in_one_line(fresh, tmp_path, method):
    folder = save_adapter(attach(fresh(), method, rank=2, targets="attention"), tmp_path / "a")
    config = folder / FORMATS[method]
    data = json.loads(config.read_text())
    del data["base_model_sha256"]
    config.write_text(json.dumps(data))
    with pytest.warns(UserWarning, match=r"the base model could not be verified") as seen:
        load_adapter(fresh(), folder)
    assert all("\n" not in str(w.message) for w in seen)


def _copy_with(folder, tmp_path, **changes):
    """A copy of the model folder ``folder`` whose config.json has ``changes`` (its weights the
    same bytes); a rope theta goes where transformers 5 wrote it."""
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    path = copy / "config.json"
    config = json.loads(path.read_text())
    if "rope_theta" in changes and isinstance(config.get("rope_parameters"), dict):
        config["rope_parameters"]["rope_theta"] = changes.pop("rope_theta")
    path.write_text(json.dumps({**config, **changes}))
    return copy


@pytest.mark.parametrize("method", sorted(FORMATS))
@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"embedding_multiplier": 1.0}, "embedding_multiplier"),
        ({"logits_scaling": 2.0}, "logits_scaling"),
        ({"rms_norm_eps": 1e-2}, "rms_norm_eps"),
        ({"rope_theta": 777.0}, "rope_inverse_frequencies"),
        ({"model_type": "llama"}, "architecture"),
    ],
)
def test_the_same_weights_under_another_config_are_another_base(
    tiny_models, tmp_path, method, changes, named
):
    """Issue 51's attack: an adapter trained on Granite loaded onto the same weights with the
    multipliers at 1, or read as Llama, and gave other tokens with no word. The adapter records
    the base's numerics, and the first that differs is named. The control: a change no forward
    pass reads (the context length) loads."""
    source = tiny_models["granite"]["hf"]
    if changes.get("model_type") == "llama":
        changes = {**changes, **dict.fromkeys(GRANITE_SCALARS)}
    trained = attach(assay.load(source), method, rank=2, targets="attention")
    folder = save_adapter(trained, tmp_path / "a")
    other = _copy_with(source, tmp_path, **changes)
    with pytest.raises(ConfigError, match=rf"base_model_numerics\.{named}: trained on the same"):
        load_adapter(assay.load(other), folder)
    harmless = _copy_with(source, tmp_path / "harmless", max_position_embeddings=4096)
    load_adapter(assay.load(harmless), folder)
