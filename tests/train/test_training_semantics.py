"""Training semantics users expect: decay only on matrices, evaluation during training, and
LoRA dropout that trains and resumes exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from assay.errors import ConfigError
from assay.settings.loader import load_train_config, train_config_from_dict
from assay.train.build import build_optimizer, decay_groups
from assay.train.loop import Trainer
from assay_testing.text_run import save_text_run


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("semantics")
    base = save_text_run(root, seed=4)
    base["data"]["eval"] = base["data"]["train"]
    return root, base


def _config(root: Path, base: dict, name: str, **sections):
    raw = {**json.loads(json.dumps(base)), "steps": 4, "seed": 1, **sections}
    raw.setdefault("output", {})["dir"] = str(root / name)
    return train_config_from_dict(raw, root / f"{name}.yaml")


@pytest.mark.parametrize(
    ("method", "vectors"),
    [("lora", 0), ("dora", 4), ("tinylora", 1), ("full", 5)],
)
def test_decay_applies_to_matrices_only(workspace, method, vectors):
    root, base = workspace
    adapter = (
        {"method": method}
        if method == "full"
        else {"method": method, "targets": ["q_proj", "v_proj"]}
    )
    config = _config(
        root, base, f"decay-{method}", adapter=adapter, optim={"lr": 0.1, "weight_decay": 0.5}
    )
    trainer = Trainer(config, progress=False)
    decay, plain = decay_groups(trainer.params)
    assert all(trainer.params[n].dim() >= 2 for n in decay)
    assert bool(decay) == (method != "tinylora")  # TinyLoRA trains one vector, nothing else
    assert all(trainer.params[n].dim() < 2 for n in plain)
    assert len(plain) == vectors or (method == "full" and len(plain) >= vectors)
    # The property itself: one AdamW step on zero gradients moves only decayed tensors.
    optimizer = build_optimizer(config, trainer.params)
    before = {n: p.detach().clone() for n, p in trainer.params.items()}
    for p in trainer.params.values():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    for name in plain:
        assert torch.equal(trainer.params[name], before[name]), name
    moved = [n for n in decay if not torch.equal(trainer.params[n], before[n])]
    nonzero = [n for n in decay if before[n].abs().sum() > 0]
    assert moved == nonzero


def test_run_config_copy_lists_decay_groups_and_loads_back(workspace):
    root, base = workspace
    config = _config(
        root,
        base,
        "listed",
        adapter={"method": "dora", "targets": ["q_proj"]},
        optim={"weight_decay": 0.1},
    )
    trainer = Trainer(config, progress=False)
    trainer.out_dir.mkdir(parents=True, exist_ok=True)
    text = trainer.write_run_config().read_text()
    assert "# weight decay 0.1 applies to 4 tensor(s)" in text
    assert "# no weight decay on 2 vector(s)" in text
    assert "lora_magnitude_vector" in text.split("# no weight decay")[1]
    assert load_train_config(trainer.out_dir / "config.yaml").to_dict() | {"source": ""} == (
        config.to_dict() | {"source": ""}
    )


def test_eval_every_writes_held_out_loss_without_changing_training(workspace):
    root, base = workspace
    plain = Trainer(_config(root, base, "no-eval"), progress=False).train()
    config = _config(root, base, "eval", output={"eval_every": 2})
    trainer = Trainer(config, progress=False)
    summary = trainer.train()
    assert summary["losses"] == plain["losses"]
    lines = [
        json.loads(x) for x in (Path(config.output.dir) / "metrics.jsonl").read_text().splitlines()
    ]
    with_eval = [line["step"] for line in lines if "eval_loss" in line]
    assert with_eval == [2, 4]
    assert lines[-1]["eval_loss"] == summary["eval_loss"] == trainer.evaluate()


def test_eval_every_needs_held_out_rows(workspace):
    root, base = workspace
    raw = {**json.loads(json.dumps(base)), "steps": 2, "output": {"eval_every": 1}}
    del raw["data"]["eval"]
    with pytest.raises(ConfigError, match=r"output\.eval_every: needs held-out rows"):
        train_config_from_dict(raw, root / "e.yaml")


def test_dropout_with_recomputing_stream_is_refused(workspace):
    root, base = workspace
    with pytest.raises(ConfigError, match=r"adapter\.dropout: .*stream\.recompute: false"):
        _config(root, base, "s", adapter={"dropout": 0.1}, stream={"tier": "ram"})
    _config(root, base, "k", adapter={"dropout": 0.1}, stream={"recompute": False})


def test_dropout_trains_differently_and_resumes_exactly(workspace):
    root, base = workspace
    adapter = {"method": "lora", "rank": 4, "alpha": 8, "dropout": 0.3}
    plain = Trainer(_config(root, base, "d0"), progress=False).train()
    config = _config(root, base, "d1", adapter=adapter, optim={"lr": 1e-2})
    whole = Trainer(config, progress=False).train()
    assert whole["losses"] != plain["losses"]
    head_cfg = _config(root, base, "d2", adapter=adapter, optim={"lr": 1e-2})
    Trainer(head_cfg, progress=False).train(stop_at=2)
    tail = Trainer(head_cfg, progress=False)
    tail.resume(Path(head_cfg.output.dir))
    assert tail.train()["losses"] == whole["losses"][2:]
    written = yaml.safe_load((Path(head_cfg.output.dir) / "config.yaml").read_text())
    assert written["adapter"]["dropout"] == 0.3


def test_the_logged_grad_norm_is_the_norm_of_the_logged_loss_gradient(workspace):
    """metrics.jsonl's grad_norm is the norm, before clipping, of the gradient of the loss it
    logs beside it: a gradient scaled on its way (which clipping and AdamW would both hide) shows
    here."""
    root, base = workspace
    config = _config(root, base, "norm", optim={"grad_clip": None}, batch={"grad_accum": 2})
    trainer = Trainer(config, progress=False)
    micro = trainer._micro_batches()
    trainer._micro_batches = lambda: micro  # the step trains on exactly these micro-batches
    params = list(trainer.params.values())
    divisor = trainer._step_counts(micro)[1]
    shares = [trainer._share(batch, divisor) for batch in micro]
    grads = torch.autograd.grad(sum(shares), params)
    expected = float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])))
    record = trainer.train_step()
    assert record.loss == pytest.approx(sum(float(s.detach()) for s in shares), rel=1e-6)
    assert record.grad_norm == pytest.approx(expected, rel=1e-5)
