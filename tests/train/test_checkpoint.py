"""Checkpoints: manifest verification, fingerprint refusal, one-line errors, exact AdamW resume."""

from __future__ import annotations

import dataclasses
import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from assay.train.checkpoint.directory import CheckpointError, load_checkpoint, save_checkpoint
from assay.train.data.dataset import BatchIterator, Cursor

PRINTS = {"config": "c" * 64, "dataset": "d" * 64, "model": "m" * 64}
STEPS, SPLIT = 8, 3


def _model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.Dropout(0.3), nn.GELU(), nn.Linear(16, 4))


def _setup(seed: int = 0):
    model = _model(seed)
    params = dict(model.named_parameters())
    opt = torch.optim.AdamW(params.values(), lr=3e-3, weight_decay=0.1, betas=(0.8, 0.95))
    warm = lambda s: min(1.0, (s + 1) / 3) * 0.5 * (1 + math.cos(math.pi * s / STEPS))  # noqa: E731
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warm)
    return model, params, opt, sched


DATA = torch.randn(20, 6, generator=torch.Generator().manual_seed(5))


def _step(model, opt, sched, batches: BatchIterator) -> torch.Tensor:
    x = DATA[next(batches)]
    noise = torch.randn_like(x) * 0.01 + float(np.random.rand()) * 1e-3 + random.random() * 1e-3
    loss = model(x + noise).pow(2).mean()  # dropout and randn: RNG-dependent every step
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    return loss.detach()


def _seed_all(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def _straight():
    model, params, opt, sched = _setup()
    _seed_all(1)
    batches = BatchIterator(len(DATA), 4, Cursor(seed=3))
    losses = [_step(model, opt, sched, batches) for _ in range(STEPS)]
    return params, opt, losses


def _resumed(tmp_path: Path, *, restore_rng: bool = True, restore_optimizer: bool = True):
    model, params, opt, sched = _setup()
    _seed_all(1)
    batches = BatchIterator(len(DATA), 4, Cursor(seed=3))
    losses = [_step(model, opt, sched, batches) for _ in range(SPLIT)]
    save_checkpoint(tmp_path, SPLIT, params, opt, sched.state_dict(), batches.cursor, PRINTS)
    del model, params, opt, sched
    _seed_all(999)  # whatever the process did meanwhile
    model, params, opt, sched = _setup(seed=42)  # fresh objects, different init
    ckpt = load_checkpoint(tmp_path, fingerprints=PRINTS)
    ckpt.restore(params, opt if restore_optimizer else None, rng=restore_rng)
    sched.load_state_dict(ckpt.scheduler_state)
    batches = BatchIterator(len(DATA), 4, Cursor.from_dict(ckpt.cursor))
    losses += [_step(model, opt, sched, batches) for _ in range(STEPS - SPLIT)]
    return params, opt, losses


def _same(a, b) -> bool:
    pa, oa, la = a
    pb, ob, lb = b
    if not all(torch.equal(x, y) for x, y in zip(la, lb, strict=True)):
        return False
    if not all(torch.equal(pa[n], pb[n]) for n in pa):
        return False
    sa, sb = oa.state_dict()["state"], ob.state_dict()["state"]
    return all(torch.equal(sa[i][k], sb[i][k]) for i in sa for k in sa[i])


def test_adamw_resume_is_bit_exact(tmp_path: Path) -> None:
    assert _same(_resumed(tmp_path), _straight())


def test_resume_without_rng_or_optimizer_state_diverges(tmp_path: Path) -> None:
    # Controls: the bitwise comparison above can fail.
    straight = _straight()
    assert not _same(_resumed(tmp_path / "a", restore_rng=False), straight)
    assert not _same(_resumed(tmp_path / "b", restore_optimizer=False), straight)


def _saved(tmp_path: Path, step: int = 1) -> Path:
    model, params, opt, sched = _setup()
    _step(model, opt, sched, BatchIterator(len(DATA), 4))
    return save_checkpoint(tmp_path, step, params, opt, sched.state_dict(), Cursor(), PRINTS)


def test_layout_manifest_and_latest_pointer(tmp_path: Path) -> None:
    path = _saved(tmp_path, 10)
    assert path.name == "step-000010" and (tmp_path / "latest").read_text() == "step-000010\n"
    manifest = json.loads((path / "manifest.json").read_text())
    assert set(manifest["files"]) == {p.name for p in path.iterdir()} - {"manifest.json"}
    assert manifest["fingerprints"] == PRINTS and manifest["step"] == 10
    assert not any(p.suffix == ".pt" or p.suffix == ".pkl" for p in path.iterdir())
    assert load_checkpoint(path).step == 10 and load_checkpoint(tmp_path).step == 10


@pytest.mark.parametrize("which", ["config", "dataset", "model"])
def test_changed_fingerprint_is_refused_by_name(tmp_path: Path, which: str) -> None:
    _saved(tmp_path)
    changed = {**PRINTS, which: "x" * 64}
    with pytest.raises(CheckpointError, match=rf"{which} fingerprint differs") as info:
        load_checkpoint(tmp_path, fingerprints=changed)
    others = [k for k in PRINTS if k != which]
    assert not any(f"{k} fingerprint" in str(info.value) for k in others)


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        ("delete:optimizer.safetensors", r"optimizer\.safetensors: missing checkpoint file"),
        ("truncate:trainables.safetensors", r"trainables\.safetensors: \d+ bytes, the manifest"),
        ("flip:rng.json", r"rng\.json: sha256 differs"),
        ("delete:manifest.json", r"manifest\.json: missing"),
    ],
)
def test_damaged_checkpoint_is_a_one_line_error_naming_the_file(tmp_path, damage, expected):
    path = _saved(tmp_path)
    action, name = damage.split(":")
    target = path / name
    if action == "delete":
        target.unlink()
    elif action == "truncate":
        target.write_bytes(target.read_bytes()[:-100])
    else:
        data = bytearray(target.read_bytes())
        data[10] ^= 1
        target.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=expected) as info:
        load_checkpoint(tmp_path)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        ({"format": "other"}, r"not an .* manifest"),
        ({"files": ["trainables.safetensors"]}, r"field 'files' is missing or malformed"),
        ({"fingerprints": None}, r"field 'fingerprints' is missing or malformed"),
        ({"step": -1}, r"field 'step' is not a non-negative integer"),
        ({"step": True}, r"field 'step' is not a non-negative integer"),
    ],
)
def test_a_malformed_manifest_is_refused_naming_the_field(tmp_path, edit, expected):
    path = _saved(tmp_path)
    manifest = json.loads((path / "manifest.json").read_text())
    (path / "manifest.json").write_text(json.dumps({**manifest, **edit}))
    with pytest.raises(CheckpointError, match=expected):
        load_checkpoint(tmp_path)


def test_saving_over_the_latest_step_is_refused(tmp_path: Path) -> None:
    _saved(tmp_path, 3)
    with pytest.raises(CheckpointError, match=r"step-000003: is the latest checkpoint; refusing"):
        _saved(tmp_path, 3)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a process without CUDA")
def test_cuda_generators_restored_without_cuda_name_the_checkpoint(tmp_path: Path) -> None:
    ckpt = load_checkpoint(_saved(tmp_path))
    tensors = {**ckpt.rng_tensors, "torch_cuda/0": ckpt.rng_tensors["torch_cpu"]}
    ckpt = dataclasses.replace(ckpt, rng_tensors=tensors)
    with pytest.raises(CheckpointError, match=r"step-000001: saved 1 CUDA generator"):
        ckpt.restore(dict(_model(0).named_parameters()), rng=True)


def test_restore_refuses_other_parameters(tmp_path: Path) -> None:
    ckpt = load_checkpoint(_saved(tmp_path))
    model = nn.Linear(6, 4)
    with pytest.raises(CheckpointError, match="trainables differ"):
        ckpt.restore(dict(model.named_parameters()))


def test_failed_save_keeps_the_previous_checkpoint(tmp_path: Path, monkeypatch) -> None:
    _saved(tmp_path, 1)
    _model_unused, params, opt, sched = _setup()

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr("assay.train.checkpoint.directory.write_synced", boom)
    with pytest.raises(OSError):
        save_checkpoint(tmp_path, 2, params, opt, sched.state_dict(), Cursor(), PRINTS)
    monkeypatch.undo()
    assert load_checkpoint(tmp_path).step == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step-000001"]
