"""The step benchmark's compiled and bf16 subjects, its reach, and its whole-run timer: each
subject computes what its eager fp32 twin does (within bf16 rounding for bf16), the reach is
the profiled GEMMs and attention of one step, and a 100-step run's child reports its total."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from assay_bench import total_run
from assay_bench.report import reach
from assay_bench.subjects import build_subjects


def first_losses(path: Path, names: list[str]) -> dict[str, float]:
    subjects = build_subjects(names, path)
    ids = torch.randint(
        0, subjects[names[0]].config.vocab_size, (1, 8), generator=torch.Generator().manual_seed(0)
    )
    with torch.no_grad():
        return {n: float(s.loss_of(ids)) for n, s in subjects.items()}


def test_bf16_subjects_autocast_and_stay_near_fp32(tiny_models):
    losses = first_losses(tiny_models["llama3"]["hf"], ["assay", "assay-bf16", "peft", "peft-bf16"])
    for bf16, fp32 in (("assay-bf16", "assay"), ("peft-bf16", "peft")):
        assert losses[bf16] != losses[fp32]  # autocast took effect
        assert losses[bf16] == pytest.approx(losses[fp32], rel=2e-2)


@pytest.mark.slow
def test_compiled_subjects_compute_what_eager_does(tiny_models):
    losses = first_losses(
        tiny_models["llama3"]["hf"], ["assay", "assay-compiled", "peft", "peft-compiled"]
    )
    assert losses["assay-compiled"] == pytest.approx(losses["assay"], rel=1e-5)
    assert losses["peft-compiled"] == pytest.approx(losses["peft"], rel=1e-5)


def test_reach_is_replayed_gemms_plus_attention_over_each_median(monkeypatch):
    monkeypatch.setattr("assay_bench.report.replay_seconds", lambda calls: 0.5)
    profiles = {"assay": {"gemm_calls": [], "categories": {"attention": {"s": 0.1}}}}
    times = {("assay", 8): [1.2] * 5, ("peft", 8): [2.4] * 5, ("peft", 16): [9.0] * 5}
    found = reach(profiles, times, 8)
    assert found["reach_s"] == pytest.approx(0.6)
    assert found["fraction"] == pytest.approx({"assay": 0.5, "peft": 0.25})
    assert reach({}, times, 8) == {}  # nothing profiled: no reach


def test_a_whole_run_reports_its_total_and_steady_step(tiny_models):
    out = total_run.measure("assay", 8, tiny_models["llama3"]["gguf"], steps=4)
    assert out["total_s"] >= sum(out["first_steps_s"]) > 0
    assert out["steady_step_s"] > 0 and len(out["first_steps_s"]) == 3


def test_a_failing_whole_run_names_its_subject(monkeypatch, tmp_path):
    seen = {}

    def failed(argv, **kwargs):
        seen["env"] = kwargs["env"]
        return subprocess.CompletedProcess(argv, 1, "", "ValueError: unknown subject(s)")

    monkeypatch.setattr("assay_bench.child.subprocess.run", failed)
    with pytest.raises(RuntimeError, match="100-step run of nobody failed"):
        total_run.in_subprocess("nobody", 8, tmp_path / "model.gguf")
    assert "TORCHINDUCTOR_CACHE_DIR" in seen["env"]  # a cold compile cache of its own
