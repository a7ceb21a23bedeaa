"""gate-dynamics' and gate-quality's shared machinery (not a gate module): assay and
transformers + PEFT trained on the same chat rows, and the claims that compare them.

``claim_recipe`` makes the three dynamics claims of one recipe (per-step loss, final adapters,
final logits) with the controls it is handed, judged by the recipe's bounds; the recipes, bounds
and defects are in ``support.dynamics.recipes``.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from torch._inductor.utils import fresh_inductor_cache

from assay.qualify import Threshold
from assay.settings.loader import train_config_from_dict
from assay.train.loop import Trainer
from assay_testing import defects
from assay_testing.peers import hf_tokenizer
from assay_testing.real_model import smollm2_path
from support.dynamics.recipes import (
    CODE,
    CONTROL_STEPS,
    GRADIENT_SCALED,
    LORA_ACCUM4,
    LOSS_ONLY,
    METHOD_DEFECTS,
    ROWS,
    SHORT,
    TRAINING_DEFECTS,
    bounds_of,
)
from support.dynamics.reference import (
    Recipe,
    Reference,
    chat_rows,
    reference_example,
    run_reference,
)


@dataclass
class Setup:
    tmp: Path
    rows: Path
    examples: list
    probe: list[list[int]]
    tokenizer: object = None
    # words per row -> (rows file, reference examples): the default rows, and any a recipe asks
    data: dict = field(default_factory=dict)


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Setup:
    tmp = tmp_path_factory.mktemp("dynamics")
    made = Setup(tmp, tmp, [], [], hf_tokenizer(smollm2_path()))
    made.rows, made.examples = dataset(made, (2, 7))
    made.probe = [made.examples[i][0] for i in (0, 5, 11)]
    return made


def dataset(setup: Setup, words: tuple[int, int]) -> tuple[Path, list]:
    """The ``ROWS`` chat rows of ``words`` words each: assay's rows file and the reference's
    examples (made once per session)."""
    if words not in setup.data:
        chats = chat_rows(ROWS, seed=7, words_per_row=words)
        rows = setup.tmp / f"rows-{words[0]}-{words[1]}.jsonl"
        rows.write_text("".join(json.dumps({"messages": c}) + "\n" for c in chats), "utf-8")
        setup.data[words] = rows, [reference_example(setup.tokenizer, c) for c in chats]
    return setup.data[words]


def assay_trainer(setup: Setup, recipe: Recipe, name: str, **extra) -> Trainer:
    options = {"rank": recipe.rank, "alpha": recipe.alpha}
    if recipe.loss != "ce":
        extra = {"loss": {"type": recipe.loss, "chunk_size": recipe.chunk_size}, **extra}
    if recipe.precision != "float32":
        extra = {"precision": recipe.precision, **extra}
    if recipe.compile:
        extra = {"compile": True, **extra}
    rows = dataset(setup, recipe.words)[0]
    config = {
        "model": str(smollm2_path()),
        "adapter": {"method": recipe.method, **options, "targets": list(recipe.projections)},
        "data": {"train": str(rows), "format": "messages", "seq_len": 128},
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
        "storage": recipe.storage,
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
    """Losses, adapters and gradient norms of ``steps`` steps of ``recipe`` with ``fault``
    patched in."""
    with defects.inject(fault):
        trainer = assay_trainer(setup, recipe, f"defect-{recipe.name}-{fault}", **extra)
        records = [trainer.train_step() for _ in range(steps)]
        return [r.loss for r in records], adapters(trainer), [r.grad_norm for r in records]


def logit_gap(trainer: Trainer, model, probe: list[list[int]]) -> float:
    """Largest |logit difference| between assay's trained model and ``model`` over ``probe``."""
    return max(float((logits(trainer.base, i) - logits(model, i)).abs().max()) for i in probe)


def claim_recipe(gate, setup: Setup, recipe: Recipe, controls) -> Reference:
    """The three dynamics claims for one recipe; returns its reference run. ``controls(ref)``
    gives (label, loss difference, adapter difference) per control."""
    cpu = time.process_time()
    # a compiled run compiles into an empty inductor cache: its notes give the cold compile time
    cold = fresh_inductor_cache() if recipe.compile else contextlib.nullcontext()
    with cold:
        trainer = assay_trainer(setup, recipe, recipe.name)
        initial = adapters(trainer)
        records = [trainer.train_step() for _ in range(recipe.steps)]
    mine = [r.loss for r in records]
    norms = [r.grad_norm for r in records]
    assay_cpu = time.process_time() - cpu
    if recipe.compile:
        gate.note(compile_note(recipe, [r.seconds for r in records]))
    examples = dataset(setup, recipe.words)[1]
    ref = run_reference(recipe, initial, examples, keep=(*CONTROL_STEPS, recipe.steps))
    ref.assay_grad_norms = norms
    measured = controls(ref)
    quantized = recipe.storage != "float32"
    what = f"{recipe.method}, grad accumulation {recipe.accum}, micro-batch 1, {recipe.steps} steps"
    if quantized:  # QLoRA: the reference is transformers + bitsandbytes on the same bytes
        what += ", NF4 double-quant base against transformers + bitsandbytes (fp32 compute)"
    if recipe.precision == "bf16":
        what += (
            ", bf16 on both sides: the decoder layers under torch.autocast(bfloat16), head "
            "and loss float32"
        )
    if recipe.compile:
        what += ", assay compiled (torch.compile per decoder layer) against PEFT eager"
    if recipe.loss == "chunked_ce":
        what += (
            f", chunked CE ({recipe.chunk_size} tokens a chunk, rows of {recipe.words[0]} to "
            f"{recipe.words[1]} words) against PEFT's plain F.cross_entropy on fp64 logits"
        )
    bounds = bounds_of(recipe)
    code = recipe_code(recipe)
    final = frobenius_rel(adapters(trainer), ref.snapshots[recipe.steps])
    # (claim, statement, threshold, unit, measured, which control column it is judged on)
    for kind, statement, bound, unit, value, column in (
        (
            "loss_per_step",
            f"assay's training loss equals transformers + PEFT's at every step ({what}): "
            + bounds.loss_words(),
            bounds.loss,
            f"{bounds.loss_statistic} relative |loss difference|",
            bounds.loss_distance(mine, ref.losses),
            1,
        ),
        (
            "final_adapters",
            f"after the run ({what}) assay's and PEFT's adapter tensors differ by at most "
            f"{bounds.weights:g} relative Frobenius norm over all of them",
            bounds.weights,
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
            code=code,
        )
        claim.measure(value)
        for row in measured:
            if row[column] is not None:  # None: not a control of this claim (LOSS_ONLY)
                claim.control(row[0], row[column])
    claim = gate.claim(
        f"dynamics.final_logits.{recipe.name}",
        f"the trained models' logits ({what}) agree within {bounds.logits:g} on three prompts",
        kind="correctness",
        threshold=Threshold("<=", bounds.logits),
        unit="max |logit difference|",
        code=code,
    )
    claim.measure(logit_gap(trainer, ref.model, setup.probe))
    with ref.model.disable_adapter():  # PEFT's base model: the update never applied
        off = logit_gap(trainer, ref.model, setup.probe)
    claim.control("the reference with its trained adapter switched off", off)
    gate.note(
        f"{recipe.name}: losses assay {', '.join(f'{x:.6f}' for x in mine[:3])} ..., reference "
        f"{', '.join(f'{x:.6f}' for x in ref.losses[:3])} ...; CPU-seconds assay "
        f"{assay_cpu:.0f}, reference {ref.cpu_s:.0f}; controls (loss, adapters): "
        + "; ".join(f"{label}: {loss:.3g}, {_g(w)}" for label, loss, w in measured)
    )
    return ref


def recipe_code(recipe: Recipe) -> tuple[str, ...]:
    """The code a recipe's claims run: the shared training code, plus NF4 storage for a
    quantized recipe and DoRA's module for DoRA."""
    code = (*CODE, "assay.storage.nf4") if recipe.storage != "float32" else CODE
    return (*code, "assay.adapters.dora") if recipe.method == "dora" else code


def compile_note(recipe: Recipe, seconds: list[float]) -> str:
    """What compiling cost in the run: the first steps (which compile) against the median
    step of the rest (which run compiled graphs)."""
    steady = sorted(seconds[3:])[len(seconds[3:]) // 2]
    paid = sum(seconds) - steady * len(seconds)
    return (
        f"{recipe.name}: compile time. Steps 1-3 took {', '.join(f'{s:.1f}' for s in seconds[:3])}"
        f" s, the median of steps 4-{len(seconds)} {steady:.2f} s; the run of {len(seconds)} "
        f"steps took {sum(seconds):.1f} s, {paid:.1f} s more than {len(seconds)} steady steps "
        "(compilation into an empty inductor cache, including recompiles for new row lengths)"
    )


def _g(value: float | None) -> str:
    return "not a control" if value is None else f"{value:.3g}"


def claim_training_defects(gate, setup: Setup) -> None:
    """gate-quality's headline: LoRA with accumulation 4 trains as transformers + PEFT do,
    and each of the six training defects, run for ``SHORT`` steps, fails those claims."""
    recipe = LORA_ACCUM4
    broken = {fault: short_run(setup, recipe, fault)[:2] for fault, _ in TRAINING_DEFECTS}

    def six(ref: Reference) -> list[tuple[str, float, float]]:
        return [
            (
                f"{label} ({fault}), {SHORT} steps with accumulation 4",
                max_rel(broken[fault][0], ref.losses[:SHORT]),
                frobenius_rel(broken[fault][1], ref.snapshots[SHORT]),
            )
            for fault, label in TRAINING_DEFECTS
        ]

    claim_recipe(gate, setup, recipe, six)


def claim_method(gate, setup: Setup, recipe: Recipe) -> Reference:
    """The dynamics claims of ``recipe``, controlled by its method's own defects (its
    storage's, for a quantized recipe; its loss's, for chunked CE), and its gradient-norm claim;
    returns the reference run."""
    quantized = recipe.storage != "float32"
    key = recipe.storage if quantized else recipe.method
    key = recipe.loss if recipe.loss != "ce" else key
    key = "bf16" if recipe.precision == "bf16" else key
    bounds = bounds_of(recipe)
    runs = [
        (f"{label} ({fault}), {steps} steps", fault, steps, short_run(setup, recipe, fault, steps))
        for fault, label, steps in METHOD_DEFECTS[key]
    ]

    def own(ref: Reference) -> list[tuple[str, float, float | None]]:
        return [
            (
                what,
                bounds.loss_distance(lo, ref.losses[:n]),
                None if fault in LOSS_ONLY else frobenius_rel(w, ref.snapshots[n]),
            )
            for what, fault, n, (lo, w, _) in runs
        ]

    ref = claim_recipe(gate, setup, recipe, own)
    scaled = short_run(setup, recipe, GRADIENT_SCALED)
    runs.append((f"gradients doubled ({GRADIENT_SCALED}), {SHORT} steps", "", SHORT, scaled))
    claim_grad_norm(gate, recipe, ref, runs)
    return ref


def claim_grad_norm(gate, recipe: Recipe, ref: Reference, runs) -> None:
    """Each step's gradient norm before clipping (what metrics.jsonl logs as grad_norm) equals
    PEFT's, by the recipe's loss bound. A clip that is active at every step hides a gradient
    scaled by a constant from the loss, the adapters and the logits: only the norm shows it."""
    bounds = bounds_of(recipe)
    clipped = sum(n > recipe.clip for n in ref.grad_norms) if recipe.clip is not None else 0
    claim = gate.claim(
        f"dynamics.grad_norm_per_step.{recipe.name}",
        f"assay's gradient norm before clipping equals transformers + PEFT's at every one of "
        f"{recipe.steps} steps ({recipe.name}; clip {recipe.clip} active at {clipped} of them): "
        + bounds.loss_words(),
        kind="correctness",
        threshold=Threshold("<=", bounds.loss),
        unit=f"{bounds.loss_statistic} relative |grad norm difference|",
        code=recipe_code(recipe),
    )
    claim.measure(bounds.loss_distance(ref.assay_grad_norms, ref.grad_norms))
    for what, fault, n, (_, _, norms) in runs:
        if fault not in LOSS_ONLY:  # moves the logged loss only: the gradient is unchanged
            claim.control(what, bounds.loss_distance(norms, ref.grad_norms[:n]))
    gate.note(
        f"{recipe.name}: gradient norms assay "
        f"{', '.join(f'{x:.6g}' for x in ref.assay_grad_norms[:3])} ..., reference "
        f"{', '.join(f'{x:.6g}' for x in ref.grad_norms[:3])} ..."
    )
