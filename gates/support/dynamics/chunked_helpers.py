"""gate-dynamics' chunk-edge claims beside the chunked-CE recipe (not a gate module).

- ``chunk_notes``: which chunk edges the chunked-CE recipe's rows cross, and the fp32 bias of
  the plain cross-entropy its reference would otherwise carry (measured on the reference model);
- ``claim_dpo_chunks``: DPO's row-chunked log-probs (token chunks of ``DPO_CHUNK``, logsumexp
  ``LSE_ROWS`` rows at a time) against gate-preference's formula on full logits, on SmolLM2,
  with gate-preference's bound, each claim controlled by chunk-edge defects.
"""

from __future__ import annotations

import torch

import assay
from assay.adapters import attach
from assay.adapters.perturb import randomize_adapters
from assay.qualify import Threshold
from assay.train.data.dataset import collate
from assay.train.data.masks import Example
from assay.train.losses import LSE_ROWS
from assay_testing import defects
from assay_testing.real_model import smollm2_path
from support.dynamics.recipes import CODE, ROWS
from support.dynamics.reference import Recipe, chat_rows, reference_example, reference_order
from support.preference.helpers import product, relative, trainables
from support.preference.reference import formula_loss, seq

DPO = ("dpo", "dpo", "sigmoid", 0.0)  # gate-preference's spec: (claim, loss, variant, smoothing)
DPO_PAIRS = 3
DPO_CHUNK = 37  # scored tokens a log-prob chunk: logsumexp blocks of 16, 16 and 5 in each
DPO_TOL = 1e-4  # gate-preference's TOL, for the loss and for every gradient
DPO_SEED = 3  # randomized B: policy and reference differ, A's gradients are not zero
# (defect, what it breaks, whether it controls the loss claim too: a backward-only defect
# leaves the loss as it was)
DPO_DEFECTS = (
    (
        "train.losses.lse_block_edge_row",
        "each logsumexp block's first row takes the previous block's value",
        True,
    ),
    (
        "train.preference.chunk_offset_lost",
        "the log-prob backward reads the first chunk's maxima and logsumexps for every chunk",
        False,
    ),
)
DPO_CODE = (
    *CODE,
    "assay.train.preference",
    "assay.adapters.control",
    "support.preference.reference",
    "support.preference.helpers",
)


def chunk_notes(recipe: Recipe, examples, reference_model) -> str:
    """What the chunked recipe's run crosses (chunk edges per row, partial last chunks), and
    how far fp32 ``log_softmax`` and ``torch.logsumexp`` land from fp64 on the reference's
    logits of its first rows (why its cross-entropy is taken on fp64 logits)."""
    order = reference_order(len(examples), recipe.seed, recipe.steps * recipe.accum)
    scored = [sum(label != -100 for label in examples[i][1][1:]) for i in order]
    c = recipe.chunk_size
    partial = sum(n % c != 0 for n in scored)
    edges = [(n - 1) // c for n in scored]
    softmax_bias, lse_bias = [], []
    with torch.no_grad():
        for ids, labels in examples[:3]:
            logits = reference_model(torch.tensor([ids])).logits[0, :-1].float()
            x = logits[torch.tensor(labels[1:]) != -100]
            exact = torch.logsumexp(x.double(), -1)
            softmax_bias.append((x[:, 0] - x.log_softmax(-1)[:, 0]).double() - exact)
            lse_bias.append(torch.logsumexp(x, -1).double() - exact)
    return (
        f"{recipe.name}: {min(scored)} to {max(scored)} scored tokens a step in chunks of {c}: "
        f"{min(edges)} to {max(edges)} chunk edges a row, {partial} of {len(scored)} steps end "
        "on a partial chunk. On the reference's logits of 3 rows, fp32 F.log_softmax's "
        f"logsumexp is {torch.cat(softmax_bias).mean():.2e} from fp64 on average (torch."
        f"logsumexp, which chunked CE takes: {torch.cat(lse_bias).mean():.2e}): the bias a "
        "reference on fp32 logits would carry, and why its F.cross_entropy takes fp64 logits."
    )


def preference_rows(tokenizer, chats, pairs: int) -> list[tuple[list[int], list[int]]]:
    """(prompt, completion) token lists, chosen rows first: the chosen completion reverses the
    words (the chat's answer), the rejected one repeats them in the order given."""
    chosen, rejected = [], []
    for chat in chats[:pairs]:
        given = chat[0]["content"].removeprefix("Reverse the words: ")
        for side, answer in ((chosen, chat[1]["content"]), (rejected, given)):
            ids, labels = reference_example(
                tokenizer, [chat[0], {"role": "assistant", "content": answer}]
            )
            cut = next(i for i, label in enumerate(labels) if label != -100)
            side.append((ids[:cut], ids[cut:]))
    return chosen + rejected


def adapted(recipe: Recipe):
    model = assay.load(smollm2_path())
    attach(model, "lora", rank=recipe.rank, alpha=recipe.alpha, targets=list(recipe.projections))
    return randomize_adapters(model, seed=DPO_SEED)


def fp64(model):
    """``model``'s logits upcast to fp64, so the formula's log_softmax carries no fp32 bias."""
    return lambda ids, attention: model(ids, attention).double()


def claim_dpo_chunks(gate, setup, recipe: Recipe) -> None:
    """DPO loss and gradients with log-probs in chunks of ``DPO_CHUNK`` against the formula."""
    chats = chat_rows(ROWS, seed=7, words_per_row=recipe.words)  # the recipe's rows file's
    rows = preference_rows(setup.tokenizer, chats, DPO_PAIRS)
    pairs = [Example(i, (seq(*rows[i]), seq(*rows[DPO_PAIRS + i]))) for i in range(DPO_PAIRS)]
    batch = collate(pairs, pad_id=0)
    scored = int(batch.loss_mask.sum())
    assert scored > 2 * DPO_CHUNK and scored % DPO_CHUNK >= 2, f"{scored} scored tokens"
    model, reference = adapted(recipe), assay.load(smollm2_path())  # reference: no adapters
    loss, grads = product(model, model, DPO, batch, chunk_size=DPO_CHUNK)
    params = trainables(model)
    want = formula_loss(DPO, fp64(model), fp64(reference), rows)
    want_grads = dict(zip(params, torch.autograd.grad(want, list(params.values())), strict=True))
    want_value = want.detach()

    def loss_error(value: torch.Tensor) -> float:
        return float((value.double() - want_value).abs() / want_value.abs())

    what = (
        f"DPO (sigmoid, beta 0.1) on SmolLM2 with LoRA r{recipe.rank} (B randomized), "
        f"{DPO_PAIRS} pairs of chat rows ({scored} scored tokens), log-probs in chunks of "
        f"{DPO_CHUNK} tokens and logsumexp {LSE_ROWS} rows at a time"
    )
    claims = {}
    for key, statement, unit, value in (
        (
            "loss",
            f"{what}: the loss equals gate-preference's formula on full fp64 logits (reference: "
            f"a separately loaded model without adapters) within {DPO_TOL:g} relative",
            "relative error",
            loss_error(loss),
        ),
        (
            "grad",
            f"{what}: every trainable gradient ({len(params)} tensors) equals autograd through "
            f"that formula within {DPO_TOL:g} (largest max |difference| / max |gradient|)",
            "max relative error",
            relative(grads, want_grads),
        ),
    ):
        claims[key] = gate.claim(
            f"dynamics.dpo_{key}.chunked{DPO_CHUNK}",
            statement,
            kind="correctness",
            threshold=Threshold("<=", DPO_TOL),
            unit=unit,
            code=DPO_CODE,
        )
        claims[key].measure(value)
    notes = []
    for fault, label, on_loss in DPO_DEFECTS:
        with defects.inject(fault):
            bad_loss, bad_grads = product(model, model, DPO, batch, chunk_size=DPO_CHUNK)
        name = f"{label} ({fault})"
        loss_value, grad_value = loss_error(bad_loss), relative(bad_grads, want_grads)
        if on_loss:
            claims["loss"].control(name, loss_value)
        claims["grad"].control(name, grad_value)
        notes.append(f"{fault}: loss {loss_value:.3g}, gradients {grad_value:.3g}")
    gate.note(
        f"dpo chunked{DPO_CHUNK}: loss {float(loss):.6f}, formula {float(want_value):.6f}; "
        "controls (loss, gradients): " + "; ".join(notes)
    )
