"""gate-dynamics: assay trains as transformers + PEFT do, step for step, for every method.

Both stacks fine-tune SmolLM2-135M-Instruct (the bundled GGUF; transformers dequantizes the
same file with ``gguf_file=``) with adapters r8 on every layer's attention projections, AdamW
(weight decay 0.01, clip 1.0), warmup then cosine, on chat rows of different lengths,
micro-batch 1: LoRA, rsLoRA and DoRA in fp32, and LoRA on an NF4 double-quant base against
transformers + bitsandbytes QLoRA (fp32 compute) on the same quantized bytes (a claim of its
own), each controlled by its own defects. The reference is
written from the definitions assay documents, never by calling assay's data, loss or schedule
code (``gates/support/dynamics/reference.py``). A streamed run (RAM tier) is bitwise equal to the
resident one, and the adapter's initialisation is gated on its own (B exactly zero, A the law
PEFT draws), since the dynamics claims copy assay's initial adapter into PEFT.

The opt-in compiled path (``compile: true``, each decoder layer torch.compile'd) trains as PEFT
eager does, by the eager bounds, with its compile time in the notes; ``precision: bf16`` trains
as PEFT under the same bf16 autocast does, by bounds a pilot set (two correct bf16 stacks drift
apart: AdamW turns rounding in small gradients into full-size updates), each controlled by the
LoRA defects.

Chunked cross-entropy trains as PEFT's plain cross-entropy does, at the same bounds, with 7 tokens
a chunk over rows of 15 to 23 scored tokens (every row crosses chunk edges), controlled by chunk-
edge and mask defects on the path the trainer takes; DPO's row-chunked log-probs (chunks of 37,
logsumexp 16 rows at a time) equal gate-preference's formula on full logits on SmolLM2, controlled
by chunk-edge defects (``gates/support/dynamics/chunked_helpers.py``).

LoRA with gradient accumulation 4 and the six training defects a quality gate must catch moved
to gate-quality on 2026-12-03 (issue 28: they are its headline); this gate checks that
gate-quality's newest receipt passes them and retires them here.

Long: about 25 minutes on 2 cores (bf16 matrix products are slow on a CPU without native
bf16); ``nox -s gates`` leaves it out, ``nox -s gate-dynamics``
runs it.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from assay.qualify import Threshold
from assay.storage.nf4 import NF4Weight
from assay_testing import defects
from assay_testing.peers import hf_model, peft_lora
from assay_testing.real_model import smollm2_path
from support.dynamics.chunked_helpers import chunk_notes, claim_dpo_chunks
from support.dynamics.helpers import (
    adapters,
    assay_trainer,
    claim_method,
    dataset,
    ks_distance,
    normalised_a,
    setup,  # noqa: F401  (the module fixture)
    short_run,
    train_losses,
)
from support.dynamics.recipes import (
    A_LAW_KS,
    BF16,
    BF16_BOUNDS,
    BF16_FORWARD,
    BF16_PILOT,
    CHUNKED,
    CODE,
    COMPILED,
    METHOD_RECIPES,
    NOCLIP,
    SHORT,
    STREAM_CODE,
)
from support.moved_claims import retire_moved_claims, retire_replaced_claims

# the claim a reader looks at first (the index and every record lead with it)
HEADLINE = "dynamics.loss_per_step.lora-accum1"
# gate-quality's headline since 2026-12-03
MOVED_TO_QUALITY = (
    "dynamics.loss_per_step.lora-accum4",
    "dynamics.final_adapters.lora-accum4",
    "dynamics.final_logits.lora-accum4",
)
# the chunked-CE recipe first published (receipt 20261204T150138Z) and withdrawn
WITHDRAWN_CHUNKED = (
    "dynamics.loss_per_step.lora-accum1-chunked37",
    "dynamics.final_adapters.lora-accum1-chunked37",
    "dynamics.final_logits.lora-accum1-chunked37",
)


@pytest.mark.xdist_group("dynamics")
def test_training_dynamics_equal_transformers_peft(gate, setup):  # noqa: F811
    gate.seed(METHOD_RECIPES[0].seed)
    gate.input("model", smollm2_path())
    gate.note(
        "Schedule: assay's warmup factor is (s+1)/warmup, so the first step trains at "
        "lr/warmup; transformers' get_cosine_schedule_with_warmup starts at lr 0 (s/warmup). "
        "The reference follows assay's documented convention (settings help: optim.warmup_steps)."
    )
    for recipe in METHOD_RECIPES:
        ref = claim_method(gate, setup, recipe)
        if recipe.storage == "nf4_double_quant":
            claim_same_nf4_bytes(gate, assay_trainer(setup, recipe, "nf4-bytes"), ref.model)


def nf4_storage(trainer) -> dict[str, tuple[torch.Tensor, ...]]:
    """assay's quantized bytes per projection: (packed, absmax codes, nested absmax, offset)."""
    return {
        name.removesuffix(".base"): (
            m.store.packed,
            m.store.absmax,
            m.store.absmax2,
            m.store.offset.reshape(1),
        )
        for name, m in trainer.base.named_modules()
        if isinstance(getattr(m, "store", None), NF4Weight)
    }


def bnb_storage(model, name: str) -> tuple[torch.Tensor, ...]:
    """bitsandbytes' quantized bytes of the projection assay calls ``name``, in that order."""
    layer = model.get_submodule(f"base_model.model.model.{name}")
    weight = getattr(layer, "base_layer", layer).weight
    state = weight.quant_state
    return (weight.data.reshape(-1), state.absmax, state.state2.absmax, state.offset.reshape(1))


def differing(mine: dict[str, tuple[torch.Tensor, ...]], theirs) -> int:
    """How many of ``mine``'s tensors differ from ``theirs(name)``'s, bit for bit."""
    return sum(
        not torch.equal(a, b)
        for name, tensors in mine.items()
        for a, b in zip(tensors, theirs(name), strict=True)
    )


def claim_same_nf4_bytes(gate, trainer, reference) -> None:
    """The NF4 recipe compares two stacks on the *same* quantized bytes: say so, measured."""
    mine = nf4_storage(trainer)
    # every linear projection of every layer, so an empty comparison cannot pass
    layers = trainer.base.config.num_layers
    assert len(mine) == 7 * layers, f"{len(mine)} NF4 projections, expected 7 x {layers}"
    claim = gate.claim(
        "dynamics.nf4_same_bytes",
        f"the NF4 recipe's two stacks train on the same quantized bytes: for all {len(mine)} "
        "frozen projections, assay's packed codes, absmax codes, nested absmax and offset equal "
        "those of transformers + bitsandbytes (double quant) bit for bit",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="differing tensors",
        code=(*CODE, "assay.storage.nf4"),
    )
    claim.measure(differing(mine, lambda name: bnb_storage(reference, name)))
    names = list(mine)
    shifted = dict(zip(names, names[1:] + names[:1], strict=True))
    claim.control(
        "each projection compared with the next one's bytes (a wrong name mapping)",
        differing(mine, lambda name: bnb_storage(reference, shifted[name])),
    )


@pytest.mark.xdist_group("dynamics")
def test_chunked_cross_entropy_trains_as_plain(gate, setup, pytestconfig):  # noqa: F811
    gate.seed(CHUNKED.seed)
    ref = claim_method(gate, setup, CHUNKED)
    gate.note(chunk_notes(CHUNKED, dataset(setup, CHUNKED.words)[1], ref.model))
    reason = (
        f"replaced by {CHUNKED.name}: chunk 37 over rows of 4 to 10 scored tokens crossed no "
        "chunk edge, so its chunk-edge control could not act (nor could its divisor and "
        "gradient-scale ones: the trainer calls chunked CE with reduction sum, divisor 1); its "
        "2.5e-4 loss difference was mostly its fp32 reference's log_softmax bias (about 2.6e-5 "
        "low per token), with chunked CE's rounding of confident tokens' losses, since fixed"
    )
    gate.note(retire_replaced_claims(gate, WITHDRAWN_CHUNKED, reason, pytestconfig))


@pytest.mark.xdist_group("dynamics")
def test_unclipped_training_equals_peft(gate, setup):  # noqa: F811
    """Clipping off, so each step's gradient norm is the whole gradient's, unscaled."""
    gate.seed(NOCLIP.seed)
    claim_method(gate, setup, NOCLIP)


@pytest.mark.xdist_group("dynamics")
def test_compiled_path_trains_as_peft_eager(gate, setup):  # noqa: F811
    """compile: true is judged by the eager bounds against PEFT eager, not against assay
    eager; the run's compile time is in the notes."""
    gate.seed(COMPILED.seed)
    claim_method(gate, setup, COMPILED)


@pytest.mark.xdist_group("dynamics")
def test_bf16_trains_as_peft_bf16(gate, setup):  # noqa: F811
    """precision: bf16 against PEFT under the same autocast, by bounds set from a pilot."""
    gate.seed(BF16.seed)
    ref = claim_method(gate, setup, BF16)
    claim = gate.claim(
        f"dynamics.bf16_forward.{BF16.name}",
        "assay's bf16 forward is PEFT's under the same autocast: the first step's loss (B is "
        f"zero, so the adapters add nothing) equals PEFT bf16's within {BF16_FORWARD:g} relative",
        kind="correctness",
        threshold=Threshold("<=", BF16_FORWARD),
        unit="relative |loss difference|",
        code=(*CODE, "assay.train.objective"),
    )
    first = ref.losses[0]
    claim.measure(abs(assay_trainer(setup, BF16, "bf16-first").train_step().loss - first) / first)
    fp32 = dataclasses.replace(BF16, precision="float32")
    claim.control(
        "assay with precision float32 (autocast not applied)",
        abs(assay_trainer(setup, fp32, "bf16-off").train_step().loss - first) / first,
    )
    gate.note(
        f"bf16 bounds (loss: {BF16_BOUNDS.loss_words()}; adapters {BF16_BOUNDS.weights:g}; "
        f"logits {BF16_BOUNDS.logits:g}) were set from the pilots of 2026-12-04 before this "
        f"gate first ran the recipe: {BF16_PILOT}"
    )


@pytest.mark.xdist_group("dynamics")
def test_dpo_row_chunked_log_probs_equal_full_logits(gate, setup):  # noqa: F811
    claim_dpo_chunks(gate, setup, CHUNKED)


@pytest.mark.xdist_group("dynamics")
def test_moved_claims_pass_in_gate_quality(gate, pytestconfig):
    gate.note(retire_moved_claims(gate, "quality", MOVED_TO_QUALITY, pytestconfig))


@pytest.mark.xdist_group("dynamics")
def test_streamed_training_is_bitwise_resident(gate, setup):  # noqa: F811
    recipe = dataclasses.replace(METHOD_RECIPES[0], steps=10)
    stream = {"stream": {"tier": "ram", "buffers": 2, "recompute": True}}
    resident = assay_trainer(setup, recipe, "resident")
    resident_losses = []
    for step in range(1, recipe.steps + 1):
        resident_losses.append(resident.train_step().loss)
        if step == SHORT:  # what the control's short streamed run is compared with
            resident_early = adapters(resident)
    streamed = assay_trainer(setup, recipe, "streamed", **stream)
    pairs = zip(resident_losses, train_losses(streamed, recipe.steps), strict=True)
    differing = sum(a != b for a, b in pairs)
    mine, theirs = adapters(streamed), adapters(resident)
    differing += sum(not torch.equal(mine[n], theirs[n]) for n in theirs)
    claim = gate.claim(
        "dynamics.streamed_bitwise",
        f"a streamed run (RAM tier, 2 slots, recompute) trains bit for bit as the resident run: "
        f"{recipe.steps} step losses and every final adapter tensor equal",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="differing losses + differing adapter tensors",
        code=STREAM_CODE,
    )
    claim.measure(differing)
    losses, weights, _ = short_run(setup, recipe, "stream.engine.backward_stale_input", **stream)
    control = sum(a != b for a, b in zip(losses, resident_losses[:SHORT], strict=True))
    control += sum(not torch.equal(weights[n], t) for n, t in resident_early.items())
    claim.control("backward recomputes from the previous layer's input, 3 steps", control)
    gate.note(
        "streamed_bitwise runs the CPU copy path: a missing wait on an asynchronous CUDA copy "
        "cannot show here (gate-cuda's stream.copy_race covers it on a GPU box)."
    )


@pytest.mark.xdist_group("dynamics")
def test_adapter_initialisation_is_peft_s(gate, setup):  # noqa: F811
    recipe = METHOD_RECIPES[0]
    mine = adapters(assay_trainer(setup, recipe, "init"))
    claim = gate.claim(
        "init.lora_b_zero",
        "a fresh LoRA adapter is a no-op: every B element is exactly zero",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="non-zero B elements",
        code=CODE,
    )
    claim.measure(sum(int(t.count_nonzero()) for n, t in mine.items() if "lora_B" in n))
    with defects.inject("adapters.lora.b_nonzero_init"):
        broken = adapters(assay_trainer(setup, recipe, "init-broken"))
    claim.control(
        "B initialised like A (adapters.lora.b_nonzero_init)",
        sum(int(t.count_nonzero()) for n, t in broken.items() if "lora_B" in n),
    )
    peft = peft_lora(hf_model(smollm2_path()), recipe.rank, recipe.alpha, recipe.projections)
    theirs = {
        n.replace(".default.weight", ""): p.detach()
        for n, p in peft.named_parameters()
        if "lora_A" in n and p.requires_grad
    }
    claim = gate.claim(
        "init.lora_a_law",
        "A is drawn from PEFT's law (kaiming-uniform, bound 1/sqrt(fan_in)): Kolmogorov-Smirnov "
        f"distance to PEFT's own A, pooled over every adapter, at most {A_LAW_KS:g}",
        kind="correctness",
        threshold=Threshold("<=", A_LAW_KS),
        unit="KS distance",
        code=CODE,
    )
    ours, reference = normalised_a(mine), normalised_a(theirs)
    claim.measure(ks_distance(ours, reference))
    normal = torch.randn(ours.numel(), generator=torch.Generator().manual_seed(3)) / math.sqrt(3)
    claim.control(
        "A drawn N(0, 1/(3 fan_in)): same variance, wrong law", ks_distance(normal, reference)
    )
    gate.note(f"largest |A| / bound: {float(ours.abs().max()):.4f} (at most 1 for the law)")
