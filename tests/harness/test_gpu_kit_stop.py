"""harness/gpu_qualify.sh on a box that cannot run the kit: the preflight stops it in its first
minute with one line, and what it has still comes home in the four files."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from fake_kit import MACHINERY_LIMIT, ROOT, harness_module


@pytest.mark.slow
def test_a_box_without_cuda_stops_at_preflight_and_still_packs(wheels: Path, tmp_path: Path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the preflight would pass")
    import assay
    from assay.model.gguf_export import write_gguf
    from assay_testing.tiny import llama_config

    model = assay.model.Decoder(llama_config())
    tensors = {n: p.detach() for n, p in model.state_dict().items()}
    gguf = write_gguf(tmp_path / "tiny.gguf", model.config, tensors)
    kit, run, out = tmp_path / "kit", tmp_path / "run", tmp_path / "out"
    bundle = harness_module("gpu_bundle")
    args = ["--out", str(kit), "--wheels-from", str(wheels), "--no-assay-wheel", *MACHINERY_LIMIT]
    assert bundle.main([*args, "--skeleton-from", str(gguf), "--no-fingerprint"]) == 0
    proc = subprocess.run(
        ["bash", "harness/gpu_qualify.sh", "--kit", str(kit), "--run", str(run), "--out", str(out)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    failed = [line for line in proc.stdout.splitlines() if "preflight FAILED" in line]
    assert len(failed) == 1 and "sees no CUDA device" in failed[0], proc.stdout[-3000:]
    assert "gate cuda: start" not in proc.stdout  # no gate spent the lease
    assert harness_module("gpu_pack").out_problems(out) == []
    assert len(list(out.iterdir())) == 4
    summary = (out / "summary.txt").read_text()
    assert "kit: stopped: preflight failed" in summary
