"""gate-throughput: training-step throughput of assay against transformers+PEFT and
transformers+bitsandbytes on the same CPU, in one run, against the same run's reach.

One run of assay_bench (harness/bench_step.py is the same code as a CLI) times interleaved
optimizer steps of LoRA r8/alpha 16 on SmolLM2's attention projections, fp32, batch 1: 1
warm-up round, then the median of 5 timed steps per subject. Controls measure the same ratio on
a deliberately worse assay subject (redundant recomputation), which must miss the target. The
step's reach is its own GEMMs replayed alone plus its attention (assay_bench.report.reach).
The opt-in compiled path (each decoder layer torch.compile'd) is judged against PEFT eager,
with PEFT compiled the same way as a second row and 100-step runs that pay their compile time
(assay_bench.total_run, a fresh interpreter each); bf16 autocast on both sides is a measured
row. The streamed fast path keeps activations; its gradients are compared bit for bit with
resident. Peak memory is measured apart, each subject alone in a fresh process
(assay_bench.rss): the tensors' step peak against PEFT's, with the peer's full-logit
cross-entropy in assay as the control, and peak RSS as a measured row.
"""

from __future__ import annotations

import sys
import time

import pytest
import torch

from assay.model.flops import SUMMARY as FLOP_MODEL
from assay.qualify import Threshold
from assay.qualify.plugin.timing import Timing
from assay_bench.report import TARGETS, run_benchmark
from assay_bench.step import max_abs_diff, trainable_grads
from assay_bench.subjects import DESCRIPTIONS, SUBJECTS
from assay_bench.total_run import in_subprocess as total_run
from assay_testing.real_model import smollm2_path
from support.moved_claims import retire_replaced_claims
from support.threshold_moves import correct_moved_thresholds
from support.throughput.helpers import (
    SEQ,
    amdahl_note,
    ceiling_reach_note,
    decode_free_note,
    flop_check_note,
    peak_rss_note,
    peak_rss_rows,
    profile_note,
    top_ops_note,
    wrong_layer_grads,
)

# the claim a reader looks at first (the index and every record lead with it)
HEADLINE = "resident.over_peft.seq256"

GATE_COVERAGE = False  # timed: no tracer may bias a ratio; its claims record declared code
# Code every timed subject runs; each claim adds what its own subject runs.
TIMED = (
    "assay.model.decoder",
    "assay.adapters.lora",
    "assay.storage.linear",
    "assay.model.flops",
    "assay_bench.step",
    "assay_bench.profile",
    "assay_bench.report",
    "assay_bench.subjects",
    "assay.train.losses",
    "assay_testing.peers",
    "support.throughput.helpers",
)
STREAM_CODE = (*TIMED, "assay.stream.engine", "assay.stream.pool", "assay.stream.refetch")
SEQS = (SEQ, 512)
PROFILED = ("assay", "peft", "assay-nf4", "bnb-nf4")
TOLERANCE = 0.1  # run-to-run noise allowed against a baseline receipt
# Issue 42's answers to issue 29 (2026-12-04): eager >= 1.10x and compiled >= 1.30x PEFT eager,
# NF4 >= 1.15x bitsandbytes, the step within 1.25x of its reach, the tensor-level step peak
# <= 0.75x PEFT's (assay_bench.report.TARGETS).
OVER_PEFT = TARGETS["resident_over_peft"][1]
ALL_LINEAR_OVER_PEFT = TARGETS["all_linear_over_peft"][1]
COMPILED_OVER_PEFT = TARGETS["compiled_over_peft"][1]
NF4_OVER_BNB = TARGETS["nf4_over_bnb"][1]
REACH_FRACTION = TARGETS["reach_fraction"][1]
TENSOR_PEAK_OVER_PEFT = TARGETS["tensor_peak_over_peft"][1]
STREAM_OVER_RESIDENT = TARGETS["stream_over_resident"][1]
# (receipt that failed under the old thresholds, {claim: move}, the dated reason): each a
# correction written once into the ledger that holds that receipt
FAILING_29 = "10efce5116896f72978cc12c88509f77256ab015d24ff94bfef07b79a508d366"
FAILING_42 = "ce7a8c42a5f7e4d1e8655b869958f5238d15e64b60e8aa33115741b4505100b3"
THRESHOLD_MOVES = (
    (
        FAILING_29,
        {
            "resident.over_peft.seq256": ">= 1.4 -> >= 1.3 (measured 1.045 in 10efce511689)",
            "resident.over_peft.seq512": ">= 1.4 -> >= 1.3 (measured 1.069 in 10efce511689)",
            "resident.ceiling_fraction": ">= 0.65 -> >= 0.7 (measured 0.596 in 10efce511689)",
            "nf4.over_bnb": ">= 1.4 -> >= 1.25 (measured 1.047 in 10efce511689)",
            "stream.ram_over_resident": "<= 1.15 -> <= 1.1 (measured 1.075 in 10efce511689, "
            "which passed)",
        },
        "2026-12-03: threshold {move}; issue 29 sets the targets (1.3x over PEFT, 70% of the "
        "ceiling, 1.25x over bitsandbytes, streamed <= 1.10x) against the unchanged "
        "same-session peers and ceiling",
    ),
    (
        FAILING_42,
        {
            "resident.over_peft.seq256": f">= 1.3 -> >= {OVER_PEFT} (measured 1.063 in "
            "ce7a8c42a5f7)",
            "resident.over_peft.seq512": f">= 1.3 -> >= {OVER_PEFT} (measured 1.064 in "
            "ce7a8c42a5f7)",
            "resident.all_linear.over_peft.seq256": f">= 1.3 -> >= {ALL_LINEAR_OVER_PEFT} "
            "(measured 1.014 in ce7a8c42a5f7)",
            "nf4.over_bnb": f">= 1.25 -> >= {NF4_OVER_BNB} (measured 1.072 in ce7a8c42a5f7)",
        },
        "2026-12-04: threshold {move}; issue 42 answers issue 29: eager >= 1.10x PEFT (the "
        "1.30x goal moves to the opt-in compiled path, claim compiled.over_peft.seq256) and "
        "NF4 >= 1.15x bitsandbytes, since issue 29 measured the reach with free decoding at "
        "1.22x",
    ),
)
# claims issue 42 replaced: (old claim, its replacement, why)
REPLACED = (
    (
        "resident.ceiling_fraction",
        "resident.reach_fraction",
        "the 2048^3 fp32 GEMM ceiling is out of reach for a seq-256 step on this machine (its "
        "small-M GEMMs run below it: the step's reach was 62% of the ceiling in ce7a8c42a5f7); "
        "the honest limit is the same run's reach (its GEMMs replayed alone plus attention)",
    ),
    (
        "resident.peak_rss.over_peft.seq256",
        "resident.tensor_peak.over_peft.seq256",
        "a library must not set its user's allocator, and glibc's retained heap decides peak "
        "RSS (docs/allocator.md); the claim is on the tensors' step peak, peak RSS stays a "
        "measured row",
    ),
)
# 100-step runs, compile included, each in a fresh interpreter with an empty inductor cache
TOTAL_RUNS = ("assay-compiled", "peft-compiled", "peft", "assay")
TOTAL_STEPS = 100


@pytest.fixture(scope="module")
def bench():
    """(result, subjects, ids at seq 256): the whole benchmark, run once for the module."""
    started = time.perf_counter()

    def progress(line: str) -> None:
        print(f"[gate-throughput {time.perf_counter() - started:6.1f} s] {line}", file=sys.stderr)

    result, subjects = run_benchmark(
        smollm2_path(), SUBJECTS, seqs=SEQS, steps=5, warmup=1, profile=PROFILED, progress=progress
    )
    result["wall_s"] = time.perf_counter() - started
    ids = torch.randint(
        0,
        subjects["assay"].config.vocab_size,
        (1, SEQS[0]),
        generator=torch.Generator().manual_seed(1),
    )
    return result, subjects, ids


def declare_common(gate, result) -> None:
    gate.input("model", smollm2_path())
    gate.seed(0, 1)
    m = result["machine"]
    gate.note(
        f"machine: {m['cpu']}, {m['logical_cpus']} logical CPUs, torch threads {m['threads']}, "
        f"SIMD {' '.join(m['simd']) or 'none reported'}; "
        + ", ".join(f"{k} {v}" for k, v in m["versions"].items())
    )
    s = result["settings"]
    losses = {}
    for name, text in s["loss"].items():
        losses.setdefault(text, []).append(name)
    gate.note(
        f"step: forward; loss; backward; {s['optimizer']}; zero_grad. LoRA r8 alpha 16 on q, k, "
        f"v, o, batch 1, {s['warmup']} warm-up round then the median of {s['steps']} timed "
        "steps, subjects interleaved in a rotating order; seq 512 only for assay, assay+ckpt "
        "and peft. Loss: "
        + "; ".join(f"{', '.join(names)}: {text}" for text, names in losses.items())
    )
    gate.note(
        "numerical path measured: fp32 weights, activations and logits everywhere (NF4 subjects "
        "decode to fp32 and multiply in fp32; bitsandbytes' AVX512-BF16 inference path is off); "
        "attention through torch SDPA, kernels seen: "
        + ", ".join(result["profiles"]["assay"]["attention_ops"])
    )
    gate.note(f"FLOP model (assay.model.flops): {FLOP_MODEL}")
    c = result["ceiling"]
    gate.note(
        f"same-session fp32 GEMM ceiling {c['gflops']:.1f} GFLOP/s (median of one 2048^3 "
        f"matmul per timed round: {', '.join(f'{r:.0f}' for r in c['samples_gflops'])}); the "
        f"LM-head shape {'x'.join(map(str, c['lm_head_shape']))} runs at "
        f"{c['lm_head_gflops']:.1f} GFLOP/s"
    )
    rows = []
    for name, entry in result["subjects"].items():
        for seq, r in entry["seq"].items():
            rows.append(
                f"{name} seq {seq}: {r['median_s']:.3f} s/step, {r['tokens_per_s']:.1f} tok/s, "
                f"{r['gflops']:.1f} GFLOP/s ({r['ceiling_fraction']:.1%} of ceiling)"
            )
    gate.note("per subject (median step): " + "; ".join(rows))
    gate.note(
        "ratios and ceiling fractions are medians of round-by-round values (both subjects, or "
        "the subject and the ceiling matmul, timed in the same round, so drift between rounds "
        "cancels); ratios of the medians for comparison: "
        + ", ".join(f"{k} {r['of_medians']:.3f}" for k, r in result["ratios"].items())
    )
    gate.note(
        "subjects: " + "; ".join(f"{name} = {DESCRIPTIONS[name]}" for name in result["subjects"])
    )
    gate.note(f"benchmark wall time {result['wall_s']:.0f} s (loads, rounds, profiles)")
    gate.not_tested(
        "CUDA", "the issue's targets are for a 2-core CPU; this gate measures on CPU only"
    )


def ratio_claim(
    gate,
    result,
    claim_id: str,
    text: str,
    threshold: Threshold,
    key: str,
    control: tuple,
    code: tuple[str, ...] = TIMED,
) -> None:
    """A performance claim on the paired-round ratio ``key``; ``control`` is (name, ratio key)
    of the same ratio for a deliberately worse assay subject, which must miss the target."""
    unit = "x tokens/s" if threshold.op == ">=" else "x step time"
    claim = gate.claim(
        claim_id, text, kind="performance", threshold=threshold, unit=unit, code=code
    )
    claim.measure(samples=result["ratios"][key]["samples"])
    name, control_key = control
    claim.control(name, result["ratios"][control_key]["value"])


def test_resident_against_peft(gate, bench, tmp_path):
    result, _, _ = bench
    declare_common(gate, result)
    for name in ("assay", "peft"):  # the timed steps behind the ratios, drawn as histograms
        steps = Timing.from_seconds(result["subjects"][name]["seq"][str(SEQS[0])]["samples_s"])
        png = steps.histogram(tmp_path / f"{name}-steps.png", f"{name} step, seq {SEQS[0]}", "s")
        gate.figure(png, f"{name}: time per training step at seq {SEQS[0]} (timed rounds)")
    for seq in SEQS:
        ratio_claim(
            gate,
            result,
            f"resident.over_peft.seq{seq}",
            f"assay resident LoRA trains SmolLM2 at >= {OVER_PEFT}x the tokens/s of transformers "
            f"+ PEFT (seq {seq}, fp32, same step, same machine, same session)",
            Threshold(">=", OVER_PEFT, tolerance=TOLERANCE),
            f"resident_over_peft@{seq}",
            (
                "assay resident with per-layer gradient checkpointing (redundant recompute)",
                f"ckpt_over_peft@{seq}",
            ),
        )
    ratio_claim(
        gate,
        result,
        f"resident.all_linear.over_peft.seq{SEQS[0]}",
        f"assay resident LoRA on every linear layer trains SmolLM2 at >= {ALL_LINEAR_OVER_PEFT}x "
        f"the tokens/s of transformers + PEFT with target_modules='all-linear' (seq {SEQS[0]}, "
        "fp32, same rank and alpha, same session)",
        Threshold(">=", ALL_LINEAR_OVER_PEFT, tolerance=TOLERANCE),
        f"all_linear_over_peft@{SEQS[0]}",
        (
            "assay all-linear with per-layer gradient checkpointing (redundant recompute)",
            f"all_linear_ckpt_over_peft@{SEQS[0]}",
        ),
    )
    reach_claim(gate, result)
    gate.note(profile_note(result, "assay"))
    gate.note(profile_note(result, "peft"))
    gate.note(top_ops_note(result, "assay"))
    gate.note(top_ops_note(result, "peft"))
    gate.note(amdahl_note(result, "peft", OVER_PEFT))
    gate.note(ceiling_reach_note(result, "peft"))
    gate.note(flop_check_note(result, "assay"))
    gate.note(flop_check_note(result, "peft"))


def reach_fraction_samples(result, name: str) -> list[float]:
    """The step's reach over each of ``name``'s timed steps at the first seq."""
    reach_s = result["reach"]["reach_s"]
    return [reach_s / t for t in result["subjects"][name]["seq"][str(SEQS[0])]["samples_s"]]


def reach_claim(gate, result) -> None:
    """assay's step against its reach (its GEMMs replayed alone plus attention), and which of
    eager and compiled gets closest."""
    reach = result["reach"]
    claim = gate.claim(
        "resident.reach_fraction",
        f"assay resident LoRA's step at seq {SEQS[0]} is within {1 / REACH_FRACTION:.2f}x of its "
        f"reach (>= {REACH_FRACTION:.0%}): the time of the same step's GEMMs replayed alone "
        "plus its attention kernels, measured in the same run (eager, fp32)",
        kind="performance",
        threshold=Threshold(">=", REACH_FRACTION, tolerance=TOLERANCE),
        unit="reach / step time",
        code=(*TIMED, "assay_bench.gemm"),
    )
    claim.measure(samples=reach_fraction_samples(result, "assay"))
    claim.control(
        "assay resident with gradient checkpointing (the same reach, recompute on top)",
        reach["fraction"]["assay+ckpt"],
    )
    rows = {n: reach["fraction"][n] for n in ("assay", "assay-compiled", "peft", "peft-compiled")}
    closest = max(("assay", "assay-compiled"), key=rows.__getitem__)
    gate.note(
        f"reach at seq {SEQS[0]}: {reach['reach_s']:.3f} s (one {reach['of']} step's GEMMs "
        "replayed alone plus its profiled attention); reach over median step: "
        + ", ".join(f"{n} {v:.1%}" for n, v in rows.items())
        + f". Closest to the reach: {'compiled' if closest == 'assay-compiled' else 'eager'}"
    )


def test_compiled_against_peft(gate, bench):
    """The opt-in compiled path (compile: true) against PEFT eager, and against PEFT compiled
    the same way; the steady step and a 100-step run with its compile time."""
    result, _, _ = bench
    declare_common(gate, result)
    ratio_claim(
        gate,
        result,
        f"compiled.over_peft.seq{SEQS[0]}",
        f"assay resident LoRA with each decoder layer torch.compile'd (compile: true) trains "
        f"SmolLM2 at >= {COMPILED_OVER_PEFT}x the tokens/s of transformers + PEFT eager (seq "
        f"{SEQS[0]}, fp32, steady state, same session)",
        Threshold(">=", COMPILED_OVER_PEFT, tolerance=TOLERANCE),
        f"compiled_over_peft@{SEQS[0]}",
        (
            "assay resident eager with per-layer gradient checkpointing (redundant recompute)",
            f"ckpt_over_peft@{SEQS[0]}",
        ),
        code=(*TIMED, "assay.train.build"),
    )
    ratios = result["ratios"]
    gate.note(
        f"compiled rows at seq {SEQS[0]} (tokens/s ratios, medians of rounds): assay compiled "
        f"over PEFT compiled the same way (each decoder layer, dynamic shapes) "
        f"{ratios[f'compiled_over_peft_compiled@{SEQS[0]}']['value']:.3f}x; PEFT compiled over "
        f"PEFT eager {ratios[f'peft_compiled_over_peft@{SEQS[0]}']['value']:.3f}x; assay eager "
        f"over PEFT eager {ratios[f'resident_over_peft@{SEQS[0]}']['value']:.3f}x"
    )
    runs = {name: total_run(name, SEQS[0], smollm2_path(), TOTAL_STEPS) for name in TOTAL_RUNS}
    gate.note(
        f"{TOTAL_STEPS}-step runs at seq {SEQS[0]}, each in a fresh interpreter with an empty "
        "inductor cache (compile included): "
        + "; ".join(
            f"{n}: {r['total_s']:.1f} s in all, steady step {r['steady_step_s']:.3f} s, first "
            f"steps {', '.join(f'{t:.1f}' for t in r['first_steps_s'])} s, "
            f"{r['over_steady_s']:.1f} s over {TOTAL_STEPS} steady steps"
            for n, r in runs.items()
        )
    )


def test_bf16_against_peft_bf16(gate, bench):
    """A measured row, no target: both sides in bf16 autocast, as their users run bf16."""
    result, _, _ = bench
    declare_common(gate, result)
    ratios = result["ratios"]
    gate.note(
        f"bf16 rows at seq {SEQS[0]} (tokens/s ratios, medians of rounds): assay with "
        "precision: bf16 (decoder layers under bf16 autocast, head and chunked CE fp32) over "
        "transformers + PEFT with its forward under bf16 autocast (logits bf16, loss on fp32 "
        f"logits) {ratios[f'bf16_over_peft_bf16@{SEQS[0]}']['value']:.3f}x; assay bf16 over "
        f"assay fp32 {ratios[f'bf16_over_resident@{SEQS[0]}']['value']:.3f}x. gate-dynamics "
        "judges the bf16 numbers against PEFT's"
    )


def test_nf4_against_bitsandbytes(gate, bench):
    result, _, _ = bench
    declare_common(gate, result)
    ratio_claim(
        gate,
        result,
        "nf4.over_bnb",
        f"assay NF4 (double quant) LoRA trains SmolLM2 at >= {NF4_OVER_BNB}x the tokens/s of "
        f"transformers + bitsandbytes NF4 double quant + PEFT (fp32 compute, seq {SEQS[0]}, CPU)",
        Threshold(">=", NF4_OVER_BNB, tolerance=TOLERANCE),
        f"nf4_over_bnb@{SEQS[0]}",
        (
            "assay NF4 with per-layer gradient checkpointing (redundant recompute)",
            f"nf4_ckpt_over_bnb@{SEQS[0]}",
        ),
        code=(*TIMED, "assay.storage.nf4"),
    )
    gate.note(
        "same numerics on both sides: assay and bitsandbytes decode the same NF4 bytes and "
        "multiply in fp32 (gate-nf4 holds their SmolLM2 logits equal)"
    )
    gate.note(profile_note(result, "assay-nf4"))
    gate.note(profile_note(result, "bnb-nf4"))
    gate.note(amdahl_note(result, "bnb-nf4", NF4_OVER_BNB))
    gate.note(decode_free_note(result, NF4_OVER_BNB))


def test_peak_memory_against_peft(gate, pytestconfig):
    """The tensors' step peak against PEFT's, each subject in its own process; peak RSS above
    the loaded model is a measured row."""
    gate.input("model", smollm2_path())
    gate.seed(0)  # each child's token ids
    rows = peak_rss_rows(smollm2_path())
    claim = gate.claim(
        f"resident.tensor_peak.over_peft.seq{SEQ}",
        f"the tensor-level peak of an assay resident LoRA step (the profiler's allocations, "
        f"allocator excluded) is <= {TENSOR_PEAK_OVER_PEFT}x that of transformers + PEFT (seq "
        f"{SEQ}, fp32, one fresh process each, same session)",
        kind="performance",
        threshold=Threshold("<=", TENSOR_PEAK_OVER_PEFT, tolerance=TOLERANCE),
        unit="x peak bytes",
        code=(*TIMED, "assay_bench.rss"),
    )
    peft = rows["peft"]["tensor_step_peak_bytes"]
    claim.measure(rows["assay"]["tensor_step_peak_bytes"] / peft)
    claim.control(
        "assay with full-logit F.cross_entropy (the peer's loss) instead of chunked CE",
        rows["assay with full-logit CE"]["tensor_step_peak_bytes"] / peft,
    )
    rss = rows["assay"]["step_peak_bytes"] / rows["peft"]["step_peak_bytes"]
    gate.note(f"measured row: peak RSS above the loaded model, assay over PEFT {rss:.3f}x")
    gate.note(peak_rss_note(rows))
    gate.note(retire_replaced(gate, pytestconfig))


def test_stream_against_resident(gate, bench):
    result, subjects, ids = bench
    declare_common(gate, result)
    ratio_claim(
        gate,
        result,
        "stream.ram_over_resident",
        f"assay streamed from the RAM tier (2 slots, activations kept, layers re-fetched in "
        f"backward) takes <= {STREAM_OVER_RESIDENT}x the step time of assay resident "
        f"(seq {SEQS[0]})",
        Threshold("<=", STREAM_OVER_RESIDENT, tolerance=TOLERANCE),
        f"stream_over_resident@{SEQS[0]}",
        (
            "streamed with recompute=True (each layer recomputed in backward)",
            f"stream_recompute_over_resident@{SEQS[0]}",
        ),
        code=STREAM_CODE,
    )
    gate.note(
        f"like for like, streamed with recompute=True over resident with gradient "
        f"checkpointing: {result['ratios'][f'stream_recompute_over_ckpt@{SEQS[0]}']['value']:.3f}x"
    )
    exact_gradients(gate, subjects, ids)


def exact_gradients(gate, subjects, ids) -> None:
    """After the timed steps: streamed (recompute=False) and resident, same adapter state and
    batch, give bitwise equal LoRA gradients; a one-layer adapter perturbation must show."""
    resident = subjects["assay"].model
    streamed = subjects["stream-ram"].model
    resident.gradient_checkpointing = False
    with torch.no_grad():
        for name, param in resident.named_parameters():
            if param.requires_grad:
                streamed.model.get_parameter(name).copy_(param)
    loss = subjects["stream-ram"].loss
    assert subjects["assay"].loss == loss
    expected = trainable_grads(resident, ids, loss=loss)
    got = trainable_grads(streamed, ids, prefix="model.", loss=loss)
    claim = gate.claim(
        "stream.exact_grads",
        f"the measured streamed path (RAM tier, recompute=False) gives LoRA gradients bitwise "
        f"equal to resident from the same adapter state on the same batch ({len(expected)} "
        f"tensors, seq {ids.shape[1]}, loss {loss} as timed, after the timed steps)",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="max abs diff",
        code=STREAM_CODE,
    )
    claim.measure(max_abs_diff(expected, got))
    unequal = sum(not torch.equal(expected[k], got[k]) for k in expected)
    nonzero = sum(int(g.abs().sum() > 0) for k, g in got.items() if k.endswith("lora_A"))
    gate.note(
        f"streamed exactness: {len(expected) - unequal}/{len(expected)} gradient tensors "
        f"torch.equal; {nonzero} of {len(expected) // 2} lora_A gradients non-zero (B trained "
        "away from zero by the timed steps, so a wrong weight would show)"
    )
    middle = len(streamed.model.layers) // 2
    claim.control(
        f"backward rebuilds layer {middle}'s saved weights over layer {middle + 1}'s bytes",
        max_abs_diff(expected, wrong_layer_grads(streamed, ids, middle, loss)),
    )
    target = streamed.model.layers[middle].self_attn.q_proj.lora_B
    with torch.no_grad():
        saved = target.clone()
        target.mul_(1 + 2**-10)
    try:
        perturbed = trainable_grads(streamed, ids, prefix="model.", loss=loss)
    finally:
        with torch.no_grad():
            target.copy_(saved)
    claim.control(
        f"streamed with layer {middle}'s q_proj lora_B scaled by 1 + 2^-10",
        max_abs_diff(expected, perturbed),
    )


def retire_replaced(gate, pytestconfig) -> str:
    lines = [
        retire_replaced_claims(gate, (old,), f"2026-12-04: replaced by {new}: {why}", pytestconfig)
        for old, new, why in REPLACED
    ]
    return "; ".join(lines)


def test_thresholds_moved_to_their_targets(gate, pytestconfig):
    """Each moved threshold is a dated correction citing the receipt that failed under the old
    one, written once (a ledger that already holds it, or never held that receipt, gets none)."""
    gate.note(correct_moved_thresholds(gate, THRESHOLD_MOVES, pytestconfig))
