"""The adapter_config.json assay writes equals PEFT's own LoraConfig for the same settings, field
for field; the files beside it carry what loaders look for; and saving what PEFT cannot hold is
refused by name."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from peft import LoraConfig
from safetensors import safe_open

from assay.adapters import adapter_modules, attach
from assay.adapters.inject import GROUPS
from assay.adapters.peft_io import check_base, save_peft, spec_from_peft
from assay.errors import ConfigError
from assay.settings.methods import PEFT_METHODS

CASES = {
    "lora-all-layers": ("lora", {"targets": ["q_proj", "v_proj"]}),
    "rslora-some-layers": ("rslora", {"targets": ["k_proj", "down_proj"], "layers": [1]}),
    "dora-dropout": ("dora", {"targets": ["o_proj"], "dropout": 0.25}),
    "lora_fa": ("lora_fa", {"targets": ["up_proj", "gate_proj"]}),
}


@pytest.mark.parametrize("case", CASES)
def test_written_config_equals_peft_lora_config(fresh, tmp_path, case):
    method, options = CASES[case]
    model = attach(fresh(), method, rank=4, alpha=12, **options)
    folder = save_peft(model, tmp_path / "peft")
    written = json.loads((folder / "adapter_config.json").read_text())
    layers = options.get("layers")
    reference = LoraConfig(
        r=4,
        lora_alpha=12,
        lora_dropout=options.get("dropout", 0.0),
        target_modules=options["targets"],
        layers_to_transform=layers,
        use_rslora=method == "rslora",
        use_dora=method == "dora",
        task_type="CAUSAL_LM",
        inference_mode=True,
        # as PEFT records model.name_or_path: the folder the base was loaded from
        base_model_name_or_path=model.assay_base_model["name_or_path"],
    ).to_dict()
    reference["target_modules"] = sorted(reference["target_modules"])
    written["target_modules"] = sorted(written["target_modules"])
    differ = {k: (v, reference[k]) for k, v in written.items() if v != reference.get(k, v)}
    assert differ == {}
    assert set(written) <= set(reference)
    assert written["layers_to_transform"] == layers  # None: every layer
    assert Path(written["base_model_name_or_path"]).is_dir()  # the base, never null


def test_the_weights_and_sidecar_say_what_they_are(fresh, tmp_path):
    model = attach(fresh(), "dora", rank=4)
    folder = save_peft(model, tmp_path / "peft")
    with safe_open(folder / "adapter_model.safetensors", framework="pt") as handle:
        assert handle.metadata() == {"format": "pt"}  # transformers refuses other formats
        keys = set(handle.keys())
    assert "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight" in keys
    assert "base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector" in keys
    side = json.loads((folder / "assay_adapter.json").read_text())
    assert side["format"] == "assay-peft/1" and side["spec"]["method"] == "dora"
    assert len(side["base_model_sha256"]) == 64


def test_methods_peft_cannot_hold_are_refused_by_name(fresh, tmp_path):
    held = ", ".join(PEFT_METHODS)
    with pytest.raises(ConfigError, match=rf"PEFT format holds {held}; this model has None"):
        save_peft(fresh(), tmp_path / "none")
    with pytest.raises(ConfigError, match=r"; this model has tinylora$"):
        save_peft(attach(fresh(), "tinylora", rank=2), tmp_path / "tiny")
    merged = attach(fresh(), "lora", rank=4)
    for _, module in adapter_modules(merged):
        module.merge()
    with pytest.raises(ConfigError, match="cannot save a merged adapter in PEFT format"):
        save_peft(merged, tmp_path / "merged")
    assert not (tmp_path / "merged").exists()


def _peft_folder(fresh, tmp_path, edit: dict) -> tuple:
    """A PEFT-written folder (no assay sidecar) of a rank-4 LoRA with ``edit`` applied."""
    folder = save_peft(attach(fresh(), "lora", rank=4, targets=["q_proj"]), tmp_path / "peft")
    (folder / "assay_adapter.json").unlink()
    path = folder / "adapter_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **edit}))
    return folder, path


READ_BACK = {
    "layers list": ({"layers_to_transform": [1]}, "layers", (1,)),
    "layers int": ({"layers_to_transform": 1}, "layers", (1,)),
    "dropout": ({"lora_dropout": 0.25}, "options", {"dropout": 0.25}),
    "rank one": ({"r": 1}, "rank", 1),
    "all-linear": ({"target_modules": "all-linear"}, "targets", tuple(GROUPS["all-linear"])),
    "dotted names": (
        {"target_modules": ["model.layers.0.self_attn.q_proj"]},
        "targets",
        ("q_proj",),
    ),
}


@pytest.mark.parametrize("case", READ_BACK)
def test_peft_fields_are_read_back(fresh, tmp_path, case):
    edit, field, want = READ_BACK[case]
    folder, _ = _peft_folder(fresh, tmp_path, edit)
    assert getattr(spec_from_peft(folder, 2), field) == want


REFUSED = {
    "fan_in_fan_out": ({"fan_in_fan_out": True}, r"fan_in_fan_out=True is not supported"),
    "other peft type": ({"peft_type": "LOHA"}, r"peft_type 'LOHA'; expected 'LORA'"),
    "layers text": (
        {"layers_to_transform": "x"},
        r"layers_to_transform: expected list or int or null, got 'x'",
    ),
    "rank bool": ({"r": True}, r"r: expected int, got True"),
    "alpha bool": ({"lora_alpha": True}, r"lora_alpha: expected int or float, got True"),
    "rank zero": ({"r": 0}, r"r: must be >= 1, got 0"),
    # third adversary, rule 6: a layer the model lacks was refused without file or field
    "layer past the model": (
        {"layers_to_transform": [1, 7]},
        r"layers_to_transform: 7 is not a layer of the model \(valid 0\.\.1, it has 2 layers\)",
    ),
}


@pytest.mark.parametrize("case", REFUSED)
def test_unsupported_peft_fields_are_refused_naming_file_and_key(fresh, tmp_path, case):
    edit, message = REFUSED[case]
    folder, path = _peft_folder(fresh, tmp_path, edit)
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: {message}"):
        spec_from_peft(folder, 2)


def test_another_base_is_refused_naming_both_fingerprints(fresh, tmp_path):
    model = attach(fresh(), "lora", rank=4)
    folder = save_peft(model, tmp_path / "peft")
    side = json.loads((folder / "assay_adapter.json").read_text())
    ours = side["base_model_sha256"]
    side["base_model_sha256"] = "ab" * 32
    (folder / "assay_adapter.json").write_text(json.dumps(side))
    with pytest.raises(
        ConfigError, match=rf"sha256 abababababab\) than the one given \(sha256 {ours[:12]}\)"
    ):
        check_base(folder, fresh())
