"""Travelling weights: a GGUF skeleton rebuilt with seeded values keeps every name, shape,
type and metadata field, deterministically, and ASSAY_SMOLLM2_GGUF stands it in."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from gguf import GGUFReader

import assay
from assay.errors import AssayError
from assay.model.gguf_export import write_gguf
from assay_testing import real_model
from assay_testing.gguf_skeleton import (
    extract_skeleton,
    file_sha256,
    load_skeleton,
    save_skeleton,
    write_travel_model,
)
from assay_testing.tiny import llama_config


@pytest.fixture
def source(tmp_path: Path) -> Path:
    model = assay.model.Decoder(llama_config())
    tensors = {n: p.detach() for n, p in model.state_dict().items()}
    extra = {"general.name": ("tiny", __import__("gguf").GGUFValueType.STRING)}
    return write_gguf(
        tmp_path / "src.gguf", model.config, tensors, tensor_type="F16", extra_metadata=extra
    )


def test_rebuild_keeps_specs_and_metadata(source: Path, tmp_path: Path):
    skeleton = load_skeleton(save_skeleton(extract_skeleton(source), tmp_path / "s.json.gz"))
    built = write_travel_model(skeleton, tmp_path / "travel.gguf", seed=0)
    a, b = GGUFReader(str(source)), GGUFReader(str(built))
    assert [(t.name, t.tensor_type, list(t.shape)) for t in a.tensors] == [
        (t.name, t.tensor_type, list(t.shape)) for t in b.tensors
    ]
    assert {k: f.contents() for k, f in a.fields.items() if not k.startswith("GGUF.")}.items() <= {
        k: f.contents() for k, f in b.fields.items()
    }.items()
    model = assay.load(built)
    assert torch.isfinite(model(torch.tensor([[1, 2, 3]]))).all()


def test_rebuild_is_deterministic_per_seed(source: Path, tmp_path: Path):
    skeleton = extract_skeleton(source)
    one = file_sha256(write_travel_model(skeleton, tmp_path / "a.gguf", seed=0))
    again = file_sha256(write_travel_model(skeleton, tmp_path / "b.gguf", seed=0))
    other = file_sha256(write_travel_model(skeleton, tmp_path / "c.gguf", seed=1))
    assert one == again != other


def test_bad_skeleton_names_the_file(tmp_path: Path):
    bad = tmp_path / "s.json.gz"
    bad.write_bytes(b"not gzip")
    with pytest.raises(AssayError, match=str(bad)):
        load_skeleton(bad)


def test_override_stands_in_for_smollm2(source: Path, monkeypatch):
    monkeypatch.setenv(real_model.OVERRIDE_ENV, str(source))
    assert real_model.smollm2_path() == source
    assert real_model.smollm2_reference() == str(source)
    monkeypatch.setenv(real_model.OVERRIDE_ENV, str(source) + ".missing")
    with pytest.raises(AssayError, match="no such file"):
        real_model.smollm2_path()
