"""Preference losses: chunked token log-probs, the loss formulas' properties, the objective."""

from __future__ import annotations

import dataclasses
import math
import types
from pathlib import Path

import pytest
import torch

from assay.settings import DataConfig, LossConfig, OutputConfig, TrainConfig
from assay.train.data.dataset import collate
from assay.train.data.masks import Example, TokenSeq
from assay.train.objective import Objective, mismatched
from assay.train.preference import (
    PreferenceSettings,
    dpo_losses,
    kl_estimate,
    kto_losses,
    log_odds,
    pair_losses,
    sequence_logps,
    token_logps,
)


@pytest.mark.parametrize("chunk", [1, 3, 1024])
def test_chunked_token_logps_equal_log_softmax_values_and_gradients(chunk):
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(2, 5, 8, generator=g, requires_grad=True)
    weight = torch.randn(11, 8, generator=g, requires_grad=True)
    labels = torch.randint(0, 11, (2, 5), generator=g)
    mask = torch.rand(2, 5, generator=g) > 0.4
    upstream = torch.randn(2, 5, generator=g)
    got = token_logps(hidden, weight, labels, mask, chunk)
    got_grads = torch.autograd.grad((got * upstream).sum(), [hidden, weight])
    full = (hidden @ weight.t()).log_softmax(-1).gather(-1, labels[..., None]).squeeze(-1)
    want = torch.where(mask, full, torch.zeros_like(full))
    want_grads = torch.autograd.grad((want * upstream).sum(), [hidden, weight])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert bool((got[~mask] == 0).all())
    for a, b in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_a_confident_tokens_log_prob_keeps_fp32_relative_precision():
    # Each target 13 above logits near 60: log p is about -7e-4, some 200 ulps of 60. Taken
    # as logit - logsumexp at the logits' size it keeps only those (up to 5e-3 of it).
    gen = torch.Generator().manual_seed(6)
    logits = 47 + torch.rand(1, 48, 256, generator=gen)
    labels = torch.randint(0, 256, (1, 48), generator=gen)
    logits.scatter_(-1, labels[..., None], 60 + torch.rand(1, 48, 1, generator=gen))
    mask = torch.ones_like(labels, dtype=torch.bool)
    got = token_logps(logits, torch.eye(256), labels, mask, chunk_size=7)
    want = logits.double().log_softmax(-1).gather(-1, labels[..., None]).squeeze(-1)
    worst = float(((got.double() - want) / want).abs().max())
    assert worst <= 1e-3, f"largest relative error {worst:.2e}"


def test_sequence_logps_sum_or_average_over_scored_tokens():
    per_token = torch.tensor([[0.0, -1.0, -3.0], [0.0, 0.0, -2.0]])
    mask = torch.tensor([[False, True, True], [False, False, True]])
    assert sequence_logps(per_token, mask, average=False).tolist() == [-4.0, -2.0]
    assert sequence_logps(per_token, mask, average=True).tolist() == [-2.0, -2.0]
    with pytest.raises(ValueError, match="no scored tokens"):
        sequence_logps(per_token, torch.zeros_like(mask), average=True)


def test_dpo_variants_at_known_points():
    h = torch.tensor([0.0, 10.0, -10.0])
    assert torch.allclose(dpo_losses(h, 0.1), torch.nn.functional.softplus(-0.1 * h))
    assert dpo_losses(h, 0.1, "hinge").tolist() == pytest.approx([1.0, 0.0, 2.0])
    assert torch.allclose(dpo_losses(h, 0.1, "robust", 0.0), dpo_losses(h, 0.1))
    # At h = 0 robust DPO is log 2 for every flip rate; away from 0 it differs from sigmoid.
    robust = dpo_losses(h, 0.1, "robust", 0.2)
    assert robust[0].item() == pytest.approx(math.log(2))
    assert robust[1].item() != pytest.approx(dpo_losses(h, 0.1)[1].item())


def test_policy_equal_to_reference_gives_log2_and_zero_margins():
    policy = torch.tensor([-5.0, -7.0, -6.0, -2.0])
    out = pair_losses(PreferenceSettings("dpo"), policy, policy.clone())
    assert out.losses.tolist() == pytest.approx([math.log(2)] * 2)
    assert out.chosen_rewards.tolist() == [0.0, 0.0]


def test_ipo_and_simpo_targets():
    s = PreferenceSettings("ipo", beta=0.25)  # target margin 1 / (2 beta) = 2
    ref = torch.zeros(2)
    assert pair_losses(s, torch.tensor([-1.0, -3.0]), ref).losses.tolist() == [0.0]
    simpo = PreferenceSettings("simpo", beta=2.0, gamma=0.5)
    out = pair_losses(simpo, torch.tensor([-1.0, -1.25]), None)  # beta * 0.25 - gamma = 0
    assert out.losses.item() == pytest.approx(math.log(2))


def test_orpo_log_odds_stay_finite_near_probability_one():
    assert torch.isfinite(log_odds(torch.tensor([-1e-6, -0.5, -20.0]))).all()
    assert log_odds(torch.tensor([math.log(0.5)])).item() == pytest.approx(0.0, abs=1e-7)


def test_kto_reference_point_is_clamped_and_detached():
    policy_kl = torch.tensor([1.0, -5.0], requires_grad=True)
    z = kl_estimate(policy_kl, torch.zeros(2))
    assert z.item() == 0.0 and not z.requires_grad
    delta = torch.tensor([0.5, 0.5], requires_grad=True)
    out = kto_losses(PreferenceSettings("kto"), delta, torch.tensor([True, False]), z)
    out.losses.sum().backward()
    # d/d delta of 1 - sigmoid(beta delta) is negative, of 1 - sigmoid(-beta delta) positive.
    assert delta.grad[0] < 0 < delta.grad[1]


def _seq(prompt: list[int], completion: list[int]) -> TokenSeq:
    return TokenSeq(tuple(prompt + completion), (False,) * len(prompt) + (True,) * len(completion))


def test_kto_mismatched_pairs_rotate_completions():
    rows = [([5, 6, 7], [8, 9]), ([10, 11], [12, 13, 14])]
    batch = collate([Example(i, (_seq(*r),), i == 0) for i, r in enumerate(rows)], pad_id=0)
    ids, attention, labels, loss_mask = mismatched(batch)
    assert ids[0, :6].tolist() == [5, 6, 7, 12, 13, 14]
    assert ids[1, :4].tolist() == [10, 11, 8, 9] and attention[1].sum() == 4
    scored = [labels[0, t].item() for t in range(ids.shape[1]) if loss_mask[0, t]]
    assert scored == [12, 13, 14]


def _objective(model, kind: str) -> Objective:
    loss = LossConfig(type=kind, beta=0.1, gamma=0.5 if kind == "simpo" else None)
    config = TrainConfig(model="m", data=DataConfig(train="d"), steps=1, output=OutputConfig("o"))
    return Objective(dataclasses.replace(config, loss=loss), model, model)


def _pairs():
    g = torch.Generator().manual_seed(2)
    draw = lambda n: torch.randint(3, 320, (n,), generator=g).tolist()  # noqa: E731
    return collate(
        [Example(i, (_seq(draw(4), draw(3 + i)), _seq(draw(4), draw(5)))) for i in range(2)], 0
    )


@pytest.mark.parametrize("kind,forwards", [("dpo", 2), ("ipo", 2), ("orpo", 1), ("simpo", 1)])
def test_chosen_and_rejected_run_as_one_batch(tiny_adapted, kind, forwards):
    calls: list[int] = []
    original = tiny_adapted.hidden_states

    def counting(ids, mask=None):
        calls.append(ids.shape[0])
        return original(ids, mask)

    obj = _objective(tiny_adapted, kind)
    obj.model = types.SimpleNamespace(hidden_states=counting)  # all the objective calls
    loss = obj.loss(_pairs(), 0, 1)
    assert calls == [4] * forwards  # reference (if any) then policy, each over all 4 rows
    assert loss.requires_grad and torch.isfinite(loss)
    metrics = obj.metrics()
    assert {"rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies"} <= set(
        metrics
    )
    assert {"logps/chosen", "logps/rejected"} <= set(metrics)


def test_a_micro_batch_weighs_by_its_share_of_the_steps_rows(tiny_adapted):
    obj = _objective(tiny_adapted, "dpo")
    batch = _pairs()
    assert torch.equal(obj.loss(batch, 0, 0.5) * 2, obj.loss(batch, 0, 1.0))


def test_reference_is_the_model_with_adapters_disabled(tiny_adapted):
    obj = _objective(tiny_adapted, "dpo")
    obj.loss(_pairs(), 0, 1)
    disabled_margin = obj.metrics()["rewards/margins"]
    live = Objective(obj.config, tiny_adapted, tiny_adapted, reference=lambda m: _Null())
    live.loss(_pairs(), 0, 1)
    assert live.metrics()["rewards/margins"] == 0.0  # reference = policy: no margin
    assert disabled_margin != 0.0
    assert all(a.enabled for _, a in _adapter_modules(tiny_adapted))  # restored afterwards


class _Null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _adapter_modules(model):
    from assay.adapters import adapter_modules

    return adapter_modules(model)


def test_ce_objective_has_no_preference_metrics(tiny_adapted):
    config = TrainConfig(model="m", data=DataConfig(train="d"), steps=1, output=OutputConfig("o"))
    obj = Objective(config, tiny_adapted, tiny_adapted)
    assert obj.settings is None and obj.metrics() == {}


@pytest.mark.slow
def test_dpo_example_config_trains(tmp_path):
    import yaml

    from assay.settings.loader import train_config_from_dict
    from assay.train.loop import Trainer

    source = Path(__file__).resolve().parents[2] / "examples"
    data = yaml.safe_load((source / "smollm2-dpo.yaml").read_text())
    data.update(steps=2)
    data["optim"]["warmup_steps"] = 1
    data["output"] = {"dir": str(tmp_path / "run"), "save_every": 2}
    trainer = Trainer(train_config_from_dict(data, source / "smollm2-dpo.yaml"), progress=False)
    first = trainer.train_step()
    # LoRA B starts at 0, so policy = reference: each of the 2 micro-batches gives log 2 / 2.
    assert first.loss == pytest.approx(math.log(2), abs=1e-6)
    assert trainer.objective.metrics()["rewards/margins"] == 0.0
