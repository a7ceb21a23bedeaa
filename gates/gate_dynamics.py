"""gate-dynamics: assay trains as transformers + PEFT do, step for step, on the real SmolLM2.

Both stacks fine-tune SmolLM2-135M-Instruct (the bundled GGUF; transformers dequantizes the
same file with ``gguf_file=``) in fp32 with LoRA r8/alpha16 on every layer's attention
projections, AdamW (weight decay 0.01, clip 1.0), warmup then cosine, on chat rows of
different lengths, micro-batch 1. The reference is written here from the definitions assay
documents, never by calling assay's data, loss or schedule code, so a bug shared by both sides
cannot pass (``gates/dynamics_reference.py`` lists the definitions). The same for rsLoRA and
DoRA (accumulation 1), and a streamed run (RAM tier) bitwise equal to the resident one.
transformers' ``get_cosine_schedule_with_warmup`` uses ``s / warmup`` (lr 0 at the first step);
assay's first step already moves (``(s + 1) / warmup``), which the record states.

The adapter's initial A and B are copied from assay into PEFT, so the initialisation is gated on
its own (B exactly zero, A the law PEFT draws). Controls: the six training defects a quality
gate must catch (named in ``assay_testing.defects``), each in a short run, must each fail a
claim; the record lists which claim caught each and by how much.

Long: about 12 minutes on 2 cores (four recipes in both stacks, a streamed run, eight 3-step
controls and the initialisation check); ``nox -s gates`` leaves it out, ``nox -s gate-dynamics``
runs it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from assay.qualify import Threshold
from assay.train.config import train_config_from_dict
from assay.train.loop import Trainer
from assay_testing import defects
from assay_testing.peers import hf_model, hf_tokenizer, peft_lora
from assay_testing.real_model import smollm2_path
from dynamics_reference import Recipe, Reference, chat_rows, reference_example, run_reference

# the claim a reader looks at first (the index and every record lead with it)
HEADLINE = "dynamics.loss_per_step.lora-accum4"

SHORT = 3  # steps of each control run
ROWS = 24
# rsLoRA at alpha 8 (scale 8/sqrt(8) = 2.83, near LoRA's 2): at alpha 16 (scale 5.66) the
# pilot's largest per-step difference was 9.9e-5, at the threshold. Two correct fp32 stacks
# drift apart with the effective step size (operation order, not a defect: the rsLoRA-scale
# defect moves the loss by 0.26 in 3 steps).
RECIPES = (
    Recipe("lora", 4),
    Recipe("lora", 1),
    Recipe("rslora", 1, alpha=8),
    Recipe("dora", 1),
)
# Pilot on this machine (fp32, 20 steps, 2026-12-02): per-step loss within 1.7e-5 relative
# (LoRA, accumulation 1; 1.0e-5 with 4), final adapters within 2.5e-6 relative Frobenius,
# logits within 1.3e-4. The thresholds are the issue's, above that and below what every
# control moved in the pilot (>= 9.6e-3 on the adapters, >= 0.1 on the loss).
LOSS_REL = 1e-4
WEIGHTS_REL = 1e-3
LOGITS_ABS = 1e-2
A_LAW_KS = 0.01  # Kolmogorov-Smirnov distance between assay's A and PEFT's A, pooled
CODE = (
    "assay.train.loop",
    "assay.train.objective",
    "assay.train.losses",
    "assay.train.data",
    "assay.train.data_masks",
    "assay.train.build",
    "assay.adapters.lora",
    "assay.adapters.dora",
    "assay.adapters.attach",
    "assay.adapter_registry",
    "assay.model.decoder",
)
# The controls' power is the defects': a change to a patch stales the claims it controls.
CODE = (*CODE, "assay_testing.defects", "assay_testing.patching")
STREAM_CODE = (*CODE, "assay.stream")
# The defects a quality gate must catch, run on LoRA with accumulation 4: (name, what it breaks).
TRAINING_DEFECTS = (
    ("adapters.lora.lora_scale_sqrt", "LoRA scaled by alpha/sqrt(r)"),
    ("adapters.lora.forward_unscaled", "LoRA forward without the scale"),
    ("adapters.lora.b_nonzero_init", "B initialised non-zero"),
    ("train.data_masks.prompt_scored", "prompt tokens scored"),
    ("train.losses.mask_ignored", "loss mask ignored"),
    ("train.objective.ce_micro_normalised", "each micro-batch divided by its own tokens"),
)
# Each method's own defect, for the claims about that method: (name, label, steps).
METHOD_DEFECTS = {
    "rslora": ("adapters.lora.rslora_scale", "rsLoRA scaled by alpha/r", SHORT),
    # norm_not_detached moved the loss 2.2e-4 but the adapters only 1.6e-4 in 3 steps (the
    # pilot): too weak for the adapter claim. The wrong norm axis moved the adapters 0.27 but
    # the loss only 1.01e-4 in 3 steps (first receipt), so it runs 6.
    "dora": ("adapters.dora.norm_axis", "DoRA norm taken per input column", 6),
}
# the steps at which the reference keeps its adapters: what the controls compare against
CONTROL_STEPS = tuple(sorted({SHORT, *(steps for _, _, steps in METHOD_DEFECTS.values())}))


@dataclass
class Setup:
    tmp: Path
    rows: Path
    examples: list
    probe: list[list[int]]


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Setup:
    tmp = tmp_path_factory.mktemp("dynamics")
    chats = chat_rows(ROWS, seed=7)
    rows = tmp / "rows.jsonl"
    rows.write_text("".join(json.dumps({"messages": c}) + "\n" for c in chats), "utf-8")
    tokenizer = hf_tokenizer(smollm2_path())
    examples = [reference_example(tokenizer, c) for c in chats]
    return Setup(tmp, rows, examples, [examples[i][0] for i in (0, 5, 11)])


def assay_trainer(setup: Setup, recipe: Recipe, name: str, **extra) -> Trainer:
    options = {"rank": recipe.rank, "alpha": recipe.alpha}
    config = {
        "model": str(smollm2_path()),
        "adapter": {"method": recipe.method, **options, "targets": list(recipe.projections)},
        "data": {"train": str(setup.rows), "format": "messages", "seq_len": 128},
        "optim": {
            "lr": recipe.lr,
            "weight_decay": recipe.weight_decay,
            "betas": list(recipe.betas),
            "eps": recipe.eps,
            "grad_clip": recipe.clip,
            "schedule": "cosine",
            "warmup_steps": recipe.warmup,
        },
        "batch": {"micro_batch": 1, "grad_accum": recipe.accum},
        "steps": recipe.steps,
        "seed": recipe.seed,
        "output": {"dir": str(setup.tmp / name)},
        **extra,
    }
    return Trainer(train_config_from_dict(config, setup.tmp / f"{name}.yaml"), progress=False)


def adapters(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in trainer.params.items() if ".lora_" in n}


def train_losses(trainer: Trainer, steps: int) -> list[float]:
    return [trainer.train_step().loss for _ in range(steps)]


def max_rel(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) / abs(y) for x, y in zip(a, b, strict=True))


def frobenius_rel(mine: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]) -> float:
    """|mine - ref|_F / |ref|_F over every adapter tensor together (not elementwise)."""
    diff = sum(float((mine[n].double() - ref[n].double()).pow(2).sum()) for n in ref)
    norm = sum(float(ref[n].double().pow(2).sum()) for n in ref)
    return math.sqrt(diff / norm)


def ks_distance(a: torch.Tensor, b: torch.Tensor) -> float:
    """Two-sample Kolmogorov-Smirnov distance between the values of ``a`` and ``b``."""
    a, b = a.flatten().double().sort().values, b.flatten().double().sort().values
    grid = torch.cat([a, b]).sort().values
    cdf_a = torch.searchsorted(a, grid, right=True) / a.numel()
    cdf_b = torch.searchsorted(b, grid, right=True) / b.numel()
    return float((cdf_a - cdf_b).abs().max())


def normalised_a(tensors: dict[str, torch.Tensor]) -> torch.Tensor:
    """Every A divided by its kaiming-uniform bound 1/sqrt(fan_in): one law, U(-1, 1)."""
    return torch.cat(
        [(t * math.sqrt(t.shape[1])).flatten() for n, t in tensors.items() if "lora_A" in n]
    )


def logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        out = model(torch.tensor([ids]))
    return (out.logits if hasattr(out, "logits") else out)[0].float()


def short_run(setup: Setup, recipe: Recipe, fault: str, steps: int = SHORT, **extra):
    """Losses and adapters of ``steps`` steps of ``recipe`` with ``fault`` patched in."""
    with defects.inject(fault):
        trainer = assay_trainer(setup, recipe, f"defect-{recipe.name}-{fault}", **extra)
        return train_losses(trainer, steps), adapters(trainer)


def logit_gap(trainer: Trainer, model, probe: list[list[int]]) -> float:
    """Largest |logit difference| between assay's trained model and ``model`` over ``probe``."""
    return max(float((logits(trainer.base, i) - logits(model, i)).abs().max()) for i in probe)


def claim_recipe(gate, setup: Setup, recipe: Recipe, controls) -> Reference:
    """The three dynamics claims for one recipe; returns its reference run. ``controls(ref)``
    gives (label, loss difference, adapter difference) per control."""
    cpu = time.process_time()
    trainer = assay_trainer(setup, recipe, recipe.name)
    initial = adapters(trainer)
    mine = train_losses(trainer, recipe.steps)
    assay_cpu = time.process_time() - cpu
    ref = run_reference(recipe, initial, setup.examples, keep=(*CONTROL_STEPS, recipe.steps))
    measured = controls(ref)
    what = f"{recipe.method}, grad accumulation {recipe.accum}, micro-batch 1, {recipe.steps} steps"
    final = frobenius_rel(adapters(trainer), ref.snapshots[recipe.steps])
    # (claim, statement, threshold, unit, measured, which control column it is judged on)
    for kind, statement, bound, unit, value, column in (
        (
            "loss_per_step",
            f"assay's training loss equals transformers + PEFT's at every step ({what}): largest "
            f"relative difference at most {LOSS_REL:g}",
            LOSS_REL,
            "max relative |loss difference|",
            max_rel(mine, ref.losses),
            1,
        ),
        (
            "final_adapters",
            f"after the run ({what}) assay's and PEFT's adapter tensors differ by at most "
            f"{WEIGHTS_REL:g} relative Frobenius norm over all of them",
            WEIGHTS_REL,
            "relative Frobenius distance",
            final,
            2,
        ),
    ):
        claim = gate.claim(
            f"dynamics.{kind}.{recipe.name}",
            statement,
            kind="correctness",
            threshold=Threshold("<=", bound),
            unit=unit,
            code=CODE,
        )
        claim.measure(value)
        for row in measured:
            claim.control(row[0], row[column])
    claim = gate.claim(
        f"dynamics.final_logits.{recipe.name}",
        f"the trained models' logits ({what}) agree within {LOGITS_ABS:g} on three prompts",
        kind="correctness",
        threshold=Threshold("<=", LOGITS_ABS),
        unit="max |logit difference|",
        code=CODE,
    )
    claim.measure(logit_gap(trainer, ref.model, setup.probe))
    with ref.model.disable_adapter():  # PEFT's base model: the update never applied
        off = logit_gap(trainer, ref.model, setup.probe)
    claim.control("the reference with its trained adapter switched off", off)
    gate.note(
        f"{recipe.name}: losses assay {', '.join(f'{x:.6f}' for x in mine[:3])} ..., reference "
        f"{', '.join(f'{x:.6f}' for x in ref.losses[:3])} ...; CPU-seconds assay "
        f"{assay_cpu:.0f}, reference {ref.cpu_s:.0f}; controls (loss, adapters): "
        + "; ".join(f"{label}: {loss:.3g}, {w:.3g}" for label, loss, w in measured)
    )
    return ref


@pytest.mark.xdist_group("dynamics")
def test_training_dynamics_equal_transformers_peft(gate, setup):
    gate.seed(RECIPES[0].seed)
    gate.input("model", smollm2_path())
    gate.note(
        "Schedule: assay's warmup factor is (s+1)/warmup, so the first step trains at "
        "lr/warmup; transformers' get_cosine_schedule_with_warmup starts at lr 0 (s/warmup). "
        "The reference follows assay's documented convention (settings help: optim.warmup_steps)."
    )
    lora4 = RECIPES[0]
    broken = {fault: short_run(setup, lora4, fault) for fault, _ in TRAINING_DEFECTS}

    def six(ref4: Reference) -> list[tuple[str, float, float]]:
        """The six defects (run with accumulation 4) against the accumulation-4 reference."""
        return [
            (
                f"{label} ({fault}), {SHORT} steps with accumulation 4",
                max_rel(broken[fault][0], ref4.losses[:SHORT]),
                frobenius_rel(broken[fault][1], ref4.snapshots[SHORT]),
            )
            for fault, label in TRAINING_DEFECTS
        ]

    ref4 = claim_recipe(gate, setup, lora4, six)
    claim_recipe(gate, setup, RECIPES[1], lambda _ref: six(ref4))
    for recipe in RECIPES[2:]:
        fault, label, steps = METHOD_DEFECTS[recipe.method]
        losses, weights = short_run(setup, recipe, fault, steps)
        what = f"{label} ({fault}), {steps} steps"

        def own(ref: Reference, lo=losses, w=weights, n=steps, what=what):
            return [(what, max_rel(lo, ref.losses[:n]), frobenius_rel(w, ref.snapshots[n]))]

        claim_recipe(gate, setup, recipe, own)


@pytest.mark.xdist_group("dynamics")
def test_streamed_training_is_bitwise_resident(gate, setup):
    recipe = dataclasses.replace(RECIPES[1], steps=10)
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
    losses, weights = short_run(setup, recipe, "stream.engine.backward_stale_input", **stream)
    control = sum(a != b for a, b in zip(losses, resident_losses[:SHORT], strict=True))
    control += sum(not torch.equal(weights[n], t) for n, t in resident_early.items())
    claim.control("backward recomputes from the previous layer's input, 3 steps", control)
    gate.note(
        "streamed_bitwise runs the CPU copy path: a missing wait on an asynchronous CUDA copy "
        "cannot show here (gate-cuda's stream.copy_race covers it on a GPU box)."
    )


@pytest.mark.xdist_group("dynamics")
def test_adapter_initialisation_is_peft_s(gate, setup):
    recipe = RECIPES[1]
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
