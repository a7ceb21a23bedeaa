"""gate-quality: assay trains as transformers + PEFT do, and a fine-tune learns what a prompted
base model cannot.

Two kinds of evidence (issue 28), both on the real SmolLM2-135M-Instruct:

1. **Dynamics (the headline).** LoRA r8 with gradient accumulation 4 over chat rows of
   different lengths trains step for step as transformers + PEFT with a loop written from
   assay's documented definitions (``gates/support/dynamics/reference.py``): per-step loss, final
   adapters, final logits. The six training defects a quality gate must catch (LoRA scale
   alpha/sqrt(r), unscaled forward, B initialised non-zero, prompt tokens scored, loss mask
   ignored, each micro-batch divided by its own tokens) each run 3 steps as controls and each
   fails these claims; the record lists by how much. gate-dynamics holds the other methods.
2. **Behaviour on a task with headroom.** The keyed task (``assay_testing.keyed_task``): a
   hidden per-key order of two words, where the best prompted base model (0, 3 or 8 shots,
   measured here) scores between 0.2 and 0.6 and a model that learns only the format scores
   about a quarter. Five training seeds must each beat the best prompted base by a margin fixed
   in advance; the learning curve is the record's figure; NF4 double-quant storage must clear
   the same margin; DPO must raise held-out preference accuracy.

The scorer (``assay_testing.grader``) is gated first, with stubs. Long: ``nox -s gates`` leaves
it out; ``nox -s gate-quality`` runs it (about 11 minutes on 2 cores).
"""

from __future__ import annotations

import pytest
import torch

from assay.qualify import Threshold
from assay_testing import defects, grader
from assay_testing.keyed_task import (
    SEED,
    Split,
    few_shot_prompt,
    key_ignored_rows,
    make_split,
    sft_rows,
    write_preference,
    write_sft,
)
from assay_testing.real_model import smollm2_path
from assay_testing.trained_weights import needs_trained_weights
from support.dynamics.helpers import claim_training_defects, setup  # noqa: F401  (setup: the fixture)
from support.moved_claims import retire_replaced_claims
from support.quality.helpers import (
    LR,
    answers,
    defect_table,
    expected,
    interval_low,
    make_trainer,
    plot_curves,
    preference_accuracy,
    scorer_cases,
    swap_task_prompted,
    train,
)

# the claim a reader looks at first (the index and every record lead with it)
HEADLINE = "dynamics.loss_per_step.lora-accum4"

SCORER_CODE = ("assay_testing.keyed_task", "assay_testing.grader", "support.quality.helpers")
IMPLEMENTATION = (
    *SCORER_CODE,
    "assay.model.generate",
    "assay.model.cache",
    "assay.model.decoder",
    "assay.train.loop",
    "assay.train.objective",
    "support.quality.helpers",
)
SHOTS = (0, 3, 8)
# The band the best prompted base must fall in for the task to have headroom (issue 28).
BAND = (0.2, 0.6)
SEEDS = (0, 1, 2, 3, 4)
SFT_STEPS = 80
# Fixed on 2026-12-03 before the first gate run: every seed must beat the best prompted base
# by this much. The pilot (lr 5e-3, 80 steps) reached 0.94, 0.76 and 0.98 with seeds 0-2
# against a best prompted 0.32 (8-shot), gaps of 0.44 to 0.66; 0.3 leaves room for seed spread
# while staying far above what format alone earns (about a quarter, below the prompted base).
MARGIN = 0.3
PREF_TARGET = 0.9
# issue 28: pairs where the base prefers the chosen answer at most 0.6 of the time, and a gain
# fixed in advance; the pilot (lr 5e-3, 30 steps) went from 0.531 to 1.000
PREF_BASE_MAX = 0.6
PREF_GAIN = 0.3
DPO_STEPS = 30
# issue 28 replaced the swap task (learnable from the prompt format alone) by the keyed task
SWAP_CLAIMS = (
    "sft.held_out_exact_match",
    "sft.storage.nf4_dq",
    "sft.stream.ram",
    "dpo.held_out_preference_accuracy",
)
# its bound was the same run's seed spread (0.28 in the first receipt), not fixed in advance
NF4_NOISE_CLAIM = ("sft.keyed.storage.nf4_dq",)


@pytest.fixture(scope="module")
def split() -> Split:
    return make_split()


# -- the scorer ----------------------------------------------------------------------------
def test_the_scorer_is_gated(gate, split):
    gate.seed(SEED)
    want = expected(split.held_out)
    perfect = [f" {a}\n" for a in want]
    rows = scorer_cases(split.held_out)
    for claim_id, statement, bound, unit, (got, right), fault, label in rows:
        claim = gate.claim(
            claim_id,
            statement,
            kind="correctness",
            threshold=Threshold("==", bound),
            unit=unit,
            code=SCORER_CODE,
        )
        claim.measure(grader.score(got, right))
        if fault is not None:
            with defects.inject(fault):
                claim.control(label, grader.score(got, right))
        if claim_id == "scorer.perfect":
            claim.control(
                "stub answers the next item's answer", grader.score(want[1:] + want[:1], want)
            )
        if claim_id == "scorer.wrong":
            claim.control("the perfect stub, same grader", grader.score(perfect, want))


# -- dynamics: the headline ----------------------------------------------------------------
@pytest.mark.xdist_group("dynamics")
def test_training_dynamics_catch_the_six_defects(gate, setup):  # noqa: F811
    gate.seed(0)
    gate.input("model", smollm2_path())
    claim_training_defects(gate, setup)
    for line in defect_table(gate.fragment()["claims"]):
        gate.note(line)


# -- behaviour on the keyed task -----------------------------------------------------------
def test_fine_tune_beats_the_prompted_base(gate, split, tmp_path):
    needs_trained_weights(
        gate,
        "task.headroom",
        "task.prompted_floor",
        "noise.decoding",
        "sft.keyed.margin",
        "sft.keyed.margin_interval",
        "sft.keyed.nf4_dq.margin",
    )
    gate.input("model", smollm2_path())
    gate.seed(SEED, *SEEDS)
    data = write_sft(tmp_path / "train.jsonl", sft_rows(split.train))
    gate.input("train", data)
    want = expected(split.held_out)
    base = make_trainer(tmp_path, "base", data, 1)
    prompted = {
        k: grader.score(
            answers(base, [few_shot_prompt(i, k, split.train, SEED) for i in split.held_out]), want
        )
        for k in SHOTS
    }
    best = max(prompted.values())
    swap_prompted = swap_task_prompted(base, SEED)
    del base
    shown = ", ".join(f"{k}-shot {v:.3f}" for k, v in prompted.items())
    claim = gate.claim(
        "task.headroom",
        f"the keyed task has headroom: the best prompted base ({shown}) scores at most "
        f"{BAND[1]} on the {len(want)} held-out items",
        kind="correctness",
        threshold=Threshold("<=", BAND[1]),
        unit="exact match",
        code=IMPLEMENTATION,
    )
    claim.measure(best)
    claim.control("the swap task (gate-quality's task before issue 28), 8-shot", swap_prompted)
    claim = gate.claim(
        "task.prompted_floor",
        f"the prompted base is a real baseline: its best score is at least {BAND[0]}",
        kind="correctness",
        threshold=Threshold(">=", BAND[0]),
        unit="exact match",
        code=IMPLEMENTATION,
    )
    claim.measure(best)
    claim.control("the base without examples (0-shot) as the baseline", prompted[0])
    runs = {
        s: train(tmp_path, f"seed{s}", data, split, SFT_STEPS, seed=s, curve=s == 0) for s in SEEDS
    }
    first = runs[0]
    again = answers(first.trainer, [i.prompt for i in split.held_out])
    claim = gate.claim(
        "noise.decoding",
        f"greedy CPU decoding of the {len(again)} held-out prompts twice (trained fp32 model) "
        "gives the same answers",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="differing answers",
        code=IMPLEMENTATION,
    )
    claim.measure(sum(a != b for a, b in zip(again, first.answers, strict=True)))
    torch.manual_seed(1)  # the control's draw, the same in every run
    with defects.inject("model.generate.sample"):
        sampled = answers(first.trainer, [i.prompt for i in split.held_out])
    claim.control(
        "tokens sampled from the softmax, not argmax",
        sum(a != b for a, b in zip(sampled, first.answers, strict=True)),
    )
    for run in runs.values():
        del run.trainer
    ignored_rows = write_sft(tmp_path / "key_ignored.jsonl", key_ignored_rows(split.train))
    ignored = train(tmp_path, "key_ignored", ignored_rows, split, SFT_STEPS, curve=True)
    del ignored.trainer
    scores = {s: r.score for s, r in runs.items()}
    n = len(want)
    claim = gate.claim(
        "sft.keyed.margin",
        f"LoRA r8 (attention, layers 20-29), fp32, {SFT_STEPS} steps x 8 rows, lr {LR}: every "
        f"one of {len(SEEDS)} training seeds beats the best prompted base ({best:.3f}) on the "
        f"{n} held-out items by at least {MARGIN} (scores: "
        + ", ".join(f"seed {s} {v:.3f}" for s, v in scores.items())
        + ")",
        kind="correctness",
        threshold=Threshold(">=", MARGIN),
        unit="smallest (score - best prompted score)",
        code=IMPLEMENTATION,
    )
    claim.measure(min(scores.values()) - best)
    claim.control("the untrained base, unprompted", prompted[0] - best)
    claim.control(
        "the same run on rows whose order ignores the key (format alone)", ignored.score - best
    )
    gaps = [v - best for v in scores.values()]
    low, mean = interval_low(gaps)
    claim = gate.claim(
        "sft.keyed.margin_interval",
        f"the same {len(SEEDS)} seeds: the lower end of the 95% t-interval of the mean "
        f"difference from the best prompted base (mean {mean:.3f}) is at least {MARGIN}",
        kind="correctness",
        threshold=Threshold(">=", MARGIN),
        unit="lower 95% bound of mean (score - best prompted score)",
        code=IMPLEMENTATION,
    )
    claim.measure(low)
    claim.control(
        "every seed scoring as the format-alone run",
        interval_low([ignored.score - best] * len(SEEDS))[0],
    )
    nf4 = train(tmp_path, "nf4", data, split, SFT_STEPS, storage="nf4_double_quant")
    del nf4.trainer
    claim = gate.claim(
        "sft.keyed.nf4_dq.margin",
        f"the same fine-tune (seed 0) on NF4 double-quant storage also beats the best prompted "
        f"base by at least {MARGIN}, the bar fixed in advance for fp32 (fp32 seed 0: "
        f"{first.score:.3f}; the step-for-step equality of NF4 training is gate-dynamics' "
        "lora-accum1-nf4dq claims against transformers + bitsandbytes)",
        kind="correctness",
        threshold=Threshold(">=", MARGIN),
        unit="score - best prompted score",
        code=[*IMPLEMENTATION, "assay.storage.nf4"],
    )
    claim.measure(nf4.score - best)
    claim.control("the format-alone run in its place", ignored.score - best)
    gate.figure(
        plot_curves(
            {"fp32, seed 0": first.curve, "format alone (key ignored)": ignored.curve},
            best,
            tmp_path / "quality-learning-curve.png",
        ),
        f"Held-out exact match on the keyed task every 10 steps: a fine-tune against the best "
        f"prompted base ({best:.3f}) and a run on rows whose order ignores the key",
    )
    gate.note("learning curve, seed 0: " + ", ".join(f"step {s} {v:.3f}" for s, v in first.curve))
    gate.note(
        "format alone: "
        + ", ".join(f"step {s} {v:.3f}" for s, v in ignored.curve)
        + f"; NF4 double-quant {nf4.score:.3f}"
    )
    gate.note(
        "Why the prompted base cannot solve it: each key means one fixed order of the two words "
        "(red keeps, blue swaps, green repeats the first, gold the second) and nothing in the "
        "prompt says which; 8 shots drawn from training show each key about twice, mixed with "
        "the others, and the base mostly copies the input (right for the red quarter) or "
        "applies one order to all. Per run CPU seconds: "
        + ", ".join(f"seed {s} {r.cpu_s:.0f}" for s, r in runs.items())
        + f", format alone {ignored.cpu_s:.0f}, nf4 {nf4.cpu_s:.0f}"
    )
    gate.note(
        f"swap task, 8-shot prompted base (the headroom control): {swap_prompted:.3f}; seed 0's "
        f"first answers {first.answers[:3]!r}"
    )


# -- preference (DPO) ----------------------------------------------------------------------
def test_dpo_raises_held_out_preference_accuracy(gate, split, tmp_path):
    needs_trained_weights(
        gate,
        "dpo.keyed.held_out_preference_accuracy",
        "dpo.keyed.base_headroom",
        "dpo.keyed.gain_over_base",
    )
    gate.input("model", smollm2_path())
    gate.seed(SEED, 0)
    pairs = write_preference(tmp_path / "pairs.jsonl", split.train)
    swapped = write_preference(tmp_path / "swapped.jsonl", split.train, swap=True)
    gate.input("train", pairs)
    loss = {"type": "dpo", "beta": 0.1}
    results = {}
    for name, rows in (("dpo", pairs), ("swapped", swapped)):
        trainer = make_trainer(tmp_path, name, rows, DPO_STEPS, loss=loss)
        if name == "dpo":
            results["base"] = preference_accuracy(trainer, split)
        for _ in range(DPO_STEPS):
            trainer.train_step()
        results[name] = preference_accuracy(trainer, split)
        print(f"[gate-quality] dpo {name}: {results[name]}", flush=True)
        del trainer
    n = len(split.held_out)
    claim = gate.claim(
        "dpo.keyed.held_out_preference_accuracy",
        f"DPO (sigmoid, beta 0.1), LoRA as above, {DPO_STEPS} steps x 4 pairs, lr {LR}: on {n} "
        "unseen keyed items, log p(the key's order) > log p(the next key's order) under the "
        f"policy (base model: {results['base']:.3f})",
        kind="correctness",
        threshold=Threshold(">=", PREF_TARGET, tolerance=0.05),
        unit="accuracy",
        code=[*IMPLEMENTATION, "assay.train.preference"],
    )
    claim.measure(results["dpo"])
    claim.control("the untrained base model (what lr 0 leaves)", results["base"])
    claim.control("the same run with chosen and rejected swapped", results["swapped"])
    claim = gate.claim(
        "dpo.keyed.base_headroom",
        f"the held-out pairs leave DPO headroom: the base model's preference accuracy is at "
        f"most {PREF_BASE_MAX}",
        kind="correctness",
        threshold=Threshold("<=", PREF_BASE_MAX),
        unit="accuracy",
        code=[*IMPLEMENTATION, "assay.train.preference"],
    )
    claim.measure(results["base"])
    claim.control("the DPO-trained model in the base's place", results["dpo"])
    claim = gate.claim(
        "dpo.keyed.gain_over_base",
        f"DPO raises held-out preference accuracy above the base model's by at least "
        f"{PREF_GAIN}, fixed before the measured run",
        kind="correctness",
        threshold=Threshold(">=", PREF_GAIN),
        unit="accuracy - base accuracy",
        code=[*IMPLEMENTATION, "assay.train.preference"],
    )
    claim.measure(results["dpo"] - results["base"])
    claim.control(
        "the same run with chosen and rejected swapped", results["swapped"] - results["base"]
    )
    gate.note(
        "held-out preference accuracy: " + ", ".join(f"{k} {v:.3f}" for k, v in results.items())
    )


def test_replaced_claims_are_retired(gate, pytestconfig):
    gate.note(
        retire_replaced_claims(
            gate,
            SWAP_CLAIMS,
            "replaced by the keyed task (issue 28): the swap task was learnt from the prompt "
            "format alone (issue 28 measured an 8-shot base at 0.81), so it could not fail a "
            "broken trainer; see task.headroom, sft.keyed.margin, sft.keyed.nf4_dq.margin and "
            "dpo.keyed.held_out_preference_accuracy; streamed training is bitwise resident "
            "(gate-dynamics' dynamics.streamed_bitwise), which a score cannot show better",
            pytestconfig,
        )
    )
    gate.note(
        retire_replaced_claims(
            gate,
            NF4_NOISE_CLAIM,
            "replaced by sft.keyed.nf4_dq.margin: its bound was the same run's fp32 seed spread "
            "(0.281 in receipt a73461b80453), so a worse NF4 run could widen its own bar; the "
            "margin is fixed in advance, and NF4's equality to QLoRA is gate-dynamics' claim",
            pytestconfig,
        )
    )
