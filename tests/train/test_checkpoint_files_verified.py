"""Every file of a checkpoint is checked against the manifest: one flipped bit in any of them is a
one-line CheckpointError naming that file (not only the files the damage tests pick)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from assay.train.checkpoint.directory import CheckpointError, load_checkpoint, save_checkpoint
from assay.train.checkpoint.layout import CHECKPOINT_FILES as _FILES
from assay.train.data.dataset import Cursor

PRINTS = {"config": "c" * 64, "dataset": "d" * 64, "model": "m" * 64}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    weight = nn.Parameter(torch.randn(4, 3))
    optimizer = torch.optim.AdamW([weight], lr=0.1)
    weight.sum().backward()
    optimizer.step()
    path = save_checkpoint(root, 1, {"w": weight}, optimizer, {"step": 1}, Cursor(0, 2), PRINTS)
    return path


@pytest.mark.parametrize("name", _FILES)
def test_a_flipped_bit_in_any_file_is_refused_naming_it(saved, name):
    target = saved / name
    original = target.read_bytes()
    damaged = bytearray(original)
    damaged[len(damaged) // 2] ^= 1
    target.write_bytes(bytes(damaged))
    try:
        with pytest.raises(CheckpointError, match=rf"{name}: sha256 differs") as info:
            load_checkpoint(saved)
        assert "\n" not in str(info.value)
    finally:
        target.write_bytes(original)
    load_checkpoint(saved)  # restored: loads again
