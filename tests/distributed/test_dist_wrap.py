"""The byte probe against a hand count, and FSDP2/DDP in a process group of one (in-process).

A group of one runs every wrapper and collective path (DTensor parameters, gather for
checkpoints, restore into shards) without a second process; the two-process runs are in
test_dist_end_to_end.py (slow) and gate-distributed.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import torch
import yaml

from assay.distributed.context import init
from assay.distributed.wrap import full_base_bytes, local_base_bytes
from assay.model import Decoder, ModelConfig
from assay_testing.text_run import save_text_run
from assay_testing.tiny import llama_config


def _config(tie: bool) -> ModelConfig:
    return llama_config(vocab_size=96, num_layers=3, tie_word_embeddings=tie)


def _hand_count(c: ModelConfig) -> int:
    """float32 bytes of a Llama decoder from its dimensions alone."""
    q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    layer = c.hidden_size * (q + 2 * kv) + q * c.hidden_size  # q, k, v, o
    layer += 3 * c.hidden_size * c.intermediate_size + 2 * c.hidden_size  # mlp, two norms
    embeddings = c.vocab_size * c.hidden_size * (1 if c.tie_word_embeddings else 2)
    return 4 * (embeddings + c.num_layers * layer + c.hidden_size)


@pytest.mark.parametrize("tie", [True, False])
def test_probe_matches_a_hand_count_and_skips_trainables(tie):
    from assay.adapters import attach

    model = Decoder(_config(tie)).requires_grad_(False)
    expected = _hand_count(_config(tie))
    assert local_base_bytes(model) == full_base_bytes(model) == expected
    attach(model, "lora", rank=2, alpha=4, targets=["q_proj", "v_proj"], layers=None, seed=0)
    assert local_base_bytes(model) == expected  # LoRA's A and B train: not base bytes


def test_probe_counts_nf4_buffers_like_the_accounting():
    from assay.memory.accounting import owned_bytes
    from assay.storage import apply_storage

    model = Decoder(_config(False)).requires_grad_(False)
    apply_storage(model, "nf4")
    # Independent code (storage-level accounting) must see the same bytes, packed included.
    assert local_base_bytes(model) == owned_bytes(model)["weight_bytes"]
    assert local_base_bytes(model) < _hand_count(_config(False))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def group_of_one(monkeypatch):
    """A real gloo process group of world size 1, set up the way torchrun's env does."""
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}
    for key, value in {**env, "MASTER_PORT": str(_free_port())}.items():
        monkeypatch.setenv(key, value)
    context = init("cpu")
    yield context
    context.close()


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("dist")
    config = {
        **save_text_run(root, seed=2),
        "adapter": {"method": "lora", "rank": 2, "alpha": 4},
        "optim": {"lr": 1e-2},
        "batch": {"micro_batch": 1, "grad_accum": 2},
        "steps": 2,
        "seed": 1,
    }
    (root / "base.yaml").write_text(yaml.safe_dump(config))
    return root


def _config_for(root: Path, name: str, **changes):
    from assay.settings.loader import train_config_from_dict

    data = yaml.safe_load((root / "base.yaml").read_text())
    data.update(changes)
    data["output"] = {"dir": str(root / name), "save_every": 1}
    return train_config_from_dict(data, root / f"{name}.yaml")


def _trainables(trainer) -> dict[str, torch.Tensor]:
    from assay.distributed.state import gather

    full, _ = gather(trainer.params, trainer.optimizer)
    return {k: v.detach().clone() for k, v in full.items()}


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_group_of_one_trains_like_a_plain_process(tiny_run, group_of_one, strategy):
    from torch.distributed.tensor import DTensor

    from assay.distributed.trainer import DistributedTrainer
    from assay.train.loop import Trainer

    plain = Trainer(_config_for(tiny_run, f"plain-{strategy}"), progress=False)
    config = _config_for(tiny_run, strategy, distributed={"strategy": strategy})
    wrapped = DistributedTrainer(config, group_of_one, progress=False)
    sharded = strategy == "fsdp"
    assert any(isinstance(p, DTensor) for p in wrapped.params.values()) == sharded
    assert local_base_bytes(wrapped.base) == full_base_bytes(plain.base)
    losses = [(plain.train_step().loss, wrapped.train_step().loss) for _ in range(2)]
    assert all(abs(a - b) <= 1e-6 for a, b in losses)
    left, right = _trainables(plain), _trainables(wrapped)
    assert max(float((left[k] - right[k]).abs().max()) for k in left) <= 1e-7
    summary = wrapped._summary_extra()
    assert summary == {"world_size": 1, "strategy": strategy, "backend": "gloo"}


def test_sharded_checkpoint_is_full_and_resumes_both_ways(tiny_run, group_of_one):
    from assay.distributed.trainer import DistributedTrainer
    from assay.train.checkpoint.directory import load_checkpoint
    from assay.train.loop import Trainer

    fsdp = {"distributed": {"strategy": "fsdp"}}
    sharded = DistributedTrainer(_config_for(tiny_run, "s", **fsdp), group_of_one, progress=False)
    sharded.train(stop_at=1)
    saved = load_checkpoint(tiny_run / "s")
    plain = Trainer(_config_for(tiny_run, "p"), progress=False)
    assert set(saved.trainables) == set(plain.params)
    assert all(saved.trainables[k].shape == p.shape for k, p in plain.params.items())
    # Sharded checkpoint -> plain process, and plain checkpoint -> sharded trainer.
    plain.resume(tiny_run / "s")
    plain_losses = plain.train()["losses"]
    other = DistributedTrainer(_config_for(tiny_run, "s2", **fsdp), group_of_one, progress=False)
    other.resume(tiny_run / "s" / "step-000001")
    assert other.train()["losses"] == pytest.approx(plain_losses, abs=1e-6)
    assert (tiny_run / "s2" / "metrics.jsonl").read_text().count("\n") == 1
