"""An adapter names the base model it was trained on, in both formats, and loading it onto
another base is refused as exactly that (issue 54's attack: an adapter for a 30-layer model
attached to a 2-layer one was blamed on its own files disagreeing), before any of its fields
are read against the model."""

from __future__ import annotations

import json

import pytest

import assay
from assay.adapters import attach, load_adapter, save_adapter
from assay.errors import ConfigError

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
