"""gate-throughput's notes (not a gate module): the profile, the Amdahl bound over a peer and
the FLOP model's check, each one line of the record from the benchmark's result."""

from __future__ import annotations

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
