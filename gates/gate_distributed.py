"""gate-distributed: data-parallel (DDP) and sharded (FSDP2) training on torch.distributed, with
2 processes over gloo on CPU (NCCL on a multi-GPU box: harness/distributed_nccl.py).

Everything world-size-2 runs in ONE torchrun job (gates/support/distributed/child.py ``ranks``), the
world-size-1 side in one plain process (``single``); this module only compares what they
wrote. The model is a tiny random Llama (2 layers, hidden 64, vocab 320) with a byte-level
tokenizer, so the gate costs process start-up, not arithmetic.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from assay.qualify import Threshold
from support.distributed.helpers import _run, _specification

# the claim a reader looks at first (the index and every record lead with it)
HEADLINE = "ddp.one_update"

WORLD = 2
CHILD = Path(__file__).parent / "support" / "distributed" / "child.py"
IMPLEMENTATION = (
    "assay.distributed.context",
    "assay.distributed.sampler",
    "assay.distributed.wrap",
    "assay.distributed.state",
    "assay.distributed.trainer",
    "assay.train.loop",
    "assay.settings.loader",
    "assay.train.checkpoint.directory",
    "assay.cli",
    "assay.cli.train",
    str(CHILD),
)  # run by the ranks and the single process (children): checked against what they imported


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory) -> dict:
    from assay.qualify.plugin.environment import resolve_device
    from assay_testing.text_run import save_text_run

    device = resolve_device(request.config.getoption("gate_device"))
    if device == "cuda" and torch.cuda.device_count() < WORLD:
        pytest.skip(f"NCCL run needs {WORLD} GPUs, this box has {torch.cuda.device_count()}")
    root = tmp_path_factory.mktemp("distributed")
    (root / "model").symlink_to(save_text_run(root, seed=1)["model"])
    spec = _specification(root, device)
    (root / "spec.json").write_text(json.dumps(spec, indent=2))
    out = root / "out"
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={WORLD}"]
    seconds = {
        "ranks": _run(
            [*launcher, str(CHILD), "ranks", str(root / "spec.json"), str(out)],
            f"torchrun {WORLD} ranks",
        ),
        "single": _run([str(CHILD), "single", str(root / "spec.json"), str(out)], "single"),
    }
    ranks = [json.loads((out / f"ranks-rank{r}.json").read_text()) for r in range(WORLD)]
    single = json.loads((out / "single-rank0.json").read_text())
    return {
        "out": out,
        "ranks": ranks,
        "single": single,
        "seconds": seconds,
        "spec": spec,
        "device": device,
        "root": root,
    }


def tensors(runs: dict, name: str) -> dict[str, torch.Tensor]:
    return load_file(str(runs["out"] / f"{name}.safetensors"))


def max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], prefix: str) -> float:
    """Max abs difference over every tensor named ``prefix/...``; a tensor missing on one side
    (no gradient reached it) counts as zeros there."""
    names = sorted({k for k in (*a, *b) if k.startswith(f"{prefix}/")})
    if not names:
        raise AssertionError(f"no {prefix} tensors")
    worst = 0.0
    for k in names:
        left = a[k].double() if k in a else torch.zeros_like(b[k].double())
        right = b[k].double() if k in b else torch.zeros_like(left)
        worst = max(worst, float((left - right).abs().max()))
    return worst


def over_ranks(runs: dict, run: str, prefix: str) -> float:
    """The worst rank's max abs difference from the single-process reference."""
    reference = tensors(runs, "reference")
    return max(max_diff(tensors(runs, f"{run}-rank{r}"), reference, prefix) for r in range(WORLD))


def largest(runs: dict, prefix: str) -> float:
    ref = tensors(runs, "reference")
    return max(float(ref[k].abs().max()) for k in ref if k.startswith(f"{prefix}/"))


def update_size(runs: dict) -> float:
    """Largest parameter change the single-process update made."""
    ref = tensors(runs, "reference")
    params = [k for k in ref if k.startswith("param/")]
    return max(float((ref[k] - ref[f"init/{k[6:]}"]).abs().max()) for k in params)


def _declare(gate, runs: dict) -> None:
    gate.seed(1, 3)
    root = runs["root"]
    gate.input("tiny model", root / "model" / "model.safetensors")
    gate.input("byte tokenizer", root / "bytes.gguf")
    gate.input("train rows", root / "train.jsonl")


# Bounds, with the reasoning written into the record (see _BOUNDS_NOTE).
GRAD_BOUND = 1e-5
PARAM_BOUND = 1e-7
LOSS_BOUND = 1e-5
_BOUNDS_NOTE = (
    "Tolerances. Gradients: the union's gradient is summed in another order (each rank pads "
    "and reduces its own 2 rows, then the all-reduce adds the two halves); float32 has "
    "eps 1.19e-7 and an n-term sum may drift by about n*eps relative, so 1e-5 absolute "
    "(about 1e-4 of the largest gradient, 0.11) leaves room for 10^2-10^3-term reductions "
    "and is still thousands of times below every control. Parameters: the first AdamW "
    "update with eps 1 is lr*g/(|g|+1), so a gradient error dg moves a parameter by at "
    "most lr*dg = 1e-2 * 1e-5 = 1e-7. Losses: 1e-5 is about 20 float32 ulps of a loss "
    "near 5.4."
)


def agreement_claim(
    gate,
    runs: dict,
    claim_id: str,
    text: str,
    measured: tuple,
    controls: list[tuple[str, str]],
    code: tuple[str, ...] = IMPLEMENTATION,
) -> None:
    """A claim that run ``measured`` = (run, "param" or "grad", bound) agrees with the one-process
    reference on every rank; each control (label, run) is measured the same way."""
    run, prefix, bound = measured
    claim = gate.claim(
        claim_id,
        text,
        kind="correctness",
        threshold=Threshold("<=", bound, tolerance=0.1),
        unit="max abs",
        code=code,
    )
    claim.measure(over_ranks(runs, run, prefix))
    for label, control_run in controls:
        claim.control(label, over_ranks(runs, control_run, prefix))


def test_ddp_one_update_equals_one_process_over_the_union(gate, runs):
    _declare(gate, runs)
    backend = runs["spec"]["backend"]
    controls = [
        ("the ranks skip the gradient all-reduce (DDP no_sync on every rank)", "ddp_skip"),
        ("each rank divides by its own scored tokens, then DDP averages", "ddp_local_norm"),
        ("loss not scaled by the world size (reduced gradient = mean of shares)", "ddp_no_scale"),
    ]
    claims = (
        ("ddp.one_update", "param", PARAM_BOUND, "trainable parameters after one AdamW update"),
        ("ddp.gradients", "grad", GRAD_BOUND, "all-reduced gradients the optimizer stepped on"),
    )
    for claim_id, prefix, bound, what in claims:
        agreement_claim(
            gate,
            runs,
            claim_id,
            f"DDP, {WORLD} processes over {backend}: the {what} equal one process's over the "
            f"union of the ranks' rows (one 4-row step, rows 0-1 on rank 0 and 2-3 on rank 1, "
            f"of different lengths), on every rank",
            ("ddp", prefix, bound),
            controls,
        )
    reference, ddp = tensors(runs, "reference"), tensors(runs, "ddp-rank0")
    gate.note(
        f"One update (LoRA r4 on all 7 projections, lr 1e-2, AdamW eps 1, no clipping): "
        f"largest reference gradient {largest(runs, 'grad'):.4g}, largest parameter change "
        f"{update_size(runs):.4g}; step loss {float(reference['loss']):.9f} in one process, "
        f"{float(ddp['loss']):.9f} summed over {WORLD} ranks. AdamW's first update with its "
        "default eps 1e-8 is lr*sign(g), which a wrong gradient scale (the world-size "
        "control) would not change; eps 1 makes the update follow the gradient."
    )
    gate.note(
        "A single rank cannot skip the all-reduce alone: the other rank then waits in the "
        "collective until the timeout. The skip control therefore skips it on every rank; "
        "each rank then steps on its own half, and both ranks are compared."
    )
    gate.note(_BOUNDS_NOTE)


def test_ddp_composes_with_streaming(gate, runs):
    _declare(gate, runs)
    agreement_claim(
        gate,
        runs,
        "ddp.stream.one_update",
        f"DDP over a layer-streamed model (RAM tier, 2 slots; each of {WORLD} ranks streams "
        "its own base): the trainable parameters after one update equal one resident "
        "process's over the union of the rows, on every rank",
        ("stream", "param", PARAM_BOUND),
        [("the ranks skip the gradient all-reduce", "stream_skip")],
        code=(*IMPLEMENTATION, "assay.stream.engine"),
    )
    gate.note(
        "DDP wraps the streamed model itself: its reducer hooks the resident adapter "
        "parameters, whose gradients the stream engine's recomputing backward returns; frozen "
        "base tensors (store views) are registered as ignored, so they are neither broadcast "
        f"nor reduced. Gradient max abs vs the reference: "
        f"{over_ranks(runs, 'stream', 'grad'):.3g}."
    )


def test_fsdp_holds_one_share_of_the_base_per_rank(gate, runs):
    _declare(gate, runs)
    ranks, single = runs["ranks"], runs["single"]
    full = single["reference.full_base_bytes"]  # a plain model, counted before any sharding
    counted = {r["fsdp.full_base_bytes"] for r in ranks} | {single["fsdp_ws1.full_base_bytes"]}
    assert counted == {full}, f"global shapes disagree with the plain count: {counted} vs {full}"

    def worst(key: str, world: int, sources: list[dict]) -> int:
        return max(abs(s[key] - full // world) for s in sources)

    measured = max(
        worst("fsdp.local_base_bytes", WORLD, ranks),
        worst("fsdp.local_base_bytes_after_step", WORLD, ranks),
        worst("fsdp_ws1.local_base_bytes", 1, [single]),
    )
    claim = gate.claim(
        "fsdp.local_base_bytes",
        f"FSDP2 fully_shard: the frozen base bytes each rank holds (DTensor local shards, "
        f"read with to_local(), never divided) are total/{WORLD} on each of {WORLD} ranks, "
        "before and after a step, and the total in a world-size-1 group",
        kind="memory",
        threshold=Threshold("==", 0, tolerance=0.0),
        unit="bytes off total/world (worst)",
        code=[*IMPLEMENTATION, "assay.distributed.wrap"],
    )
    claim.measure(measured)
    claim.control(
        "strategy accepted but nothing sharded (the DDP-wrapped model, same probe)",
        worst("ddp.local_base_bytes", WORLD, ranks),
    )
    claim.control(
        "decoder layers sharded, embeddings and head left whole",
        worst("layers_only.local_base_bytes", WORLD, ranks),
    )
    per_rank = ", ".join(f"rank {r['rank']} {r['fsdp.local_base_bytes']:,}" for r in ranks)
    gate.note(
        f"Frozen base {full:,} bytes (float32). FSDP2 at world size {WORLD}: {per_rank}; at "
        f"world size 1: {single['fsdp_ws1.local_base_bytes']:,} (the control that catches a "
        f"probe which divides instead of measuring). DDP holds "
        f"{ranks[0]['ddp.local_base_bytes']:,} per rank; layers-only sharding "
        f"{ranks[0]['layers_only.local_base_bytes']:,}. Every dim 0 here is even, so the "
        "shards are exactly equal; FSDP2 pads an odd dim 0, which would make rank shares "
        "differ by a row."
    )


def test_fsdp_one_update_equals_one_process(gate, runs):
    _declare(gate, runs)
    agreement_claim(
        gate,
        runs,
        "fsdp.one_update",
        f"FSDP2, {WORLD} processes: the full trainable parameters (gathered) after one update "
        "equal one process's over the union of the rows",
        ("fsdp", "param", PARAM_BOUND),
        [
            (
                "gradient sync off (no reduce-scatter: the sharded parameters get no gradient)",
                "fsdp_skip",
            )
        ],
    )
    ws1 = max_diff(tensors(runs, "fsdp_ws1"), tensors(runs, "reference"), "param")
    gate.note(
        f"FSDP2 gradients vs the reference: {over_ranks(runs, 'fsdp', 'grad'):.3g} max abs; "
        f"FSDP2 in a group of one vs the plain process: {ws1:.3g} (parameters)."
    )


# float32 sums in another order. This was the matrix cells' float32 bound until 2026-12-07, when
# one Adam-amplified element moved theirs to 1e-4 (support.matrix.claims); this cell has held
# 1e-5 in every run, so its claim keeps it.
ORPO_BOUND = 1e-5


def test_fsdp_trains_a_preference_loss_like_one_process(gate, tmp_path):
    """A preference loss reads the LM head's weight itself (chunked log-probs), outside any
    module's forward: under FSDP2 it must read the gathered weight, and ORPO's NLL term must be
    one token mean over both ranks' chosen completions."""
    from support.matrix.claims import DISTRIBUTED_CONTROL
    from support.matrix.runs import build_workspace, largest_difference, reference_run, run_cell
    from support.plain_cell import plain_cell

    cell = plain_cell(loss="orpo", distributed="fsdp")
    space = build_workspace(tmp_path)
    reference = reference_run(cell, space, {})
    bound = ORPO_BOUND
    claim = gate.claim(
        "fsdp.preference_orpo",
        f"FSDP2, {WORLD} processes, ORPO (LoRA, tiny llama, 3 steps, one pair per rank a step, "
        "chosen completions of unequal length): every step's loss and every trainable element "
        f"within {bound:g} of one process over the union of the rows",
        kind="correctness",
        threshold=Threshold("<=", bound),
        unit="largest absolute difference",
        code=(
            *IMPLEMENTATION,
            "assay.train.objective",
            "support.matrix.runs",
            "support.plain_cell",
        ),
    )
    claim.measure(largest_difference(run_cell(cell, space, "fsdp-orpo"), reference))
    controls = {
        DISTRIBUTED_CONTROL[0]: "each rank divides ORPO's NLL by its own chosen tokens",
        "train.objective.orpo_nll_per_micro_batch": "ORPO's NLL a token mean per rank",
    }
    for index, (fault, what) in enumerate(controls.items()):
        outcome = run_cell(cell, space, f"fsdp-orpo-control-{index}", fault)
        claim.control(f"{fault} ({what})", largest_difference(outcome, reference))


def test_checkpoint_from_two_ranks_resumes_on_one(gate, runs):
    _declare(gate, runs)
    rank0, single = runs["ranks"][0], runs["single"]
    ws2 = rank0["resume.ws2_continuation"]

    def gap(losses: list[float]) -> float:
        if len(losses) != len(ws2):
            return float("inf")
        return max(abs(a - b) for a, b in zip(losses, ws2, strict=True))

    claim = gate.claim(
        "resume.ws2_to_ws1",
        f"`assay train --strategy fsdp` under torchrun with {WORLD} ranks stops at step 2; "
        "its checkpoint, resumed by a plain single-process `assay train --resume`, continues "
        f"steps 3-4 with the loss sequence of the same checkpoint resumed at {WORLD} ranks",
        kind="correctness",
        threshold=Threshold("<=", LOSS_BOUND, tolerance=0.1),
        unit="max abs (loss)",
        code=[*IMPLEMENTATION, "assay.train.checkpoint.state"],
    )
    claim.measure(gap(single["resume.ws1_continuation"]))
    claim.control("resume with a fresh optimizer state", gap(single["resume.fresh_optimizer"]))
    claim.control(
        "data position counted in one rank's rows (half the global position)",
        gap(single["resume.per_rank_cursor"]),
    )
    final_ws1 = load_file(str(Path(runs["spec"]["ws1_dir"]) / "step-000004/trainables.safetensors"))
    final_ws2 = load_file(str(Path(runs["spec"]["ws2_dir"]) / "step-000004/trainables.safetensors"))
    trainables = max(
        float((final_ws1[k].double() - final_ws2[k].double()).abs().max()) for k in final_ws1
    )

    def fmt(losses: list[float]) -> str:
        return ", ".join(f"{x:.9f}" for x in losses)

    gate.note(
        f"Losses: steps 1-2 at {WORLD} ranks {fmt(rank0['resume.ws2_first'])}; steps 3-4 at "
        f"{WORLD} ranks {fmt(ws2)}; at 1 rank {fmt(single['resume.ws1_continuation'])}; "
        f"fresh optimizer {fmt(single['resume.fresh_optimizer'])}; per-rank cursor "
        f"{fmt(single['resume.per_rank_cursor'])}. Final trainables, 1 rank vs {WORLD}: "
        f"{trainables:.3g} max abs. Each step is 4 micro-batches of 1 row; a rank runs 2 and "
        "synchronises only after the second. The config has no distributed section at world "
        "size 1; that section is outside the config fingerprint, so the resume is accepted."
    )
    seconds = runs["seconds"]
    gate.note(
        f"Wall time: the {WORLD}-rank torchrun job {seconds['ranks']:.1f} s, the "
        f"single-process side {seconds['single']:.1f} s (mostly process start-up)."
    )
    gate.not_tested("world sizes above 2", "this machine has 2 cores")
    gate.not_tested("more than one node", "one machine; torchrun's multi-node rendezvous unused")
    if runs["device"] != "cuda":
        gate.not_tested(
            "NCCL on CUDA",
            "no GPU here; harness/distributed_nccl.py runs this gate "
            "with --gate-device cuda on a box with 2+ GPUs",
        )
    gate.not_tested(
        "FSDP2 with bf16/NF4 storage or streaming",
        "refused by config validation: FSDP2 shards parameters, those keep the base in "
        "buffers or a host store",
    )
