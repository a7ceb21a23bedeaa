"""An adapter names the base model it was trained on, in both formats, and loading it onto
another base is refused as exactly that (issue 54's attack: an adapter for a 30-layer model
attached to a 2-layer one was blamed on its own files disagreeing), before any of its fields
are read against the model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import assay
from assay.adapters import attach, load_adapter, save_adapter
from assay.adapters.base_identity import (
    NUMERICS_KEY,
    base_record,
    check_recorded_base,
    first_difference,
)
from assay.errors import ConfigError
from assay_testing.tiny import FAMILIES, edit_config, writes_gguf

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
    same bytes)."""
    copy = shutil.copytree(folder, tmp_path / "copy")
    edit_config(copy, **changes)
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
    trained = attach(assay.load(source), method, rank=2, targets="attention")
    folder = save_adapter(trained, tmp_path / "a")
    other = _copy_with(source, tmp_path, **changes)
    with pytest.raises(ConfigError, match=rf"base_model_numerics\.{named}: trained on the same"):
        load_adapter(assay.load(other), folder)
    harmless = _copy_with(source, tmp_path / "harmless", max_position_embeddings=4096)
    load_adapter(assay.load(harmless), folder)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=12,
)


KEYS = st.sampled_from(["rope_inverse_frequencies", "hidden_size", "qk_norm", "new"])


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(key=KEYS, value=JSON | st.integers(min_value=10**300, max_value=10**400))
def test_any_recorded_numerics_is_judged_in_one_line(fresh, key, value):
    """The second attack: strings in the recorded rope, or a 400-digit integer, raised Python
    exceptions out of the comparison. Any JSON value now loads (when it is ours) or is refused
    with one ConfigError line."""
    model = fresh()
    recorded = {**base_record(model)}
    recorded[NUMERICS_KEY] = {**recorded[NUMERICS_KEY], key: value}
    try:
        check_recorded_base(Path("a/assay_adapter.json"), model, recorded)
    except ConfigError as error:
        assert "\n" not in str(error) and f"{NUMERICS_KEY}." in str(error)


def test_a_multiplier_a_millionth_off_is_another_base(tiny_models, tmp_path):
    """The second attack: embedding_multiplier 12 -> 12.0001 changed the logits and the adapter
    loaded (a relative tolerance on every real); reals are compared exactly now."""
    source = tiny_models["granite"]["hf"]
    trained = attach(assay.load(source), "lora", rank=2, targets="attention")
    folder = save_adapter(trained, tmp_path / "a")
    factor = json.loads((source / "config.json").read_text())["embedding_multiplier"]
    other = _copy_with(source, tmp_path, embedding_multiplier=factor * (1 + 1e-6))
    with pytest.raises(ConfigError, match=r"base_model_numerics\.embedding_multiplier"):
        load_adapter(assay.load(other), folder)


@pytest.mark.parametrize("family", list(filter(writes_gguf, FAMILIES)))
def test_a_models_gguf_and_folder_are_the_same_base(tiny_models, family):
    """The second attack: a Mistral adapter was refused on its own GGUF (which llama.cpp files
    under llama, without the window that never binds)."""
    folder = assay.load(tiny_models[family]["hf"]).config.numerics()
    gguf = assay.load(tiny_models[family]["gguf"]).config.numerics()
    assert first_difference(folder, gguf) is None
