"""The facts a GPU run quotes, on whatever device is here."""

from __future__ import annotations

import torch

from assay_bench.device import gemm_ceiling_tflops, sm_clock_mhz


def test_gemm_ceiling_is_a_positive_rate_on_cpu():
    assert gemm_ceiling_tflops("cpu", size=64, dtype=torch.float32, repeats=2) > 0


def test_sm_clock_names_its_source():
    clock = sm_clock_mhz()
    assert clock["source"] in (None, "nvml", "nvidia-smi")
    if clock["source"] is not None:
        assert clock["sm_mhz"] > 0
