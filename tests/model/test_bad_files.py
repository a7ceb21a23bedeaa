"""Every malformed model file ends in one ModelFileError naming the file; the CLI exits 2."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import assay
from assay.errors import ConfigError, ModelFileError, UnsupportedModelError
from assay.model.gguf_export import write_gguf
from assay.model.safetensors import SafetensorsSource


def _gguf_string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def raw_gguf(
    tensors: list[tuple[str, list[int], int, int]],
    data: bytes,
    version: int = 3,
    arch: str = "llama",
) -> bytes:
    """A minimal GGUF: one string metadata entry, the given tensor infos, then ``data``."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), 1)
    out += _gguf_string("general.architecture") + struct.pack("<I", 8) + _gguf_string(arch)
    for name, dims, qtype, offset in tensors:
        out += _gguf_string(name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", qtype, offset)
    out += b"\0" * (-len(out) % 32)
    return out + data


def _tensors(path: Path) -> dict[str, torch.Tensor]:
    source = SafetensorsSource(path)
    return {name: source.read(name) for name in source.config.expected_shapes()}


def _load_error(path: Path) -> str:
    with pytest.raises((ModelFileError, UnsupportedModelError)) as info:
        assay.load(path)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message
    return message


def test_wrong_magic(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGML" + b"\0" * 64)
    assert "magic" in _load_error(bad)


def test_unsupported_version(tmp_path):
    bad = tmp_path / "v9.gguf"
    bad.write_bytes(raw_gguf([], b"", version=9))
    assert "version 9" in _load_error(bad)


@pytest.mark.parametrize("keep", [3, 20, 100])
def test_truncated_header(tiny_models, tmp_path, keep):
    bad = tmp_path / "cut.gguf"
    bad.write_bytes(tiny_models["qwen2"]["gguf"].read_bytes()[:keep])
    assert "truncated" in _load_error(bad)


def test_truncated_tensor_data(tiny_models, tmp_path):
    bad = tmp_path / "cut.gguf"
    whole = tiny_models["mistral"]["gguf"].read_bytes()
    bad.write_bytes(whole[: len(whole) - 100])
    assert "run outside the file" in _load_error(bad)


def test_tensor_offset_outside_file(tmp_path):
    bad = tmp_path / "offset.gguf"
    bad.write_bytes(raw_gguf([("token_embd.weight", [4, 4], 0, 1 << 40)], b"\0" * 64))
    message = _load_error(bad)
    assert "token_embd.weight" in message and "outside the file" in message


def test_duplicate_tensor_name(tmp_path):
    bad = tmp_path / "dup.gguf"
    entry = ("token_embd.weight", [4, 4], 0, 0)
    bad.write_bytes(raw_gguf([entry, entry], b"\0" * 64))
    assert "appears twice" in _load_error(bad)


def test_absurd_dimension(tmp_path):
    bad = tmp_path / "huge.gguf"
    bad.write_bytes(raw_gguf([("token_embd.weight", [1 << 62, 1 << 62], 0, 0)], b"\0" * 64))
    assert "absurd shape" in _load_error(bad)


def test_missing_tensor(tiny_models, tmp_path):
    source = SafetensorsSource(tiny_models["mistral"]["hf"])
    tensors = _tensors(tiny_models["mistral"]["hf"])
    del tensors["layers.1.mlp.up_proj.weight"]
    bad = write_gguf(tmp_path / "missing.gguf", source.config, tensors)
    assert "missing tensor 'layers.1.mlp.up_proj.weight'" in _load_error(bad)


def test_shape_disagrees_with_config(tiny_models, tmp_path):
    source = SafetensorsSource(tiny_models["mistral"]["hf"])
    tensors = _tensors(tiny_models["mistral"]["hf"])
    tensors["layers.0.mlp.down_proj.weight"] = torch.zeros(64, 128)
    bad = write_gguf(tmp_path / "shape.gguf", source.config, tensors)
    message = _load_error(bad)
    assert "down_proj" in message and "config says" in message


def test_unsupported_gguf_architecture(tmp_path):
    bad = tmp_path / "gpt2.gguf"
    bad.write_bytes(raw_gguf([], b"", arch="gpt2"))
    assert "'gpt2' is not supported" in _load_error(bad)


def test_unsupported_hf_model_type(tiny_models, tmp_path):
    directory = tmp_path / "gpt2"
    directory.mkdir()
    config = json.loads((tiny_models["qwen2"]["hf"] / "config.json").read_text())
    config["model_type"] = "gpt2"
    (directory / "config.json").write_text(json.dumps(config))
    assert "'gpt2' is not supported" in _load_error(directory)


def _safetensors_with_header(path: Path, header: dict, data: bytes) -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


def _hf_dir_with(tmp_path, tiny_models, header: dict, data: bytes) -> Path:
    directory = tmp_path / "hf"
    directory.mkdir()
    (directory / "config.json").write_text((tiny_models["qwen2"]["hf"] / "config.json").read_text())
    _safetensors_with_header(directory / "model.safetensors", header, data)
    return directory


def test_safetensors_header_longer_than_file(tiny_models, tmp_path):
    directory = tmp_path / "hf"
    directory.mkdir()
    (directory / "config.json").write_text((tiny_models["qwen2"]["hf"] / "config.json").read_text())
    (directory / "model.safetensors").write_bytes(struct.pack("<Q", 10**9) + b"{}")
    assert "larger than the file" in _load_error(directory)


def test_safetensors_overlapping_ranges(tiny_models, tmp_path):
    header = {
        "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
        "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]},
    }
    assert "overlap" in _load_error(_hf_dir_with(tmp_path, tiny_models, header, b"\0" * 24))


def test_safetensors_dtype_shape_mismatch(tiny_models, tmp_path):
    header = {"a": {"dtype": "F32", "shape": [5], "data_offsets": [0, 16]}}
    assert "do not match" in _load_error(_hf_dir_with(tmp_path, tiny_models, header, b"\0" * 16))


def test_missing_config_json(tmp_path):
    directory = tmp_path / "noconfig"
    directory.mkdir()
    assert "config.json" in _load_error(directory)


def test_cli_reports_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"nope" * 8)
    run = subprocess.run(
        [sys.executable, "-m", "assay.cli", "info", str(bad)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 2
    assert "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and "magic" in lines[0]


def test_cli_missing_file_exit_2(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "assay.cli", "info", str(tmp_path / "absent")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "no such file" in run.stderr


@pytest.mark.parametrize("layers", [10**9, 3])
@pytest.mark.parametrize("form", ["hf", "gguf"])
def test_a_declared_layer_count_past_the_tensors_held_is_refused_before_allocating(
    tiny_models, tmp_path, capsys, form, layers
):
    """Issue 52, rule 3 (found by its adversary): a config declaring a billion layers over a
    two-layer file built the table of expected shapes (and `estimate` its plan) first and ran
    out of memory. A count past 1,024 is out of range (issue 51), and one within it is compared
    with the layers the tensors hold first, for info, load and estimate alike; the control, the
    true count, loads."""
    from assay.cli import main

    hf = tiny_models["mistral"]["hf"]
    source = SafetensorsSource(hf)
    if form == "hf":
        bad = tmp_path / "model"
        bad.mkdir()
        for file in hf.iterdir():
            (bad / file.name).write_bytes(file.read_bytes())
        config = json.loads((bad / "config.json").read_text())
        config["num_hidden_layers"] = layers
        (bad / "config.json").write_text(json.dumps(config))
    else:
        good = write_gguf(tmp_path / "good.gguf", source.config, _tensors(hf))
        assay.load(good)  # the control
        data = bytearray(good.read_bytes())
        key = _gguf_string("llama.block_count")
        at = data.index(key) + len(key) + 4  # past the key and its uint32 type tag
        struct.pack_into("<I", data, at, layers)
        bad = tmp_path / "bad.gguf"
        bad.write_bytes(bytes(data))
    from assay.memory.plan import header_config

    # past any model's depth the range refuses it; within it, the tensors held do
    why = "a positive integer up to 1,024" if layers > 1024 else f"declares {layers} layers"
    assert why in _load_error(bad)
    with pytest.raises(ModelFileError, match=why):
        header_config(bad)  # what estimate plans from
    assert main(["info", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and why in err, err


def test_a_tied_config_over_a_stored_head_of_its_own_is_refused(tiny_models, tmp_path):
    """The second attack: tie_word_embeddings true over a folder that stores a different
    lm_head.weight; transformers 5 unties and computes with the stored head, assay tied and
    dropped it (logits 147% off). The control: a stored head equal to the embedding (as some
    checkpoints keep it) loads."""
    import shutil

    from safetensors.torch import load_file, save_file

    folder = shutil.copytree(tiny_models["mistral"]["hf"], tmp_path / "tied")
    config = json.loads((folder / "config.json").read_text())
    assert config["tie_word_embeddings"] is False
    (folder / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": True}))
    with pytest.raises(ModelFileError, match=r"lm_head.weight differs from embed_tokens.weight"):
        assay.load(folder)
    tensors = load_file(folder / "model.safetensors")
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    assert assay.load(folder).config.tie_word_embeddings


def test_a_gguf_of_a_model_whose_window_binds_is_refused(tiny_models, tmp_path):
    """The second attack: a Mistral with sliding_window 4 exported as GGUF, which has no key
    for a window, read back attending over everything (logits 4.14 off). A window no shorter
    than the context never binds, and exports (the tiny Mistral's, 4096 of 512)."""
    import dataclasses

    source = SafetensorsSource(tiny_models["mistral"]["hf"])
    tensors = {name: source.read(name) for name in source.config.expected_shapes()}
    windowed = dataclasses.replace(source.config, sliding_window=4)
    with pytest.raises(ConfigError, match=r"a GGUF has no key for this model's sliding window"):
        write_gguf(tmp_path / "windowed.gguf", windowed, tensors)
    assert not list(tmp_path.iterdir())
    write_gguf(tmp_path / "unbound.gguf", source.config, tensors)
