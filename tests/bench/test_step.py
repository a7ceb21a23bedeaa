"""Benchmark arithmetic and one smoke run on a tiny decoder: shapes and bookkeeping, no speeds."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from assay.adapters import attach
from assay.model import Decoder
from assay_bench.profile import CATEGORIES, profile_step
from assay_bench.report import comparisons, format_table, plan, run_benchmark
from assay_bench.step import (
    Subject,
    max_abs_diff,
    median_step,
    paired_ratios,
    ratio,
    step_loss,
    subject_result,
    train_step,
    trainable_grads,
)
from assay_testing.tiny import llama_config

TINY = llama_config()


def tiny_lora(seed: int = 0):
    torch.manual_seed(seed)
    model = Decoder(TINY).requires_grad_(False)
    return attach(model, "lora", rank=2, alpha=4, targets="attention")


def subject(name: str, model, *, checkpointing: bool = False) -> Subject:
    params = [p for p in model.parameters() if p.requires_grad]

    def setup() -> None:
        model.gradient_checkpointing = checkpointing

    return Subject(
        name=name,
        description=name,
        model=model,
        optimizer=torch.optim.AdamW(params, lr=1e-3, fused=True),
        config=TINY,
        lora_rank=2,
        recompute=checkpointing,
        setup=setup,
    )


def test_median_needs_five_steps_and_ratio_arithmetic():
    assert median_step([3.0, 1.0, 2.0, 5.0, 4.0]) == 3.0
    with pytest.raises(ValueError, match="at least 5"):
        median_step([1.0, 2.0, 3.0, 4.0])
    assert ratio(3.0, 2.0) == 1.5
    with pytest.raises(ValueError):
        ratio(1.0, 0.0)


def test_comparisons_pair_rounds():
    times = {
        ("assay", 8): [1.0, 2.0, 1.0, 1.0, 1.0],
        ("peft", 8): [1.5, 3.0, 1.5, 1.5, 3.0],  # round 2 slow for both: its ratio is still 1.5
        ("stream-ram", 8): [1.1, 2.2, 1.1, 1.1, 1.1],
        ("assay", 16): [2.0] * 5,
    }
    out = comparisons(times)
    speedup = out["resident_over_peft@8"]  # tokens/s ratio: peft time / assay time
    assert speedup["samples"] == pytest.approx([1.5, 1.5, 1.5, 1.5, 3.0])
    assert speedup["value"] == pytest.approx(1.5)
    assert speedup["of_medians"] == pytest.approx(1.5)
    assert out["stream_over_resident@8"]["value"] == pytest.approx(1.1)  # step-time ratio
    assert "resident_over_peft@16" not in out  # peft did not run at 16
    with pytest.raises(ValueError, match="unpaired"):
        paired_ratios([1.0, 2.0], [1.0])


def test_plan_sweeps_only_the_named_subjects():
    pairs = plan(["assay", "peft", "bnb-nf4"], [256, 512])  # the order given is kept
    assert pairs == [("assay", 256), ("peft", 256), ("bnb-nf4", 256), ("assay", 512), ("peft", 512)]
    assert len(plan(["assay", "bnb-nf4"], [256, 512], all_seq=True)) == 4


def test_subject_result_arithmetic():
    fake = SimpleNamespace(
        flops=lambda batch, seq: SimpleNamespace(model=4e9, to_dict=lambda: {"model": 4e9})
    )
    steps = [2.0, 2.0, 1.0, 4.0, 2.0]
    ceilings = [4.0, 4.0, 2.0, 4.0, 1.0]  # GFLOP/s of the same rounds
    r = subject_result(fake, 256, 1, steps, ceilings)
    assert r["median_s"] == 2.0
    assert r["tokens_per_s"] == 128.0
    assert r["gflops"] == pytest.approx(2.0)
    # per round: 2/4, 2/4, 4/2, 1/4, 2/1 -> median 0.5; medians alone: 2 / 4
    assert r["ceiling_fraction_samples"] == pytest.approx([0.5, 0.5, 2.0, 0.25, 2.0])
    assert r["ceiling_fraction"] == pytest.approx(0.5)
    assert r["ceiling_fraction_of_medians"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="ceiling samples"):
        subject_result(fake, 256, 1, steps, ceilings[:4])


def test_one_step_profile_and_exact_grads_on_a_tiny_model():
    model = tiny_lora()
    s = subject("assay", model)
    ids = torch.randint(0, TINY.vocab_size, (1, 16), generator=torch.Generator().manual_seed(0))
    seconds, loss = train_step(s, ids)
    assert seconds > 0 and loss == loss
    assert all(p.grad is None for p in model.parameters())  # zero_grad(set_to_none=True) ran
    prof = profile_step(lambda: train_step(s, ids))
    assert tuple(prof["categories"]) == CATEGORIES
    assert prof["categories"]["matmul"]["s"] > 0
    assert prof["categories"]["optimizer"]["s"] > 0
    assert prof["attention_ops"]  # SDPA ran
    total = sum(v["s"] for v in prof["categories"].values())
    assert total >= prof["step_s"] * 0.999
    a, b = trainable_grads(model, ids), trainable_grads(model, ids)
    assert max_abs_diff(a, b) == 0.0
    model.gradient_checkpointing = True
    assert max_abs_diff(a, trainable_grads(model, ids)) == 0.0  # recompute is op for op


def test_run_benchmark_assembles_a_result():
    shared = tiny_lora(0)
    subjects = {
        "assay": subject("assay", shared),
        "assay+ckpt": subject("assay+ckpt", shared, checkpointing=True),
        "peft": subject("peft", tiny_lora(1)),  # a stand-in: only the bookkeeping is tested
    }
    result, _ = run_benchmark(
        Path("unused.gguf"),
        list(subjects),
        seqs=(8, 16),
        steps=5,
        warmup=1,
        profile=["assay", "peft"],
        ceiling_n=64,
        subjects=subjects,
    )
    json.dumps(result)
    assert set(result["subjects"]) == {"assay", "assay+ckpt", "peft"}
    assert len(result["subjects"]["assay"]["seq"]["16"]["samples_s"]) == 5
    assert len(result["ceiling"]["samples_gflops"]) == 5
    assert {"resident_over_peft@8", "resident_over_peft@16", "ckpt_over_peft@16"} <= set(
        result["ratios"]
    )
    assert result["amdahl"]["peft"]["bound"] > 0
    ckpt = result["subjects"]["assay+ckpt"]["seq"]["8"]["flops"]
    assert (
        ckpt["executed"]
        > ckpt["model"]
        == result["subjects"]["assay"]["seq"]["8"]["flops"]["model"]
    )
    assert "Amdahl bound over peft" in format_table(result)
    with pytest.raises(ValueError, match="at least 5"):
        run_benchmark(Path("unused.gguf"), ["assay"], steps=4, subjects=subjects)


def test_harness_refuses_fewer_than_five_steps(capsys):
    path = Path(__file__).parents[2] / "harness" / "bench_step.py"
    spec = importlib.util.spec_from_file_location("bench_step", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit) as exit_info:
        module.main(["--steps", "3"])
    assert exit_info.value.code == 2
    assert "at least 5" in capsys.readouterr().err


def test_chunked_ce_matches_ce_and_runs_the_same_gemms():
    model = tiny_lora()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("lora_B"):
                param.normal_(0.0, 0.1)  # so lora_A gradients are not zero
    ids = torch.randint(0, TINY.vocab_size, (1, 16), generator=torch.Generator().manual_seed(2))
    ce, chunked = step_loss(model, ids, "ce"), step_loss(model, ids, "chunked_ce")
    assert torch.allclose(ce, chunked, rtol=1e-5)
    a = trainable_grads(model, ids, loss="ce")
    b = trainable_grads(model, ids, loss="chunked_ce")
    assert all(torch.allclose(a[k], b[k], rtol=1e-4, atol=1e-7) for k in a)
    profiles = {
        kind: profile_step(lambda k=kind: step_loss(model, ids, k).backward())
        for kind in ("ce", "chunked_ce")
    }
    # the same GEMMs, except that chunked CE skips the head for the unscored last position
    # (forward logits and backward hidden-state gradient of one row)
    last_row = 2 * (2 * TINY.hidden_size * TINY.vocab_size)
    assert profiles["chunked_ce"]["gemm_flops"] == profiles["ce"]["gemm_flops"] - last_row
    assert all(p["categories"]["cross_entropy"]["s"] > 0 for p in profiles.values())
    with pytest.raises(ValueError, match="not one of"):
        step_loss(model, ids, "focal")
