"""gate-cuda's timed training steps on the GPU: assay against its peers in the same session.

Every comparison runs its subjects interleaved (two warm-up rounds dropped, then ``ROUNDS``
timed rounds, median step time each), on one batch of SmolLM2-shaped ids, and quotes the SM
clock before and after. The control of each claim is the same subject with every layer stalled
on the GPU (``torch.cuda._sleep``), which a ratio check must catch.

Goals (issue 26): LoRA step >= 1.25x transformers+PEFT and NF4 >= 1.25x transformers +
bitsandbytes, streamed step <= 1.10x resident. They have never met an H200; the first run is
their pilot, and a threshold moves only by a dated correction that cites it.
"""

from __future__ import annotations

import torch

from assay.qualify import Threshold

BATCH, SEQ, ROUNDS, WARMUP = 4, 1024, 6, 2
STALL_CYCLES = 50_000_000


def _ids() -> torch.Tensor:
    generator = torch.Generator().manual_seed(5)
    return torch.randint(0, 49152, (BATCH, SEQ), generator=generator).cuda()


def _median_steps(subjects: dict, ids: torch.Tensor) -> dict[str, float]:
    from assay_bench.step import train_step

    times: dict[str, list[float]] = {name: [] for name in subjects}
    for round_ in range(ROUNDS + WARMUP):
        for name, subject in subjects.items():
            seconds, _ = train_step(subject, ids)
            if round_ >= WARMUP:
                times[name].append(seconds)
    return {name: sorted(t)[len(t) // 2] for name, t in times.items()}


def _stalled(subject, ids: torch.Tensor) -> float:
    """Best of three steps of ``subject`` with every decoder layer stalled on the GPU."""
    from assay_bench.step import train_step

    model = getattr(subject.model, "model", subject.model)  # a StreamedModel wraps its base
    handles = [
        layer.register_forward_pre_hook(lambda *_: torch.cuda._sleep(STALL_CYCLES))
        for layer in model.layers
    ]
    try:
        return min(train_step(subject, ids)[0] for _ in range(3))
    finally:
        for handle in handles:
            handle.remove()


def _model_path(gate):
    from assay_testing.real_model import smollm2_path

    path = smollm2_path()
    gate.input("model", path)
    return path


def _claim(
    gate,
    claim_id: str,
    statement: str,
    threshold: Threshold,
    unit: str,
    code: tuple[str, ...],
    device: str,
    value: float,
    stalled: float,
) -> None:
    """One timed claim: measured on ``device``, its control the same figure with every layer
    stalled on the GPU."""
    claim = gate.claim(
        claim_id,
        statement,
        kind="performance",
        threshold=threshold,
        unit=unit,
        code=(*code, "support.cuda.helpers"),
    )
    claim.measure(value)
    claim.ran_on(device)
    claim.control(f"every layer stalled {STALL_CYCLES} GPU cycles", stalled)


def _timed(subjects: dict, ours: str) -> tuple[torch.Tensor, dict[str, float], float]:
    """(the batch, median step seconds per subject, the stalled step of ``ours``)."""
    ids = _ids()
    median = _median_steps(subjects, ids)
    return ids, median, _stalled(subjects[ours], ids)


def bf16_lora_steps(gate, code: tuple[str, ...]) -> None:
    """throughput.gemm_fraction and throughput.vs_peft: bf16 LoRA steps, assay against PEFT."""
    from assay_bench.device import gemm_ceiling_tflops, sm_clock_mhz
    from assay_bench.subjects import build_subjects

    subjects = build_subjects(["assay", "peft"], _model_path(gate), assay_loss="chunked_ce")
    for subject in subjects.values():
        subject.model.to("cuda", torch.bfloat16)
    clock_before = sm_clock_mhz()
    ceiling = gemm_ceiling_tflops("cuda")
    ids, median, slow = _timed(subjects, "assay")
    flops = subjects["assay"].flops(BATCH, SEQ).executed
    gate.note(
        f"bf16 GEMM ceiling {ceiling:.1f} TFLOP/s; SM clock before {clock_before}, after "
        f"{sm_clock_mhz()}; median step s {median}; assay step FLOPs {flops}"
    )
    fraction = lambda seconds: flops / seconds / 1e12 / ceiling  # noqa: E731
    _claim(
        gate,
        "throughput.gemm_fraction",
        "assay bf16 LoRA step reaches >= 15% of the same-session bf16 GEMM ceiling",
        Threshold(">=", 0.15, tolerance=0.2),
        "fraction of ceiling",
        code,
        ids.device.type,
        fraction(median["assay"]),
        fraction(slow),
    )
    _claim(
        gate,
        "throughput.vs_peft",
        "assay bf16 LoRA step is >= 1.25x as fast as transformers+PEFT's, same session",
        Threshold(">=", 1.25, tolerance=0.2),
        "peft / assay step time",
        code,
        ids.device.type,
        median["peft"] / median["assay"],
        median["peft"] / slow,
    )


def _step_ratio(
    gate,
    subjects: dict,
    ours: str,
    peer: str,
    claim_id: str,
    statement: str,
    *,
    speedup: bool,
    threshold: Threshold,
    code: tuple[str, ...],
) -> None:
    """Time ``ours`` against ``peer`` interleaved and claim their ratio: peer / ours when
    ``speedup`` (higher is better), else ours / peer; the control stalls ``ours``."""
    ids, median, slow = _timed(subjects, ours)
    gate.note(f"{claim_id}: median step s {median}")
    ratio = (lambda t: median[peer] / t) if speedup else (lambda t: t / median[peer])
    unit = f"{peer} / {ours} step time" if speedup else f"{ours} / {peer} step time"
    _claim(
        gate,
        claim_id,
        statement,
        threshold,
        unit,
        code,
        ids.device.type,
        ratio(median[ours]),
        ratio(slow),
    )


def streamed_steps(gate, code: tuple[str, ...]) -> None:
    """throughput.stream_vs_resident: fp32 LoRA, streamed from pinned RAM (2 slots) to the GPU
    against the same model resident on it."""
    from assay_bench.subjects import build_subjects

    subjects = build_subjects(
        ["assay", "stream-ram"], _model_path(gate), assay_loss="chunked_ce", stream_device="cuda"
    )
    subjects["assay"].model.to("cuda")
    _step_ratio(
        gate,
        subjects,
        "stream-ram",
        "assay",
        "throughput.stream_vs_resident",
        "assay streamed from RAM (2 slots, copy stream) takes <= 1.10x the step time of the "
        "same model resident on the GPU (fp32)",
        speedup=False,
        threshold=Threshold("<=", 1.10, tolerance=0.2),
        code=(*code, "assay.stream.engine", "assay.stream.pool"),
    )


def nf4_steps(gate, code: tuple[str, ...]) -> None:
    """throughput.nf4_vs_bnb: NF4 double-quant LoRA, assay against transformers+bitsandbytes."""
    from assay_bench.subjects import build_subjects

    subjects = build_subjects(["assay-nf4", "bnb-nf4"], _model_path(gate), assay_loss="chunked_ce")
    for subject in subjects.values():
        subject.model.to("cuda")
    _step_ratio(
        gate,
        subjects,
        "assay-nf4",
        "bnb-nf4",
        "throughput.nf4_vs_bnb",
        "assay NF4 LoRA step is >= 1.25x as fast as transformers + bitsandbytes NF4 double "
        "quant + PEFT's (fp32 compute), same session",
        speedup=True,
        threshold=Threshold(">=", 1.25, tolerance=0.2),
        code=(*code, "assay.storage.nf4"),
    )
