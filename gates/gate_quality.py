"""gate-quality: does a LoRA fine-tune of the real SmolLM2-135M-Instruct actually learn?

The task (assay_testing.swap_task, generated here from seed 1919): ``Input: a b\\nOutput:``
-> `` b a`` over 58 one-token nouns; 256 training pairs, 48 held-out pairs whose unordered word
pair never occurs in training. The prompt does not state the rule, so the base model cannot
know it. The scorer (assay_testing.grader) is gated first, with stubs, then the trained model
is scored by greedy decoding (assay.model.generate, KV cache) on the held-out pairs.

Long: ``nox -s gates`` leaves it out; ``nox -s gate-quality`` runs it (about 4 CPU-minutes on
one thread).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from assay.model.generate import generate
from assay.qualify import Threshold
from assay.train.config import train_config_from_dict
from assay.train.loop import Trainer
from assay_testing import defects, grader
from assay_testing.real_model import smollm2_path
from assay_testing.swap_task import (
    ADAPTER,
    SEED,
    Split,
    make_split,
    sft_rows,
    shuffled_targets,
    write_preference,
    write_sft,
)
from assay_testing.travelling import needs_trained_weights
from quality_support import _near_misses, _variants, preference_accuracy, sampling_noise

# the claim a reader looks at first (the index and every record lead with it)
HEADLINE = "sft.held_out_exact_match"

SCORER_CODE = ("assay_testing.swap_task", "assay_testing.grader")
IMPLEMENTATION = (
    *SCORER_CODE,
    "assay.model.generate",
    "assay.model.cache",
    "assay.model.decoder",
    "assay.train.loop",
    "assay.train.objective",
    "quality_support",  # the gate's helpers, moved out of this file
)
# Held-out exact match a learned rule must reach. The base model scores 0/48 (it copies or
# continues the list) and an unrelated answer matches with chance ~1/3000, so 0.8 can only be
# reached by applying the swap to unseen pairs; it leaves 9 items of slack for quirks.
TARGET = 0.8
SFT_STEPS = 30
LR = 2e-3
# Held-out preference accuracy DPO must reach (chosen = the swap, rejected = the copy).
PREF_TARGET = 0.9
DPO_STEPS = 30
NEW_TOKENS = 5


@dataclass
class Run:
    """One trained (or untouched) model and how it scored."""

    trainer: Trainer
    moved: float  # largest change of any trainable from its initial value
    answers: list[str]
    score: float
    cpu_s: float
    wall_s: float


@pytest.fixture(scope="module")
def split() -> Split:
    return make_split()


def _config(tmp: Path, name: str, train: Path, **over) -> Trainer:
    """A Trainer for SmolLM2 on ``train``. ``lr=0.0``: the schema refuses lr 0 in a config,
    so the control builds with LR and then zeroes the optimizer's and the schedule's lr."""
    lr = over.pop("lr", LR)
    config = {
        "model": str(smollm2_path()),
        "adapter": ADAPTER,
        "data": {"train": str(train), "seq_len": 32},
        "optim": {"lr": lr or LR},
        "batch": {"micro_batch": 8 if over.get("loss") is None else 4},
        "steps": over.pop("steps", SFT_STEPS),
        "seed": over.pop("seed", 0),
        "output": {"dir": str(tmp / name)},
        **over,
    }
    trainer = Trainer(train_config_from_dict(config, tmp / f"{name}.yaml"), progress=False)
    if lr == 0.0:
        for group in trainer.optimizer.param_groups:
            group["lr"] = 0.0
        trainer.scheduler.base_lrs = [0.0] * len(trainer.scheduler.base_lrs)
    return trainer


def answers(trainer: Trainer, split: Split) -> list[str]:
    """Greedy held-out answers, decoded as one left-padded batch."""
    tok = trainer.tokenizer
    prompts = [tok.encode(item.prompt, add_special_tokens=True) for item in split.held_out]
    out = generate(
        trainer.base, prompts, max_new_tokens=NEW_TOKENS, eos_id=tok.eos_id, pad_id=trainer.pad_id
    )
    return [tok.decode(g.tokens) for g in out]


def expected(split: Split) -> list[str]:
    return [item.answer for item in split.held_out]


def train(tmp: Path, name: str, rows_file: Path, split: Split, **over) -> Run:
    cpu, wall = time.process_time(), time.perf_counter()
    trainer = _config(tmp, name, rows_file, **over)
    start = {n: p.detach().clone() for n, p in trainer.params.items()}
    for _ in range(trainer.config.steps):
        trainer.train_step()
    got = answers(trainer, split)
    moved = max(float((p.detach() - start[n]).abs().max()) for n, p in trainer.params.items())
    print(
        f"[gate-quality] {name}: score {grader.score(got, expected(split)):.3f}, moved "
        f"{moved:.3g}, {time.process_time() - cpu:.0f} CPU-s",
        flush=True,
    )
    return Run(
        trainer,
        moved,
        got,
        grader.score(got, expected(split)),
        time.process_time() - cpu,
        time.perf_counter() - wall,
    )


# -- the scorer ----------------------------------------------------------------------------
def test_the_scorer_is_gated(gate, split):
    gate.seed(SEED)
    want = expected(split)
    n = len(want)
    perfect = [f" {a}\n" for a in want]  # what a model emits: leading space, then a newline
    wrong = [item.unswapped for item in split.held_out]
    refusing = ["I'm sorry, but I can't help with that.", ""] * (n // 2)
    claim = gate.claim(
        "scorer.perfect",
        f"a stub answering all {n} held-out items correctly "
        "(as a model would: leading space, trailing newline) scores 1.0",
        kind="correctness",
        threshold=Threshold("==", 1.0),
        unit="exact match",
        code=SCORER_CODE,
    )
    claim.measure(grader.score(perfect, want))
    with defects.inject("testing.grader.raw_compare"):
        claim.control("grader compares verbatim (no normalisation)", grader.score(perfect, want))
    claim.control("stub answers the next item's answer", grader.score(want[1:] + want[:1], want))
    claim = gate.claim(
        "scorer.wrong",
        "a stub that copies the input (the tempting wrong answer) scores 0",
        kind="correctness",
        threshold=Threshold("==", 0.0),
        unit="exact match",
        code=SCORER_CODE,
    )
    claim.measure(grader.score(wrong, want))
    claim.control("the perfect stub, same grader", grader.score(perfect, want))
    claim = gate.claim(
        "scorer.refusing",
        "a stub that refuses (a refusal or an empty answer) scores 0",
        kind="correctness",
        threshold=Threshold("==", 0.0),
        unit="exact match",
        code=SCORER_CODE,
    )
    claim.measure(grader.score(refusing, want))
    with defects.inject("testing.grader.prefix_match"):
        claim.control("grader accepts any prefix of the answer", grader.score(refusing, want))
    variants = [(v, w) for w in want for v in _variants(w)]
    claim = gate.claim(
        "scorer.variants",
        f"{len(variants)} formatting variants of right answers "
        "(case, inner/outer whitespace, trailing . ! , quotes, text after the "
        "first line) are accepted",
        kind="correctness",
        threshold=Threshold("==", 1.0),
        unit="accepted fraction",
        code=SCORER_CODE,
    )
    claim.measure(grader.score([v for v, _ in variants], [w for _, w in variants]))
    with defects.inject("testing.grader.raw_compare"):
        claim.control(
            "grader compares verbatim",
            grader.score([v for v, _ in variants], [w for _, w in variants]),
        )
    misses = [(m, w) for w in want for m in _near_misses(w)]
    claim = gate.claim(
        "scorer.near_misses",
        f"{len(misses)} near misses (words swapped back, one "
        "word, an extra word, words joined, empty, a refusal) are rejected",
        kind="correctness",
        threshold=Threshold("==", 0.0),
        unit="accepted fraction",
        code=SCORER_CODE,
    )
    claim.measure(grader.score([m for m, _ in misses], [w for _, w in misses]))
    with defects.inject("testing.grader.prefix_match"):
        claim.control(
            "grader accepts any prefix of the answer",
            grader.score([m for m, _ in misses], [w for _, w in misses]),
        )


# -- supervised fine-tuning ----------------------------------------------------------------
def test_lora_fine_tune_learns_the_held_out_rule(gate, split, tmp_path):
    needs_trained_weights(
        gate, "noise.decoding", "sft.held_out_exact_match", "sft.storage.nf4_dq", "sft.stream.ram"
    )
    gate.input("model", smollm2_path())
    gate.seed(SEED, 0, 1)
    data = write_sft(tmp_path / "train.jsonl", sft_rows(split.train))
    gate.input("train", data)
    shuffled = write_sft(tmp_path / "shuffled.jsonl", shuffled_targets(split.train))
    base = _config(tmp_path, "base", data)
    base_answers = answers(base, split)
    base_score = grader.score(base_answers, expected(split))
    del base
    fp32 = train(tmp_path, "fp32", data, split)
    # The noise floor, part 1: greedy CPU decoding is deterministic (decode twice, compare).
    again = answers(fp32.trainer, split)
    claim = gate.claim(
        "noise.decoding",
        f"greedy CPU decoding of the {len(again)} held-out "
        "prompts twice (trained fp32 model) gives the same answers",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="differing answers",
        code=IMPLEMENTATION,
    )
    claim.measure(sum(a != b for a, b in zip(again, fp32.answers, strict=True)))
    torch.manual_seed(1)
    with defects.inject("model.generate.sample"):
        sampled = answers(fp32.trainer, split)
    claim.control(
        "tokens sampled from the softmax, not argmax",
        sum(a != b for a, b in zip(sampled, fp32.answers, strict=True)),
    )
    del fp32.trainer
    lr0 = train(tmp_path, "lr0", data, split, lr=0.0)
    del lr0.trainer
    wrong = train(tmp_path, "shuffled", shuffled, split)
    del wrong.trainer
    n = len(split.held_out)
    claim = gate.claim(
        "sft.held_out_exact_match",
        f"LoRA r8 (attention, layers 20-29) on SmolLM2-135M-Instruct, fp32, {SFT_STEPS} steps x "
        f"8 rows, lr {LR}: held-out exact match of greedy answers on {n} unseen pairs (base "
        f"model: {base_score:.3f})",
        kind="correctness",
        threshold=Threshold(">=", TARGET, tolerance=0.05),
        unit="exact match",
        code=IMPLEMENTATION,
    )
    claim.measure(fp32.score)
    claim.control("the untrained base model", base_score)
    claim.control("the same run with lr 0", lr0.score)
    claim.control("the same run on shuffled targets (answers deranged across prompts)", wrong.score)
    # The noise floor, part 2: a second training seed moves the score by this much.
    seed1 = train(tmp_path, "fp32_seed1", data, split, seed=1)
    del seed1.trainer
    spread = abs(seed1.score - fp32.score)
    nf4 = train(tmp_path, "nf4", data, split, storage="nf4_double_quant")
    del nf4.trainer
    streamed = train(tmp_path, "stream", data, split, stream={"tier": "ram", "buffers": 2})
    del streamed.trainer
    for key, run, what, extra in (
        ("storage.nf4_dq", nf4, "NF4 double-quant storage", "assay.storage.nf4"),
        ("stream.ram", streamed, "layer streaming (RAM tier, 2 buffers)", "assay.stream.engine"),
    ):
        noise = max(spread, sampling_noise(run.score, fp32.score, n), 1 / n)
        claim = gate.claim(
            f"sft.{key}",
            f"the same fine-tune with {what} reaches the resident fp32 held-out score within "
            f"the measured noise ({noise:.3f}: the largest of one item, the fp32 seed-0 vs "
            f"seed-1 spread ({spread:.3f}) and two standard errors of the difference of two "
            f"{n}-item proportions at their pooled rate)",
            kind="correctness",
            threshold=Threshold("<=", noise),
            unit="|score - fp32 score|",
            code=[*IMPLEMENTATION, extra],
        )
        claim.measure(abs(run.score - fp32.score))
        claim.control("the lr 0 run in its place", abs(lr0.score - fp32.score))
    runs = {
        "fp32": fp32,
        "lr0": lr0,
        "shuffled": wrong,
        "fp32_seed1": seed1,
        "nf4_dq": nf4,
        "stream": streamed,
    }
    gate.note(
        "held-out exact match: base "
        + f"{base_score:.3f}; "
        + ", ".join(f"{k} {r.score:.3f}" for k, r in runs.items())
    )
    gate.note(
        "per run CPU seconds (wall seconds on a shared machine), load + train + decode: "
        + ", ".join(f"{k} {r.cpu_s:.0f} ({r.wall_s:.0f})" for k, r in runs.items())
    )
    gate.note(
        "largest change of any trainable over the run: "
        + ", ".join(f"{k} {r.moved:.3g}" for k, r in runs.items())
    )
    gate.note(
        f"base model answers (first 3): {base_answers[:3]!r}; fp32 trained: "
        f"{fp32.answers[:3]!r}; shuffled-target run: {wrong.answers[:3]!r}"
    )


# -- preference (DPO) ----------------------------------------------------------------------
def test_dpo_raises_held_out_preference_accuracy(gate, split, tmp_path):
    needs_trained_weights(gate, "dpo.held_out_preference_accuracy")
    gate.input("model", smollm2_path())
    gate.seed(SEED, 0)
    pairs = write_preference(tmp_path / "pairs.jsonl", split.train)
    swapped = write_preference(tmp_path / "swapped.jsonl", split.train, swap=True)
    gate.input("train", pairs)
    loss = {"type": "dpo", "beta": 0.1}
    results = {}
    for name, rows, lr in (("dpo", pairs, LR), ("lr0", pairs, 0.0), ("swapped", swapped, LR)):
        cpu = time.process_time()
        trainer = _config(tmp_path, name, rows, lr=lr, steps=DPO_STEPS, loss=loss)
        if name == "dpo":
            results["base"] = (preference_accuracy(trainer, split), 0.0)
        for _ in range(DPO_STEPS):
            trainer.train_step()
        results[name] = (preference_accuracy(trainer, split), time.process_time() - cpu)
        print(f"[gate-quality] dpo {name}: {results[name]}", flush=True)
        del trainer
    n = len(split.held_out)
    claim = gate.claim(
        "dpo.held_out_preference_accuracy",
        f"DPO (sigmoid, beta 0.1), LoRA as above, {DPO_STEPS} steps x 4 pairs, lr {LR}: on {n} "
        "unseen prompts, log p(swap) > log p(copy) under the policy (base model: "
        f"{results['base'][0]:.3f})",
        kind="correctness",
        threshold=Threshold(">=", PREF_TARGET, tolerance=0.05),
        unit="accuracy",
        code=[*IMPLEMENTATION, "assay.train.preference"],
    )
    claim.measure(results["dpo"][0])
    claim.control("the untrained base model", results["base"][0])
    claim.control("the same run with lr 0", results["lr0"][0])
    claim.control("the same run with chosen and rejected swapped", results["swapped"][0])
    gate.note(
        "held-out preference accuracy: "
        + ", ".join(f"{k} {v[0]:.3f}" for k, v in results.items())
        + "; CPU seconds per run: "
        + ", ".join(f"{k} {v[1]:.0f}" for k, v in results.items() if k != "base")
    )
