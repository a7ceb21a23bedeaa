"""One benchmark run end to end: build subjects, time them interleaved, profile, and assemble
a JSON-ready result with ratios, the FLOP model, the ceiling and the Amdahl bound.

The Amdahl bound over a peer is its median step time over the time the GEMMs of one of its
steps take when replayed alone (same ops and shapes, from the profile; assay_bench.gemm): what
an implementation doing the same GEMMs at this machine's speed could gain if every other op
took no time. ``bound_with_attention`` keeps the profiled attention kernels as necessary work
too. ``bound_in_profile`` divides the profiled step by its profiled matmul time instead; the
profiler's per-op overhead inflates both parts, so it is only a cross-check.
"""

from __future__ import annotations

import platform
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from assay_bench.gemm import gemm_rate, replay_seconds
from assay_bench.profile import amdahl_bound, profile_step
from assay_bench.step import (
    CEILING_N,
    Run,
    Subject,
    interleaved,
    median_step,
    paired_ratios,
    ratio,
    subject_result,
    train_step,
)

# Subjects timed at every sequence length; the rest only at the first one.
SEQ_SWEEP = ("assay", "assay+ckpt", "peft")
# (key, numerator, denominator, kind): speedup = tokens/s ratio, time = step-time ratio.
COMPARISONS = (
    ("resident_over_peft", "assay", "peft", "speedup"),
    ("ckpt_over_peft", "assay+ckpt", "peft", "speedup"),
    ("nf4_over_bnb", "assay-nf4", "bnb-nf4", "speedup"),
    ("nf4_ckpt_over_bnb", "assay-nf4+ckpt", "bnb-nf4", "speedup"),
    ("stream_over_resident", "stream-ram", "assay", "time"),
    ("stream_recompute_over_resident", "stream-ram+recompute", "assay", "time"),
    ("stream_recompute_over_ckpt", "stream-ram+recompute", "assay+ckpt", "time"),
    ("all_linear_over_peft", "assay-all", "peft-all", "speedup"),
    ("all_linear_ckpt_over_peft", "assay-all+ckpt", "peft-all", "speedup"),
    ("compiled_over_peft", "assay-compiled", "peft", "speedup"),
    ("compiled_over_peft_compiled", "assay-compiled", "peft-compiled", "speedup"),
    ("peft_compiled_over_peft", "peft-compiled", "peft", "speedup"),
    ("bf16_over_peft_bf16", "assay-bf16", "peft-bf16", "speedup"),
    ("bf16_over_resident", "assay-bf16", "assay", "speedup"),
)
# The targets (printed by the harness, judged by gate-throughput): issue 42's answers to issue
# 29 (2026-12-04), reached by dated corrections: eager >= 1.10x PEFT and compiled >= 1.30x PEFT
# eager at seq 256; NF4 >= 1.15x bitsandbytes; the step within 1.25x of its reach (the same
# run's GEMMs replayed alone plus attention), replacing the fp32 ceiling fraction; the
# tensor-level step peak <= 0.75x PEFT's, replacing peak RSS (kept as a measured row).
TARGETS = {
    "resident_over_peft": (">=", 1.10),
    "all_linear_over_peft": (">=", 1.10),
    "compiled_over_peft": (">=", 1.30),
    "nf4_over_bnb": (">=", 1.15),
    "stream_over_resident": ("<=", 1.10),
    "reach_fraction": (">=", 0.80),
    "tensor_peak_over_peft": ("<=", 0.75),
}
# whose profile gives the step's reach: its GEMMs replayed alone plus its attention kernels
REACH_OF = "assay"
PEERS = {"peft": "assay", "bnb-nf4": "assay-nf4"}
LOSS_TEXT = {
    "ce": "F.cross_entropy over full-vocabulary fp32 logits, labels shifted by one",
    "chunked_ce": "assay chunked_cross_entropy over the hidden states (frozen head: the "
    "hidden-state gradient formed in the forward), labels shifted by one",
}


def plan(names: Sequence[str], seqs: Sequence[int], all_seq: bool = False) -> list[tuple[str, int]]:
    """(subject, seq) pairs: every subject at the first seq, the sweep subjects at all."""
    return [
        (name, seq)
        for seq in seqs
        for name in names
        if all_seq or seq == seqs[0] or name in SEQ_SWEEP
    ]


def comparisons(times: dict[tuple[str, int], list[float]]) -> dict[str, dict[str, Any]]:
    """``key@seq`` -> the ratio for every comparison whose two subjects ran at that seq.

    ``value`` is the median of the round-by-round ratios (both subjects timed in the same
    round, so drift between rounds cancels); ``samples`` are those ratios;
    ``of_medians`` is the ratio of the two median step times.
    """
    out = {}
    seqs = sorted({seq for _, seq in times})
    for key, num, den, kind in COMPARISONS:
        for seq in seqs:
            if (num, seq) in times and (den, seq) in times:
                a, b = times[(num, seq)], times[(den, seq)]
                samples = paired_ratios(b, a) if kind == "speedup" else paired_ratios(a, b)
                a_med, b_med = median_step(a), median_step(b)
                out[f"{key}@{seq}"] = {
                    "value": statistics.median(samples),
                    "samples": samples,
                    "of_medians": ratio(b_med, a_med) if kind == "speedup" else ratio(a_med, b_med),
                    "kind": "tokens/s ratio" if kind == "speedup" else "step-time ratio",
                }
    return out


def machine() -> dict[str, Any]:
    """CPU model, flags that matter for fp32/bf16 GEMMs, threads and library versions."""
    import importlib.metadata as md

    cpu, flags = platform.processor() or "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    versions = {}
    for package in ("torch", "transformers", "peft", "bitsandbytes"):
        try:
            versions[package] = md.version(package)
        except md.PackageNotFoundError:
            versions[package] = None
    return {
        "cpu": cpu,
        "logical_cpus": __import__("os").cpu_count(),
        "threads": torch.get_num_threads(),
        "simd": sorted(f for f in flags if f.startswith(("avx512", "avx2", "amx"))),
        "versions": versions,
    }


def run_benchmark(
    path: Path,
    names: Sequence[str],
    *,
    seqs: Sequence[int] = (256, 512),
    steps: int = 5,
    warmup: int = 1,
    profile: Sequence[str] = (),
    all_seq: bool = False,
    batch: int = 1,
    ceiling_n: int = CEILING_N,
    assay_loss: str = "chunked_ce",
    subjects: dict[str, Subject] | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> tuple[dict[str, Any], dict[str, Subject]]:
    """Build the named subjects (unless ``subjects`` are given), time them, profile the
    ``profile`` ones at the first seq; returns (result, subjects)."""
    from assay_bench.subjects import build_subjects

    if steps < 5:
        raise ValueError(f"steps must be at least 5 (median of 5 timed steps), got {steps}")
    if subjects is None:
        subjects = build_subjects(names, path, assay_loss=assay_loss, progress=progress)
    gen = torch.Generator().manual_seed(0)
    vocab = next(iter(subjects.values())).config.vocab_size
    ids = {seq: torch.randint(0, vocab, (batch, seq), generator=gen) for seq in seqs}
    runs = [Run(subjects[name], seq) for name, seq in plan(names, seqs, all_seq)]
    times, rates, losses = interleaved(
        runs, ids, steps=steps, warmup=warmup, ceiling_n=ceiling_n, progress=progress
    )
    ceiling = median_step(rates, minimum=1)
    progress("measuring the LM-head-shaped GEMM")
    config = next(iter(subjects.values())).config
    head_rate = gemm_rate(batch * seqs[0], config.hidden_size, config.vocab_size)
    results: dict[str, dict[str, Any]] = {}
    for (name, seq), samples in times.items():
        entry = results.setdefault(name, {"description": subjects[name].description, "seq": {}})
        entry["seq"][str(seq)] = subject_result(subjects[name], seq, batch, samples, rates)
        entry["seq"][str(seq)]["losses"] = losses[(name, seq)]
    profiles = {}
    for name in profile:
        progress(f"profiling one step of {name} at seq {seqs[0]}")
        profiles[name] = profile_step(lambda s=subjects[name]: train_step(s, ids[seqs[0]]))
    amdahl = {}
    for peer in PEERS:
        if peer in profiles and (peer, seqs[0]) in times:
            progress(f"replaying the GEMMs of one {peer} step")
            prof = profiles[peer]
            median = median_step(times[(peer, seqs[0])])
            replayed = replay_seconds(prof["gemm_calls"])
            matmul = prof["categories"]["matmul"]["s"]
            attention = prof["categories"]["attention"]["s"]
            amdahl[peer] = {
                "seq": seqs[0],
                "median_step_s": median,
                "gemm_replay_s": replayed,
                "gemm_calls": sum(c["count"] for c in prof["gemm_calls"]),
                "gemm_flops": prof["gemm_flops"],
                "bound": amdahl_bound(median, replayed),
                "profiled_attention_s": attention,
                "bound_with_attention": amdahl_bound(median, replayed + attention),
                "profiled_step_s": prof["step_s"],
                "profiled_matmul_s": matmul,
                "bound_in_profile": amdahl_bound(prof["step_s"], matmul),
            }
    result = {
        "reach": reach(profiles, times, seqs[0]),
        "machine": machine(),
        "settings": {
            "seqs": list(seqs),
            "batch": batch,
            "steps": steps,
            "warmup": warmup,
            "lora": {"rank": 8, "alpha": 16, "targets": "attention (q, k, v, o)"},
            "optimizer": "torch.optim.AdamW(fused=True, lr=1e-4)",
            "loss": {name: LOSS_TEXT[subject.loss] for name, subject in subjects.items()},
            "numerics": "fp32 everywhere; torch SDPA (CPU flash kernel where it applies)",
        },
        "ceiling": {
            "gflops": ceiling,
            "shape": [ceiling_n] * 3,
            "samples_gflops": rates,
            "lm_head_shape": [batch * seqs[0], config.hidden_size, config.vocab_size],
            "lm_head_gflops": head_rate,
        },
        "subjects": results,
        "ratios": comparisons(times),
        "profiles": profiles,
        "amdahl": amdahl,
        "peak_rss": {},  # filled by callers that measure it (assay_bench.rss, one process each)
        "targets": {k: {"op": op, "value": v} for k, (op, v) in TARGETS.items()},
    }
    return result, subjects


def reach(
    profiles: dict[str, Any], times: dict[tuple[str, int], list[float]], seq: int
) -> dict[str, Any]:
    """The step's reach at ``seq``: the GEMMs of one ``REACH_OF`` step replayed alone plus its
    profiled attention, the time an implementation doing that work with every other op free
    would take; and each subject timed at ``seq``: reach over its median step (1.0 = at the
    reach). Empty when ``REACH_OF`` was not profiled."""
    if REACH_OF not in profiles:
        return {}
    prof = profiles[REACH_OF]
    floor_s = replay_seconds(prof["gemm_calls"]) + prof["categories"]["attention"]["s"]
    fractions = {
        name: floor_s / median_step(samples) for (name, at), samples in times.items() if at == seq
    }
    return {"of": REACH_OF, "seq": seq, "reach_s": floor_s, "fraction": fractions}


def format_table(result: dict[str, Any]) -> str:
    """The human-readable summary the harness prints."""
    lines = [
        f"{'subject':<22}{'seq':>5}{'s/step':>9}{'tok/s':>8}{'GFLOP/s':>9}{'ceiling':>9}",
    ]  # ratios: median of round-by-round ratios, [min, max] over rounds
    for name, entry in result["subjects"].items():
        for seq, r in entry["seq"].items():
            lines.append(
                f"{name:<22}{seq:>5}{r['median_s']:>9.3f}{r['tokens_per_s']:>8.1f}"
                f"{r['gflops']:>9.1f}{r['ceiling_fraction']:>9.1%}"
            )
    c = result["ceiling"]
    lines.append(
        f"fp32 GEMM ceiling {c['gflops']:.1f} GFLOP/s ({c['shape'][0]}^3); LM-head shape "
        f"{'x'.join(map(str, c['lm_head_shape']))}: {c['lm_head_gflops']:.1f} GFLOP/s"
    )
    for key, r in result["ratios"].items():
        target = TARGETS.get(key.split("@")[0])
        suffix = f"   (target {target[0]} {target[1]})" if target else ""
        spread = f"[{min(r['samples']):.3f}, {max(r['samples']):.3f}]"
        lines.append(f"{key:<38}{r['value']:>7.3f} {spread:<16}{suffix}")
    for name, prof in result["profiles"].items():
        parts = ", ".join(
            f"{cat} {v['fraction']:.0%}" for cat, v in prof["categories"].items() if v["s"] > 0
        )
        lines.append(f"profile {name} ({prof['step_s']:.3f} s): {parts}")
        ops = ", ".join(f"{op['name']} {op['fraction']:.1%}" for op in prof["top_ops"])
        lines.append(f"  top ops by self CPU: {ops}")
    for peer, a in result["amdahl"].items():
        lines.append(
            f"Amdahl bound over {peer}: {a['bound']:.3f}x (median step {a['median_step_s']:.3f} "
            f"s / its {a['gemm_calls']} GEMMs replayed alone {a['gemm_replay_s']:.3f} s; with "
            f"attention {a['bound_with_attention']:.3f}x; within the profile "
            f"{a['bound_in_profile']:.3f}x)"
        )
    rss = result.get("peak_rss", {})
    for name, r in rss.items():
        lines.append(
            f"peak RSS {name} (seq {r['seq']}): {r['step_peak_bytes'] / 2**20:.0f} MiB above the "
            f"loaded model ({r['loaded_bytes'] / 2**20:.0f} MiB); tensors alone "
            f"{r['tensor_step_peak_bytes'] / 2**20:.0f} MiB"
        )
    if "assay" in rss and "peft" in rss:
        op, value = TARGETS["tensor_peak_over_peft"]
        share = rss["assay"]["tensor_step_peak_bytes"] / rss["peft"]["tensor_step_peak_bytes"]
        lines.append(f"{'tensor_peak_over_peft':<38}{share:>7.3f}    (target {op} {value})")
        share = rss["assay"]["step_peak_bytes"] / rss["peft"]["step_peak_bytes"]
        lines.append(f"{'peak_rss_over_peft':<38}{share:>7.3f}    (measured row)")
    if result.get("reach"):
        r, (op, value) = result["reach"], TARGETS["reach_fraction"]
        for name, fraction in r["fraction"].items():
            lines.append(
                f"{'reach_fraction ' + name:<38}{fraction:>7.3f}    (reach {r['reach_s']:.3f} s "
                f"at seq {r['seq']}; target {op} {value})"
            )
    return "\n".join(lines)
