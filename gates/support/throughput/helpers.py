"""gate-throughput's helpers (not a gate module): its notes (the profile, the top ops, the
Amdahl bound over a peer, how far the ceiling and NF4 targets are reachable at all, the FLOP
model's check, peak RSS), the peak-RSS rows and the streamed control's wrong-layer gradients."""

from __future__ import annotations

import dataclasses

import torch

from assay.stream.refetch import SlotRef
from assay_bench.rss import in_subprocess
from assay_bench.step import trainable_grads

SEQ = 256  # the first of gate-throughput's SEQS: where it profiles


def profile_note(result, name: str) -> str:
    prof = result["profiles"][name]
    parts = ", ".join(
        f"{cat} {v['s']:.3f} s ({v['fraction']:.1%})" for cat, v in prof["categories"].items()
    )
    return f"profile of one extra {name} step at seq {SEQ} ({prof['step_s']:.3f} s): {parts}"


def amdahl_note(result, peer: str, target: float) -> str:
    a = result["amdahl"][peer]
    verdict = "below" if a["bound"] < target else "above"
    return (
        f"Amdahl bound over {peer} at seq {a['seq']}: its median step is "
        f"{a['median_step_s']:.3f} s and the {a['gemm_calls']} GEMMs of one of its steps "
        f"({a['gemm_flops'] / 1e9:.1f} GFLOP, shapes from its profile) take "
        f"{a['gemm_replay_s']:.3f} s replayed alone, so doing the same GEMMs at this machine's "
        f"speed with every other op free gains at most {a['bound']:.3f}x, {verdict} the "
        f"{target}x target; keeping its attention kernels ({a['profiled_attention_s']:.3f} s) "
        f"as necessary work, {a['bound_with_attention']:.3f}x. Cross-check inside the profile "
        f"(profiled step {a['profiled_step_s']:.3f} s / profiled matmul "
        f"{a['profiled_matmul_s']:.3f} s): {a['bound_in_profile']:.3f}x. fp32 numerics: only "
        "fewer or faster GEMMs could go further"
    )


def ceiling_reach_note(result, peer: str) -> str:
    """A measured row: the largest fraction of the fp32 GEMM ceiling assay's FLOPs allow if
    its step were only the peer's GEMMs (the same shapes: flop_check_note) and attention, at
    this session's speed (why the ceiling was replaced by the reach as a target)."""
    a = result["amdahl"][peer]
    flops = result["subjects"]["assay"]["seq"][str(SEQ)]["flops"]["model"]
    floor_s = a["gemm_replay_s"] + a["profiled_attention_s"]
    reach = flops / floor_s / 1e9 / result["ceiling"]["gflops"]
    achieved = result["subjects"]["assay"]["seq"][str(SEQ)]["ceiling_fraction"]
    return (
        f"ceiling rows at seq {SEQ}: assay resident ran at {achieved:.1%} of the "
        f"{result['ceiling']['gflops']:.1f} GFLOP/s 2048^3 fp32 ceiling; the model's "
        f"{flops / 1e9:.1f} GFLOP in the time of {peer}'s GEMMs replayed alone plus attention "
        f"({floor_s:.3f} s), with every other op free, would be {reach:.1%} of it: small-M GEMMs "
        f"(M = {SEQ} tokens) run below the ceiling on this machine"
    )


def decode_free_note(result, target: float) -> str:
    """What assay NF4 would reach over bitsandbytes if decoding cost nothing: assay's fp32
    resident step does the same GEMMs and everything else, with no decoding."""
    step = {n: result["subjects"][n]["seq"][str(SEQ)]["median_s"] for n in ("assay", "bnb-nf4")}
    reach = step["bnb-nf4"] / step["assay"]
    verdict = "below" if reach < target else "above"
    return (
        f"NF4 with decoding free, at seq {SEQ}: the {target}x target needs an assay-nf4 step "
        f"of at most {step['bnb-nf4'] / target:.3f} s; assay's fp32 resident step, the same "
        f"work with no decoding at all, took {step['assay']:.3f} s in this run, so decoding "
        f"for free would give {reach:.3f}x, {verdict} the target"
    )


def flop_check_note(result, name: str) -> str:
    prof = result["profiles"][name]
    flops = result["subjects"][name]["seq"][str(SEQ)]["flops"]
    expected = flops["model"] - flops["attention"]
    return (
        f"FLOP model check ({name}, seq {SEQ}): the profiled step ran "
        f"{prof['gemm_flops'] / 1e9:.2f} GFLOP in GEMMs; the model, less attention (SDPA is "
        f"not a GEMM), counts {expected / 1e9:.2f} GFLOP. It also counts the first layer's "
        "q/k/v input gradients, which autograd skips for a frozen embedding, and the head for "
        "the unscored last position, which chunked CE skips"
    )


def top_ops_note(result, name: str) -> str:
    """The profiled step's 15 costliest ops by self CPU time, with their share of the step."""
    prof = result["profiles"][name]
    ops = ", ".join(
        f"{op['name']} {op['s'] * 1e3:.1f} ms ({op['fraction']:.1%}, {op['calls']} calls)"
        for op in prof["top_ops"]
    )
    return f"top {len(prof['top_ops'])} ops of one {name} step at seq {SEQ} by self CPU: {ops}"


# glibc raises its mmap threshold as large blocks are freed, so later steps take them from a
# heap that keeps freed pages: rows under a fixed threshold show the peak without that retention
FIXED_MMAP = {"MALLOC_MMAP_THRESHOLD_": "65536"}
# (row, subject, assay loss, environment): each row is one fresh process (assay_bench.rss)
RSS_ROWS = (
    ("assay", "assay", "chunked_ce", None),
    ("peft", "peft", "ce", None),
    ("assay+ckpt", "assay+ckpt", "chunked_ce", None),
    ("assay with full-logit CE", "assay", "ce", None),
    ("assay, fixed mmap threshold", "assay", "chunked_ce", FIXED_MMAP),
    ("peft, fixed mmap threshold", "peft", "ce", FIXED_MMAP),
)


def peak_rss_rows(model) -> dict[str, dict]:
    """Each RSS_ROWS row measured in its own process at seq SEQ."""
    return {
        row: in_subprocess(name, SEQ, model, loss, env=env) for row, name, loss, env in RSS_ROWS
    }


def peak_rss_note(rows: dict[str, dict]) -> str:
    mib = 1 << 20
    parts = "; ".join(
        f"{row}: loaded {r['loaded_bytes'] / mib:.0f} MiB, peak {r['peak_bytes'] / mib:.0f} MiB, "
        f"step peak above the loaded model {r['step_peak_bytes'] / mib:.0f} MiB, tensor-level "
        f"step peak {r['tensor_step_peak_bytes'] / mib:.0f} MiB"
        for row, r in rows.items()
    )
    tensors = rows["assay"]["tensor_step_peak_bytes"] / rows["peft"]["tensor_step_peak_bytes"]
    return (
        f"peak RSS, one fresh process per row, seq {SEQ}, two optimizer steps after the "
        f"kernel's high-water mark is reset at the loaded model: {parts}. The claim takes the "
        "default allocator, as users run; the fixed-threshold rows (MALLOC_MMAP_THRESHOLD_="
        f"{FIXED_MMAP['MALLOC_MMAP_THRESHOLD_']}) show how much of each peak is freed heap "
        "that glibc keeps after its mmap threshold has grown, and the tensor-level peaks (a "
        "third step under the profiler, allocator excluded) what the tensors alone need: "
        f"assay over peft {tensors:.3f}x"
    )


def wrong_layer_grads(streamed, ids, layer: int, loss: str) -> dict[str, torch.Tensor]:
    """Gradients from a streamed run whose backward rebuilds ``layer``'s saved weight views
    over the next layer's bytes (same layout, different weights): the trap this path avoids."""
    kept = streamed.kept
    unpack = kept._unpack

    def wrong(packed):
        if isinstance(packed, SlotRef) and packed.layer == layer:
            packed = dataclasses.replace(packed, layer=layer + 1)
        return unpack(packed)

    kept._unpack = wrong  # read when the forward installs the saved-tensor hooks
    try:
        return trainable_grads(streamed, ids, prefix="model.", loss=loss)
    finally:
        del kept._unpack
