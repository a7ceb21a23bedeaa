"""gate-preference: DPO (sigmoid, hinge, robust), IPO, ORPO, SimPO and KTO equal their formulas,
stream bit-exactly, cost no extra weights for the reference, and train in the right direction;
a step of pairs trains alike however gradient accumulation splits it.

The formula checks are written here from SPEC's "Losses", in plain torch on full logits, with
the reference taken from a SEPARATELY LOADED model without adapters; the product computes the
reference as the same model with adapters disabled, in chunks, with its own backward. Adapter B
matrices are randomized so policy and reference differ and A's gradients are not zero.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import assay
from assay.adapters import attach, disabled
from assay.adapters.perturb import randomize_adapters
from assay.qualify import Threshold
from assay.train.data.dataset import collate
from assay_testing.real_model import smollm2_path
from assay_testing.tiny import smollm2_shaped
from support.preference.helpers import (
    adapted,
    inputs,
    leaky,
    objective,
    product,
    relative,
    static_bytes,
    swapped,
    trainables,
    unequal,
)
from support.preference.reference import completion_logps, formula_loss, pair_batch

# the claim a reader looks at first (the index and every record lead with it)
HEADLINE = "loss.dpo"

IMPLEMENTATION = (
    "assay.train.preference",
    "assay.train.objective",
    "assay.adapters.control",
    "support.preference.reference",
    "support.preference.helpers",  # the gate's helpers, moved out of this file
)
FORMULA_CODE = (*IMPLEMENTATION, "assay.train.data.dataset")
PEAK_CODE = (*IMPLEMENTATION, "assay.memory.peak", "assay.train.losses")
# (claim suffix, loss type, dpo variant, label smoothing)
LOSSES = (
    ("dpo", "dpo", "sigmoid", 0.0),
    ("dpo_hinge", "dpo", "hinge", 0.0),
    ("dpo_robust", "dpo", "robust", 0.1),
    ("ipo", "ipo", "sigmoid", 0.0),
    ("orpo", "orpo", "sigmoid", 0.0),
    ("simpo", "simpo", "sigmoid", 0.0),
    ("kto", "kto", "sigmoid", 0.0),
)
TOL = 1e-4  # fp32: chunked logsumexp and a hand-written backward vs autograd on full logits


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from assay_testing.tiny import save_tiny

    return save_tiny("llama3", tmp_path_factory.mktemp("tiny"), seed=11, gguf=False)["hf"]


@pytest.mark.parametrize("spec", LOSSES, ids=[s[0] for s in LOSSES])
def test_loss_and_gradients_match_the_formula(gate, tiny, spec):
    gate.seed(3, 21)
    name, kind = spec[0], spec[1]
    model, reference = adapted(tiny), assay.load(tiny)  # reference: no adapters attached
    batch, rows, labels = inputs(spec, 21)
    loss, grads = product(model, model, spec, batch)
    params = trainables(model)
    want = formula_loss(spec, model, reference, rows, labels)
    want_grads = dict(zip(params, torch.autograd.grad(want, list(params.values())), strict=True))
    want_value = want.detach()
    loss_err = float((loss - want_value).abs() / want_value.abs().clamp_min(1e-30))
    claim = gate.claim(
        f"loss.{name}",
        f"{name}: the product loss equals the gate's formula on full logits (reference: a "
        f"separately loaded model without adapters); tiny llama3, LoRA r4, {len(rows)} rows",
        kind="correctness",
        threshold=Threshold("<=", TOL, tolerance=0.1),
        unit="relative error",
        code=FORMULA_CODE,
    )
    claim.measure(loss_err)
    grad_claim = gate.claim(
        f"grad.{name}",
        f"{name}: every trainable gradient ({len(params)} tensors) equals autograd through "
        "the gate's formula",
        kind="correctness",
        threshold=Threshold("<=", TOL, tolerance=0.1),
        unit="max relative error",
        code=FORMULA_CODE,
    )
    grad_claim.measure(relative(grads, want_grads))
    bad_loss, bad_grads = product(model, model, spec, swapped(batch))
    label = "chosen and rejected swapped (KTO: labels flipped)"
    claim.control(label, float((bad_loss - want_value).abs() / want_value.abs()))
    grad_claim.control(label, relative(bad_grads, want_grads))
    if kind != "dpo":  # DPO cancels prompt tokens exactly (same prefix in chosen and rejected)
        bad_loss, bad_grads = product(model, model, spec, leaky(batch))
        label = "prompt tokens scored too"
        claim.control(label, float((bad_loss - want_value).abs() / want_value.abs()))
        grad_claim.control(label, relative(bad_grads, want_grads))
    if kind in ("dpo", "ipo", "kto"):
        live = {"reference": lambda _m: contextlib.nullcontext()}
        bad_loss, bad_grads = product(model, model, spec, batch, **live)
        label = "reference = the live adapter, not the disabled one"
        claim.control(label, float((bad_loss - want_value).abs() / want_value.abs()))
        if name != "dpo_hinge":  # relu(1 - beta h) has slope -beta whatever the reference is
            grad_claim.control(label, relative(bad_grads, want_grads))


@pytest.mark.parametrize("spec", LOSSES, ids=[s[0] for s in LOSSES])
def test_streamed_equals_resident(gate, tiny, spec):
    from assay.stream import StreamedModel

    name = spec[0]
    batch = inputs(spec, 5)[0]
    bad_total = total = 0
    controls = 0
    for storage in ("float32", "nf4_double_quant"):
        resident = adapted(tiny, storage)
        want = product(resident, resident, spec, batch)
        base = adapted(tiny, storage)
        got = product(StreamedModel(base, buffers=2), base, spec, batch)
        bad_total += unequal(got, want)
        total += 1 + len(want[1])
        base = adapted(tiny, storage)
        # The trap the objective's order avoids: adapters toggled between forward and backward.
        trap = product(
            StreamedModel(base, buffers=2),
            base,
            spec,
            batch,
            backward_ctx=lambda model=base: disabled(model),
        )
        controls += unequal(trap, want)
    claim = gate.claim(
        f"stream.{name}",
        f"{name}: streamed (ram, 2 buffers) torch.equal resident for float32 and nf4_dq: the "
        f"loss and every trainable gradient ({total - bad_total}/{total} tensors equal)",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="unequal tensors",
        code=[*IMPLEMENTATION, "assay.stream.engine"],
    )
    claim.measure(bad_total)
    claim.control("streamed backward run with the adapters disabled", controls)


def test_dpo_peak_against_sft(gate):
    from assay.memory.peak import measure_peak

    gate.seed(0, 7)
    model = randomize_adapters(
        attach(smollm2_shaped(4), "lora", rank=8, alpha=16, targets="attention"), seed=0
    )
    shape = {"vocab": 49152, "prompt": (16, 25), "completion": (24, 41)}
    batch, rows = pair_batch(7, pairs=2, **shape)
    params = list(trainables(model).values())

    def peak(run) -> int:
        run()  # warm-up: first-call allocations are not the step's
        return measure_peak(run)[1].peak_bytes

    def objective_step(obj):
        def run():
            for p in params:
                p.grad = None
            obj.loss(batch, obj.normaliser(batch), 1.0).backward()

        return run

    def full_logits_dpo():
        for p in params:
            p.grad = None
        with torch.no_grad(), disabled(model):
            ref, _ = completion_logps(model, rows)
        pi, _ = completion_logps(model, rows)
        z = 0.1 * ((pi[:2] - ref[:2]) - (pi[2:] - ref[2:]))
        F.softplus(-z).mean().backward()

    sft = peak(objective_step(objective(model, model, "chunked_ce", "sigmoid", 0.0)))
    dpo_obj = objective(model, model, "dpo", "sigmoid", 0.0)
    dpo = peak(objective_step(dpo_obj))
    full = peak(full_logits_dpo)
    shape_text = f"{batch.input_ids.shape[0]} rows x {batch.input_ids.shape[1]} tokens"
    claim = gate.claim(
        "memory.dpo_over_sft_step_peak",
        f"SmolLM2-shaped decoder (4 layers), LoRA r8 attention, {shape_text}: the "
        "tensor-level peak (profiler) of one DPO step (reference = adapters disabled, "
        "no_grad, before the policy) over one chunked-CE "
        "SFT step on the same rows and masks",
        kind="memory",
        threshold=Threshold("<=", 1.10, tolerance=0.02),
        unit="x",
        code=PEAK_CODE,
    )
    claim.measure(dpo / sft)
    claim.control("DPO from full-vocabulary logits (log_softmax over [N, T, V])", full / sft)
    static = static_bytes(model)
    copy = smollm2_shaped(4)

    @contextlib.contextmanager
    def second_model(_base):
        dpo_obj.model = copy
        try:
            yield
        finally:
            dpo_obj.model = model

    dpo_obj.reference = second_model
    copied = peak(objective_step(dpo_obj))
    total = gate.claim(
        "memory.dpo_over_sft_total",
        "the same, counting the weights held too: (model tensors + DPO step peak) over "
        "(model tensors + SFT step peak); the reference adds no weights",
        kind="memory",
        threshold=Threshold("<=", 1.10, tolerance=0.02),
        unit="x",
        code=PEAK_CODE,
    )
    total.measure((static + dpo) / (static + sft))
    total.control(
        "reference = a second loaded copy of the model",
        (static + static_bytes(copy) + copied) / (static + sft),
    )
    gate.note(
        f"step peaks (MiB): SFT chunked CE {sft / 2**20:.1f}, DPO {dpo / 2**20:.1f}, "
        f"full-logits DPO {full / 2**20:.1f}; model tensors {static / 2**20:.1f} MiB"
    )
    why = (
        "assay.memory.predict does not exist yet (issue 8)"
        if importlib.util.find_spec("assay.memory.predict") is None
        else "assay.memory.predict models a whole AdamW step from a Plan; this gate measures "
        "forward + backward only, so its prediction is not compared here"
    )
    gate.not_tested("memory model prediction of the DPO peak", why)


EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_dpo_training_raises_the_margin(gate, tmp_path):
    import json

    from assay.settings.loader import train_config_from_dict
    from assay.train.loop import Trainer
    from assay_testing.tiny import save_tiny

    data = EXAMPLES / "data" / "preference.jsonl"
    gate.input("data", data)
    gate.input("tokenizer", smollm2_path())
    gate.seed(2)
    model = save_tiny("llama3", tmp_path, seed=2, gguf=False, vocab_size=49152)["hf"]
    swapped = tmp_path / "swapped.jsonl"
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    swapped.write_text(
        "".join(
            json.dumps({**r, "chosen": r["rejected"], "rejected": r["chosen"]}) + "\n" for r in rows
        )
    )
    steps = 200

    def trained(train_file: Path) -> Trainer:
        config = {
            "model": str(model),
            "tokenizer": str(smollm2_path()),
            "adapter": {"method": "lora", "rank": 8, "alpha": 16},
            "data": {"train": str(train_file), "seq_len": 64},
            "loss": {"type": "dpo", "beta": 0.1},
            "optim": {"lr": 2e-3},
            "batch": {"micro_batch": 4},
            "steps": steps,
            "seed": 2,
            "output": {"dir": str(tmp_path / train_file.stem)},
        }
        trainer = Trainer(train_config_from_dict(config, tmp_path / "c.yaml"), progress=False)
        trainer.margins_before = margins(trainer, trainer.train_data.examples)
        for _ in range(steps):
            trainer.train_step()
        return trainer

    def margins(trainer: Trainer, examples) -> dict[str, float]:
        with torch.no_grad():
            batch = collate(list(examples), trainer.pad_id)
            trainer.objective.loss(batch, trainer.objective.normaliser(batch), 1.0)
        return trainer.objective.metrics()

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny ops: 2 threads on a shared 2-core box spin far slower
    try:
        good = trained(data)
        after = margins(good, good.train_data.examples)
        bad = trained(swapped)
    finally:
        torch.set_num_threads(threads)
    # Judge the swapped run on the ORIGINAL preferences: its examples with the halves swapped back.
    original = [dataclasses.replace(e, seqs=e.seqs[::-1]) for e in bad.train_data.examples]
    bad_after = margins(bad, original)
    claim = gate.claim(
        "train.margin_rises",
        f"{steps} DPO steps (tiny llama3, SmolLM2 tokenizer, LoRA r8, {len(rows)} synthetic "
        "pairs, batch 4, lr 2e-3, 1 thread): mean chosen-minus-rejected reward margin on the "
        "training pairs, which starts at 0 (adapter B = 0: policy = reference)",
        kind="correctness",
        threshold=Threshold(">=", 1.0, tolerance=0.1),
        unit="beta-scaled nats",
        code=[*IMPLEMENTATION, "assay.train.loop"],
    )
    claim.measure(after["rewards/margins"] - good.margins_before["rewards/margins"])
    claim.control(
        "trained on the swapped preferences, judged on the original ones",
        bad_after["rewards/margins"] - bad.margins_before["rewards/margins"],
    )
    gate.note(
        f"after {steps} steps: margin {after['rewards/margins']:.3f}, accuracy "
        f"{after['rewards/accuracies']:.3f}, chosen reward {after['rewards/chosen']:.3f}, "
        f"rejected reward {after['rewards/rejected']:.3f}; swapped run judged on the original "
        f"pairs: margin {bad_after['rewards/margins']:.3f}, accuracy "
        f"{bad_after['rewards/accuracies']:.3f}"
    )
    gate.note(
        "What train.margin_rises proves: the DPO loss, its reference and the loop's backward "
        "push the policy toward chosen and away from rejected completions (the swapped control "
        "moves the other way). What it does not prove: generalisation to unseen prompts (the "
        "margin is measured on the training pairs), any quality gain of a real model (the "
        "model is tiny and random; it memorises), or agreement with another trainer's numbers."
    )


# Pair losses whose step is defined over its rows. KTO is left out by design: its KL reference
# point is estimated within each micro-batch, as TRL's is (and train refuses it distributed).
STEP_LOSSES = ("dpo", "ipo", "orpo", "simpo")
# float32 sums in another order (the distributed cells' bound, gate-matrix)
SPLIT_BOUND = 1e-5
SPLIT_CODE = (
    "assay.train.loop",
    "assay.train.objective",
    "assay.train.preference",
    "support.matrix.runs",
    "support.plain_cell",
)


@pytest.fixture(scope="module")
def space(tmp_path_factory):
    from support.matrix.runs import build_workspace

    return build_workspace(tmp_path_factory.mktemp("split"))


def _run_split(space, kind: str, micro_batch: int, faults: str = "") -> object:
    """Three steps of ``kind`` on 4 pairs a step, ``micro_batch`` pairs per micro-batch, with
    ``faults`` armed; returns the run's losses and trainables."""
    import yaml

    from assay.cli import main
    from assay_testing.defects import arm
    from assay_testing.matrix import train_config
    from support.matrix.runs import read_outcome
    from support.plain_cell import plain_cell

    cell = plain_cell(loss=kind)
    out = space.runs / f"{kind}-{micro_batch}-{faults or 'clean'}"
    config = train_config(cell, space, out)
    config["batch"] = {"micro_batch": micro_batch, "grad_accum": 4 // micro_batch}
    path = out.parent / f"{out.name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    with arm(faults):
        assert main(["train", str(path), "--no-progress"]) == 0
    return read_outcome(out)


@pytest.mark.parametrize("kind", STEP_LOSSES)
def test_a_step_trains_alike_however_its_pairs_are_split(gate, space, kind):
    """Gradient accumulation (and data parallelism, which splits a step the same way) must not
    change what a step trains: ORPO's NLL term is one token mean over the step's chosen
    completions, every pair loss a mean over the step's pairs."""
    from support.matrix.runs import largest_difference

    whole = _run_split(space, kind, 4)
    claim = gate.claim(
        f"split.{kind}",
        f"{kind}: 3 steps of 4 pairs as 2 micro-batches of 2 (grad_accum 2; the pairs' "
        "completions of unequal length) end within float32 summation order of the same steps as "
        "one micro-batch of 4: every step's loss and every trainable element (tiny llama, LoRA)",
        kind="correctness",
        threshold=Threshold("<=", SPLIT_BOUND),
        unit="largest absolute difference",
        code=SPLIT_CODE,
    )
    claim.measure(largest_difference(_run_split(space, kind, 2), whole))
    faults = ["train.objective.accumulation_not_divided"]
    if kind == "orpo":
        faults.append("train.objective.orpo_nll_per_micro_batch")
    for fault in faults:
        claim.control(
            f"{fault} on the split run",
            largest_difference(_run_split(space, kind, 2, fault), whole),
        )
