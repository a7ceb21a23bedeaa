"""The objective's losses against an independent computation from the model's logits:
CE and chunked CE (padded and unpadded batches), KTO (with its mismatched-pair KL reference
point) and ORPO (with its chosen NLL), each through ``Objective.loss`` as training calls it."""

from __future__ import annotations

import dataclasses
import types

import pytest
import torch

import assay.train.objective as objective_module
from assay.adapters import disabled
from assay.settings import DataConfig, LossConfig, OutputConfig, TrainConfig
from assay.train.data.dataset import collate
from assay.train.data.masks import Example, TokenSeq
from assay.train.objective import Objective, mismatched, preference_settings
from assay.train.preference import kl_estimate, kto_losses, metrics, pair_losses, sequence_logps


@pytest.fixture
def model(tiny_adapted):
    """The shared tiny llama3 with a randomized LoRA (tests/train/conftest.py)."""
    return tiny_adapted


def _config(kind: str, **loss) -> TrainConfig:
    config = TrainConfig(model="m", data=DataConfig(train="d"), steps=1, output=OutputConfig("o"))
    return dataclasses.replace(config, loss=LossConfig(type=kind, **loss))


def _seq(prompt: list[int], completion: list[int]) -> TokenSeq:
    return TokenSeq(tuple(prompt + completion), (False,) * len(prompt) + (True,) * len(completion))


def _draw(seed: int):
    g = torch.Generator().manual_seed(seed)
    return lambda n: torch.randint(3, 320, (n,), generator=g).tolist()


def _token_logps(model, ids, attention, labels, mask) -> torch.Tensor:
    """Per-token log-probs from full logits (no chunking), zero where unscored."""
    hidden = model.hidden_states(ids, attention)
    logits = hidden @ model.lm_head.weight.t()
    full = logits.float().log_softmax(-1).gather(-1, labels[..., None]).squeeze(-1)
    return torch.where(mask, full, torch.zeros_like(full))


def _fields(batch):
    return batch.input_ids, batch.attention_mask, batch.labels, batch.loss_mask


@pytest.mark.parametrize("kind", ["ce", "chunked_ce"])
@pytest.mark.parametrize("lengths", [(6, 6), (4, 9)], ids=["unpadded", "padded"])
def test_ce_loss_is_summed_token_nll_over_the_steps_scored_tokens(model, kind, lengths):
    draw = _draw(1)
    batch = collate([Example(i, (_seq(draw(2), draw(n)),)) for i, n in enumerate(lengths)], 0)
    scored = int(batch.loss_mask.sum())
    obj = Objective(_config(kind, chunk_size=3), model, model)
    with torch.no_grad():
        got = obj.loss(batch, 3 * scored, 1)  # the step holds two more micro-batches like it
        want = -_token_logps(model, *_fields(batch)).sum() / (3 * scored)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_chunked_ce_runs_at_the_configured_chunk_size(model, monkeypatch):
    seen = []
    real = objective_module.chunked_cross_entropy

    def spy(*args, **kwargs):
        seen.append(args[4])
        return real(*args, **kwargs)

    monkeypatch.setattr(objective_module, "chunked_cross_entropy", spy)
    batch = collate([Example(0, (_seq([5, 6], [7, 8, 9]),))], 0)
    Objective(_config("chunked_ce", chunk_size=3), model, model).loss(batch, 3, 1)
    assert seen == [3]
    Objective(_config("ce"), model, model).loss(batch, 3, 1)
    assert seen == [3]  # plain CE never takes the chunked path


def test_unpadded_batches_take_the_maskless_path(model):
    calls = []
    obj = Objective(_config("ce"), model, model)
    obj.model = types.SimpleNamespace(
        hidden_states=lambda ids, mask=None: calls.append(mask) or model.hidden_states(ids, mask)
    )
    draw = _draw(2)
    obj.loss(collate([Example(i, (_seq(draw(2), draw(4)),)) for i in range(2)], 0), 8, 1)
    padded = collate([Example(i, (_seq(draw(2), draw(3 + i)),)) for i in range(2)], 0)
    obj.loss(padded, 7, 1)
    assert calls[0] is None and calls[1] is padded.attention_mask


def test_an_unknown_loss_kind_is_refused_by_name(model):
    config = types.SimpleNamespace(loss=types.SimpleNamespace(type="hinge"))
    with pytest.raises(NotImplementedError, match="loss 'hinge' is not implemented"):
        Objective(config, model, model)


def test_kto_loss_and_metrics_match_an_independent_computation(model):
    draw = _draw(12)  # a draw whose KL reference point is above its clamp at 0
    rows = [(draw(3), draw(2 + i), i != 1) for i in range(3)]
    batch = collate([Example(i, (_seq(p, c),), label) for i, (p, c, label) in enumerate(rows)], 0)
    config = _config("kto", beta=0.3)
    obj = Objective(config, model, model)
    got = obj.loss(batch, 0, 1)
    kl_fields = mismatched(batch)
    with torch.no_grad():
        with disabled(model):
            reference = _token_logps(model, *_fields(batch)).sum(-1)
            reference_kl = _token_logps(model, *kl_fields).sum(-1)
        policy = _token_logps(model, *_fields(batch)).sum(-1)
        policy_kl = _token_logps(model, *kl_fields).sum(-1)
    z_ref = kl_estimate(policy_kl, reference_kl)
    assert float(z_ref) > 0  # the reference point is live, not clamped away
    out = kto_losses(preference_settings(config), policy - reference, batch.kto_labels, z_ref)
    torch.testing.assert_close(got.detach(), out.losses.mean(), rtol=1e-5, atol=1e-6)
    want = {k: float(v) for k, v in metrics(out, policy, batch.kto_labels).items()}
    assert obj.metrics().keys() == want.keys()
    for key, value in want.items():
        assert obj.metrics()[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key


def test_orpo_loss_adds_the_chosen_token_nll(model):
    draw = _draw(4)
    pairs = [Example(i, (_seq(draw(3), draw(3 + i)), _seq(draw(3), draw(4)))) for i in range(2)]
    batch = collate(pairs, 0)
    config = _config("orpo", beta=0.2)
    obj = Objective(config, model, model)
    got = obj.loss(batch, obj.normaliser(batch), 1.0)
    with torch.no_grad():
        per_token = _token_logps(model, *_fields(batch))
    mask = batch.loss_mask
    settings = preference_settings(config)
    policy = sequence_logps(per_token, mask, settings.average)
    nll = -per_token[:2].sum() / mask[:2].sum()
    assert float(nll) > 0
    want = pair_losses(settings, policy, None, nll).losses.mean()
    torch.testing.assert_close(got.detach(), want, rtol=1e-5, atol=1e-6)


def _step_rows(kind: str, lengths: list[int]) -> list[Example]:
    """One step's rows for ``kind``: text rows for CE, pairs whose chosen completions have
    ``lengths`` tokens (so a token mean and a mean of micro-batch means differ) otherwise."""
    draw = _draw(sum(lengths))
    if kind in ("ce", "chunked_ce"):
        return [Example(i, (_seq(draw(2), draw(n)),)) for i, n in enumerate(lengths)]
    return [
        Example(i, (_seq(draw(3), draw(n)), _seq(draw(3), draw(5)))) for i, n in enumerate(lengths)
    ]


# KTO is left out by design: its KL reference point is estimated within each micro-batch (as
# TRL's is), so its step is not one batch's loss however the rows are split.
STEP_INVARIANT = ["ce", "chunked_ce", "dpo", "ipo", "orpo", "simpo"]


@pytest.mark.parametrize("kind", STEP_INVARIANT)
@pytest.mark.parametrize(
    ("lengths", "split"),
    [([1, 9, 2, 6], 2), ([1, 9, 2, 6], 1), ([7, 1, 1, 3], 3)],
    ids=["halves", "one-and-three", "three-and-one"],
)
def test_a_steps_shares_sum_to_its_rows_as_one_batch(model, kind, lengths, split):
    """The invariant accumulation and data parallelism rest on: however a step's rows are cut
    into micro-batches (or ranks), the shares ``loss(batch, divisor, row_share)`` sum to the
    loss of the rows as one batch, and so do their gradients."""
    rows = _step_rows(kind, lengths)
    obj = Objective(_config(kind, chunk_size=3, beta=0.2), model, model)
    params = [p for p in model.parameters() if p.requires_grad]

    def shares(parts: list[list[Example]]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        batches = [collate(part, 0) for part in parts]
        divisor = sum(obj.normaliser(b) for b in batches)
        total = sum(obj.loss(b, divisor, len(b.lines) / len(rows)) for b in batches)
        grads = torch.autograd.grad(total, params)
        return total.detach(), list(grads)

    whole, whole_grads = shares([rows])
    split_loss, split_grads = shares([rows[:split], rows[split:]])
    torch.testing.assert_close(split_loss, whole, rtol=1e-5, atol=1e-6)
    for got, want in zip(split_grads, whole_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
