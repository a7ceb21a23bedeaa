"""harness/gpu_import.py: receipts that come back from a GPU box join records/ and verify."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from gatekit import PASSING_GATE

from assay.errors import AssayError
from assay.qualify import verify_all

HARNESS = Path(__file__).resolve().parents[2] / "harness" / "gpu_import.py"


def _module():
    spec = importlib.util.spec_from_file_location("gpu_import", HARNESS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_returned_receipts_join_the_ledger_and_verify(gates, tmp_path):
    gates.write("alpha", PASSING_GATE.format(value=1e-4))
    returned = tmp_path / "box" / "receipts"
    gates.run("--gate-no-render", receipts=returned).assert_outcomes(passed=1)
    home = tmp_path / "records"
    assert _module().main([str(returned), "--receipts", str(home / "receipts")]) == 0
    assert len(list((home / "receipts" / "alpha").glob("*.json"))) == 1
    assert (home / "alpha.md").is_file()
    assert verify_all(home / "receipts", home) == []
    # a second import of the same receipts is a no-op, not a duplicate
    assert _module().main([str(returned), "--receipts", str(home / "receipts")]) == 0
    assert len(list((home / "receipts" / "alpha").glob("*.json"))) == 1


def test_tampered_receipt_is_refused_before_anything_is_copied(gates, tmp_path, capsys):
    gates.write("alpha", PASSING_GATE.format(value=1e-4))
    returned = tmp_path / "box" / "receipts"
    gates.run("--gate-no-render", receipts=returned).assert_outcomes(passed=1)
    (path,) = (returned / "alpha").glob("*.json")
    data = json.loads(path.read_text())
    data["claims"][0]["statement"] = "edited after sealing"
    path.write_text(json.dumps(data))
    home = tmp_path / "records" / "receipts"
    assert _module().main([str(returned), "--receipts", str(home)]) == 2
    assert str(path) in capsys.readouterr().err
    assert not home.exists()


def test_empty_folder_is_bad_input(tmp_path):
    with pytest.raises(AssayError, match="no receipts"):
        _module().import_receipts(tmp_path, tmp_path / "home")
