"""A PEFT adapter_config.json with a wrong type or missing key is a ConfigError naming both."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "robustness"))

import export_faults

from assay.adapters import load_adapter
from assay.adapters.export import export
from assay.errors import ConfigError
from assay.model import Decoder
from assay_testing.tiny import llama_config


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    out = tmp_path_factory.mktemp("peft") / "a"
    export(export_faults.adapted_model(2), out, "peft")
    for name in ("assay_manifest.json", "assay_adapter.json"):  # as PEFT itself writes it
        (out / name).unlink()
    return out


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"r": "eight"}, "r"),
        ({"r": None}, "r"),
        ({"lora_alpha": "16"}, "lora_alpha"),
        ({"target_modules": 3}, "target_modules"),
        ({"use_dora": "yes"}, "use_dora"),
        ({"layers_to_transform": ["x"]}, "layers_to_transform"),
    ],
)
def test_wrong_types_name_the_file_and_key(clean, tmp_path, change, key):
    import shutil

    folder = tmp_path / "a"
    shutil.copytree(clean, folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    for k, v in change.items():
        if v is None:
            del config[k]
        else:
            config[k] = v
    (folder / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError) as info:
        load_adapter(Decoder(llama_config()), folder)
    assert str(info.value).startswith(f"{folder / 'adapter_config.json'}: {key}: ")


def test_the_untouched_folder_loads(clean):
    load_adapter(Decoder(llama_config()), clean)
