"""gate-cuda: the claims only a CUDA device can settle, each with a control that must fail.

Peak VRAM against the memory model over a small frozen cohort (to seq 6144: within 5%, never
under by more than 2%); streamed device peak independent of depth; pinned host memory counted
(RssShmem beside RssAnon); bitsandbytes ``matmul_4bit`` backward through recycled slot buffers
(the NF4 stale-gradient class); the copy stream's wait before a slot is reused, repeated so the
unguarded control must mismatch at least once; bf16 compute parity with transformers in bf16;
timed steps (gates/support/cuda/helpers.py) against the same-session bf16 GEMM ceiling,
transformers+PEFT, transformers+bitsandbytes and the resident model, quoted with the SM clock.
Each claim reports the device its tensors were on (``claim.ran_on``).

Without a CUDA device (``--gate-device cpu``, or no GPU) every claim is recorded as not tested
with the reason and each test is skipped: nothing here ever passes on CPU. The model is
``assay_testing.real_model.smollm2_path()``: on the GPU box, the travelling weights
(``ASSAY_SMOLLM2_GGUF``), which the receipt's inputs name.
"""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

from assay.qualify import Threshold

NO_CUDA = "no CUDA device: run harness/gpu_qualify.sh (--gate-device cuda) on a GPU box"
VRAM_CODE = (
    "assay.memory.predict",
    "assay.memory.measure",
    "assay.settings.methods",
    "assay.settings.storages",
    "assay_bench.cuda_peaks",
)
BENCH_CODE = ("assay_bench.subjects", "assay_bench.step", "assay_bench.device")

# Frozen before any row is measured: resident, checkpointed, NF4, chunked loss; long rows at
# seq 6144, where Soup's predictor missed by 0.787x.
SMOL2 = {
    "vocab_size": 49152,
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_layers": 2,
    "num_heads": 9,
    "num_kv_heads": 3,
    "head_dim": 64,
    "tie_word_embeddings": True,
}
MINI4 = {
    "vocab_size": 8192,
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_layers": 4,
    "num_heads": 4,
    "num_kv_heads": 2,
    "head_dim": 64,
    "tie_word_embeddings": True,
}
COHORT = (
    ("smollm2.resident.ce.s512.b2", SMOL2, {"seq_len": 512, "micro_batch": 2}),
    (
        "smollm2.nf4.ckpt.ce.s2048.b1",
        SMOL2,
        {"storage": "nf4", "gradient_checkpointing": True, "seq_len": 2048},
    ),
    ("mini.resident.ce.s6144.b1", MINI4, {"seq_len": 6144}),
    (
        "mini.nf4.chunked.s6144.b2",
        MINI4,
        {
            "storage": "nf4",
            "loss": "chunked_ce",
            "chunk_size": 1024,
            "seq_len": 6144,
            "micro_batch": 2,
        },
    ),
)


def needs_cuda(gate, *items: str) -> None:
    """On a run without CUDA: every item not tested, with the reason, and the test skipped."""
    if gate.device == "cuda" and torch.cuda.is_available():
        return
    reason = NO_CUDA if gate.device == "cuda" else f"gate device is {gate.device}"
    for item in items:
        gate.not_tested(item, reason)
    pytest.skip(NO_CUDA)


def _plans():
    from assay.memory.predict import Plan, shape

    return [(rid, Plan(model=shape(**dims), **kw)) for rid, dims, kw in COHORT]


def _worst_miss(predicted: list[int], measured: list[int]) -> float:
    return max(abs(m / p - 1.0) for p, m in zip(predicted, measured, strict=True))


def _worst_under(predicted: list[int], measured: list[int]) -> float:
    return max(m / p - 1.0 for p, m in zip(predicted, measured, strict=True))


def test_peak_vram_matches_prediction(gate):
    needs_cuda(gate, "vram.cohort", "vram.cohort_under")
    from assay.memory.predict import predict, with_changes
    from assay_bench.cuda_peaks import measure

    plans = _plans()
    frozen = {rid: predict(plan, scope="cuda-allocated").total for rid, plan in plans}
    digest = hashlib.sha256(json.dumps(frozen, sort_keys=True).encode()).hexdigest()
    gate.note(f"predictions frozen before measuring, sha256 {digest}: {frozen}")
    measured, nvml = {}, {}
    for rid, plan in plans:
        out = measure({"kind": "plan", "plan": plan.to_dict()})
        if "error" in out:
            raise RuntimeError(f"{rid}: {out['error']}")
        measured[rid] = out["device_peak_bytes"]
        nvml[rid] = out.get("nvml-process")
    gate.note(f"measured static + cuda max_memory_allocated: {measured}; NVML device used: {nvml}")
    ids = [rid for rid, _ in plans]
    peaks = [measured[r] for r in ids]
    halved = [
        predict(with_changes(plan, seq_len=plan.seq_len // 2), scope="cuda-allocated").total
        for _, plan in plans
    ]
    predicted = [frozen[r] for r in ids]
    for claim_id, statement, limit, unit, worst in (
        (
            "vram.cohort",
            "Predicted device peak within 5% of CUDA max_memory_allocated on every cohort row",
            0.05,
            "max |measured/predicted - 1|",
            _worst_miss,
        ),
        (
            "vram.cohort_under",
            "No cohort row's CUDA peak exceeds its prediction by more than 2% (a plan that is "
            "predicted to fit must fit)",
            0.02,
            "max (measured/predicted - 1)",
            _worst_under,
        ),
    ):
        claim = gate.claim(
            claim_id,
            statement,
            kind="memory",
            threshold=Threshold("<=", limit, tolerance=0.2),
            unit=unit,
            code=VRAM_CODE,
        )
        claim.measure(worst(predicted, peaks))
        claim.ran_on("cuda")  # torch.cuda's allocator statistics count CUDA tensors only
        claim.control(
            "activations under-counted (predicted at half the sequence)", worst(halved, peaks)
        )


def test_streamed_peak_independent_of_depth(gate):
    needs_cuda(gate, "vram.streamed_depth")
    from assay_bench.cuda_peaks import measure

    shallow, deep = 4, 16

    def per_layer_growth(streamed: bool) -> float:
        a = measure({"kind": "depth", "layers": shallow, "streamed": streamed})
        b = measure({"kind": "depth", "layers": deep, "streamed": streamed})
        for out in (a, b):
            if "error" in out:
                raise RuntimeError(out["error"])
        gate.note(f"{'streamed' if streamed else 'resident'} depth peaks: {a} {b}")
        grown = (b["peak_bytes"] - b["depth_state_bytes"]) - (
            a["peak_bytes"] - a["depth_state_bytes"]
        )
        return grown / ((deep - shallow) * a["layer_base_bytes"])

    claim = gate.claim(
        "vram.streamed_depth",
        "Streamed (2 slots) device peak grows by under 10% of a layer's base bytes per layer",
        kind="memory",
        threshold=Threshold("<=", 0.10, tolerance=0.5),
        unit="growth per layer / layer base bytes",
        code=["assay.stream.engine", "assay.stream.pool", "assay_bench.cuda_peaks"],
    )
    claim.measure(per_layer_growth(True))
    claim.ran_on("cuda")  # peaks from torch.cuda's allocator statistics
    claim.control("resident base on the device", per_layer_growth(False))


def test_pinned_host_memory_is_counted(gate):
    needs_cuda(gate, "host.pinned_counted")
    from assay.memory.host import arena_delta

    size = 512 << 20
    pageable = arena_delta(size, pinned=False)
    pinned = arena_delta(size, pinned=True)
    gate.note(f"pageable arena: {pageable.to_dict()}; pinned arena: {pinned.to_dict()}")
    claim = gate.claim(
        "host.pinned_counted",
        "A pinned 512 MiB arena is counted by RssAnon + RssShmem",
        kind="memory",
        threshold=Threshold(">=", 0.95, tolerance=0.05),
        unit="counted / arena bytes",
        code=["assay.memory.host"],
    )
    claim.measure(pinned.anon_plus_shmem_ratio)
    claim.ran_on("cpu")  # host memory, pinned for CUDA copies
    claim.control("accounting that reads RssAnon only", pinned.anon_only_ratio)


def test_nf4_backward_through_recycled_slots(gate):
    needs_cuda(gate, "nf4.slot_recycling")
    from assay_bench.slot_recycling import slot_grad_error

    gate.seed(0)
    claim = gate.claim(
        "nf4.slot_recycling",
        "bnb matmul_4bit backward through 2 recycled slots, each layer re-fetched and "
        "recomputed, equals private buffers",
        kind="correctness",
        threshold=Threshold("<=", 1e-6),
        unit="max |dgrad| / max |grad|",
        code=["assay_bench.slot_recycling", "bitsandbytes.autograd._functions"],
    )
    claim.measure(slot_grad_error("cuda", "refetch"))
    claim.ran_on("cuda")  # slot_grad_error builds every tensor on the device it is given
    claim.control(
        "slot views kept by autograd, overwritten before backward",
        slot_grad_error("cuda", "recycled"),
    )


RACE_REPEATS = 5


def test_copy_stream_waits_before_slot_reuse(gate):
    needs_cuda(gate, "stream.copy_race")
    from assay_bench.stream_race import stream_errors

    # Stall the compute stream at every layer so the host runs ahead and the copy stream
    # reaches a slot while kernels that read it are still queued: the race has room to show.
    # A race shows only sometimes, so both sides run RACE_REPEATS times: the control must
    # mismatch at least once, the claim never.
    runs = [
        stream_errors("cuda", stall_cycles=2_000_000, faults=("stream.pool.skip_release_wait",))
        for _ in range(RACE_REPEATS)
    ]
    limit = 1e-5
    clean = [r["clean"] for r in runs]
    broken = [r["stream.pool.skip_release_wait"] for r in runs]
    gate.note(
        f"stream.copy_race over {RACE_REPEATS} repeats: clean errors {clean}, "
        f"{sum(e > limit for e in broken)} of {RACE_REPEATS} unguarded runs mismatched ({broken})"
    )
    claim = gate.claim(
        "stream.copy_race",
        f"Streamed logits and LoRA grads (2 slots, copy stream, stalled compute) equal resident "
        f"in every one of {RACE_REPEATS} repeats",
        kind="correctness",
        threshold=Threshold("<=", limit),
        unit=f"max relative error over {RACE_REPEATS} repeats",
        code=["assay.stream.pool", "assay.stream.engine", "assay_bench.stream_race"],
    )
    claim.measure(max(clean))
    claim.ran_on("cuda")  # stream_errors places model, ids and slots on the device it is given
    claim.control(
        f"copy stream does not wait for the slot's last reader (worst of {RACE_REPEATS})",
        max(broken),
    )


def _perturbed_norm(model):
    with torch.no_grad():
        model.layers[0].input_layernorm.weight.mul_(1.05)
    return model


def test_bf16_parity_with_transformers(gate):
    needs_cuda(gate, "bf16.parity")
    import assay
    from assay_testing.peers import hf_model
    from assay_testing.real_model import smollm2_path

    path = smollm2_path()
    gate.input("model", path)
    ids = torch.randint(0, 49152, (2, 256), generator=torch.Generator().manual_seed(4)).cuda()
    hf = hf_model(path).to("cuda").eval()
    with torch.no_grad():
        truth = hf(input_ids=ids, use_cache=False).logits.float()
        hf_bf16 = hf.to(torch.bfloat16)(input_ids=ids, use_cache=False).logits.float()
    del hf

    def assay_error(model) -> float:
        with torch.no_grad():
            got = model.to("cuda", torch.bfloat16).eval()(ids).float()
        return float((got - truth).abs().max())

    reference = float((hf_bf16 - truth).abs().max())
    gate.note(f"transformers bf16 against its fp32: max abs logit error {reference:.4g}")
    claim = gate.claim(
        "bf16.parity",
        "assay bf16 logits are no further from fp32 than transformers bf16 (ratio <= 1.5)",
        kind="correctness",
        threshold=Threshold("<=", 1.5, tolerance=0.2),
        unit="error / transformers bf16 error",
        code=["assay.model.decoder", "assay.model.gguf"],
    )
    claim.measure(assay_error(assay.load(path)) / reference)
    claim.ran_on(ids.device.type)
    claim.control(
        "first RMSNorm weight scaled by 1.05",
        assay_error(_perturbed_norm(assay.load(path))) / reference,
    )


def test_throughput_against_ceiling_and_peft(gate):
    needs_cuda(gate, "throughput.gemm_fraction", "throughput.vs_peft")
    from support.cuda.helpers import bf16_lora_steps

    bf16_lora_steps(gate, BENCH_CODE)


def test_streamed_and_nf4_steps(gate):
    needs_cuda(gate, "throughput.stream_vs_resident", "throughput.nf4_vs_bnb")
    from support.cuda.helpers import nf4_steps, streamed_steps

    streamed_steps(gate, BENCH_CODE)
    nf4_steps(gate, BENCH_CODE)
