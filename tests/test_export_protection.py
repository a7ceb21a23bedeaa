"""Export staging, destination protection and the manifest that binds config and weights."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "robustness"))

import export_faults

from assay.adapters.export import check_destination, export
from assay.adapters.manifest import MANIFEST, verify_manifest
from assay.errors import ConfigError


def test_a_non_empty_destination_is_refused_unless_forced(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    check_destination(out)  # empty: fine
    (out / "old.txt").write_text("x")
    with pytest.raises(ConfigError, match=r"out: export destination is not empty"):
        export(export_faults.adapted_model(1), out, "peft")
    assert sorted(p.name for p in out.iterdir()) == ["old.txt"]
    with pytest.raises(ConfigError, match=r"--force replaces only an earlier assay export"):
        export(export_faults.adapted_model(2), out, "peft", force=True)  # not ours: kept
    assert sorted(p.name for p in out.iterdir()) == ["old.txt"]
    (out / "old.txt").unlink()
    export(export_faults.adapted_model(1), out, "peft")
    export(export_faults.adapted_model(2), out, "peft", force=True)  # an earlier export: replaced
    assert export_faults.folder_step(out) == 2


def test_the_manifest_binds_config_and_weights(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    export(export_faults.adapted_model(1), one, "peft")
    export(export_faults.adapted_model(2), two, "peft")
    assert verify_manifest(one)["kind"] == "peft"
    # rsLoRA weights under a LoRA config: the silent wrong-scale load
    (one / "adapter_config.json").write_bytes((two / "adapter_config.json").read_bytes())
    with pytest.raises(ConfigError, match=r"one/adapter_config\.json: sha256 differs"):
        export_faults.folder_step(one)


def test_a_folder_without_manifest_still_loads(tmp_path):
    out = tmp_path / "peft"
    export(export_faults.adapted_model(3), out, "peft")
    (out / MANIFEST).unlink()
    assert verify_manifest(out) is None
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["use_rslora"] is True


def test_export_faults_leave_the_old_folder(tmp_path):
    assert export_faults.fault_trials(tmp_path) == {"read_only": 0, "full_disk": 0}


@pytest.mark.slow
def test_kill_during_export_leaves_complete_or_absent(tmp_path):
    report = export_faults.kill_trials(tmp_path / "out", kills=4, seed=5)
    assert report.mixed == 0, report
    control = export_faults.kill_trials(tmp_path / "naive", kills=4, seed=5, in_place=True)
    assert control.mixed > 0, control


def test_a_gguf_export_that_cannot_be_written_names_its_file(tmp_path, monkeypatch):
    """Adversary case F9: numpy's short write on a full disk carries no file name."""
    from gguf import GGUFWriter

    def short(self, *args, **kwargs):
        raise OSError("10240 requested and 264 written")

    monkeypatch.setattr(GGUFWriter, "write_tensors_to_file", short)
    target = tmp_path / "model.gguf"
    with pytest.raises(OSError) as caught:
        export(export_faults.adapted_model(1), target, "gguf")
    assert caught.value.filename == str(target) and "264 written" in caught.value.strerror
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no temporary left behind
