"""`assay train` under torchrun with 2 gloo processes, against one plain process (slow: each
torchrun job pays two process start-ups)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from safetensors.torch import load_file

from assay_testing.text_run import save_text_run

pytestmark = pytest.mark.slow

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("e2e")
    base = {
        **save_text_run(path, seed=4),
        "adapter": {"method": "lora", "rank": 2, "alpha": 4},
        "optim": {"lr": 1e-2},
        "batch": {"micro_batch": 2, "grad_accum": 2},
        "steps": 3,
        "seed": 2,
    }
    (path / "base.yaml").write_text(yaml.safe_dump(base))
    return path


def _config(root: Path, name: str, **changes) -> Path:
    data = yaml.safe_load((root / "base.yaml").read_text())
    data.update(changes)
    data["output"] = {"dir": str(root / name)}
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _run(command: list[str], cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "ASSAY_CACHE": str(cache), "ASSAY_DIST_TIMEOUT_S": "60"}
    return subprocess.run(command, capture_output=True, text=True, timeout=240, env=env)


def _trainables(run_dir: Path) -> dict:
    latest = (run_dir / "latest").read_text().strip()
    return load_file(str(run_dir / latest / "trainables.safetensors"))


def _max_diff(a: dict, b: dict) -> float:
    assert set(a) == set(b)
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.fixture(scope="module")
def single(root) -> dict:
    from assay.settings.loader import load_train_config
    from assay.train.loop import Trainer

    summary = Trainer(load_train_config(_config(root, "single")), progress=False).train()
    return {"losses": summary["losses"], "trainables": _trainables(root / "single")}


@pytest.mark.parametrize(
    "stream",
    [{"tier": "disk", "buffers": 2}, {"tier": "ram", "buffers": 2, "recompute": False}],
    ids=["disk-recompute", "ram-keep-activations"],
)
def test_ddp_with_a_streamed_base_matches_one_process(root, single, stream):
    name = f"ddp-{stream['tier']}"
    config = _config(root, name, distributed={"strategy": "ddp"}, stream=stream)
    done = _run([*TORCHRUN, "-m", "assay.cli", "train", str(config), "--json"], root / "cache")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)  # exactly one JSON document: rank 0 alone prints
    assert (summary["world_size"], summary["strategy"], summary["backend"]) == (2, "ddp", "gloo")
    assert summary["losses"] == pytest.approx(single["losses"], abs=1e-6)
    assert _max_diff(_trainables(root / name), single["trainables"]) <= 1e-6
    lines = (root / name / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2, 3]  # written once, by rank 0
    # Logged tokens are the whole job's (summed over ranks), as one process would log them.
    assert sum(json.loads(line)["tokens"] for line in lines) == summary["tokens"]
    single_log = (root / "single" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["tokens"] for x in lines] == [json.loads(x)["tokens"] for x in single_log]


def test_fsdp_via_the_flag_prints_once_and_resumes_in_a_plain_process(root, single):
    config = _config(root, "fsdp")
    done = _run(
        [
            *TORCHRUN,
            "-m",
            "assay.cli",
            "train",
            str(config),
            "--strategy",
            "fsdp",
            "--stop-at",
            "2",
        ],
        root / "cache",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    printed = [line for line in done.stdout.splitlines() if line.startswith("trained")]
    assert printed == [printed[0]] and "on 2 ranks" in printed[0]
    from assay.cli import main

    assert main(["train", str(config), "--resume", str(root / "fsdp"), "--no-progress"]) == 0
    assert _max_diff(_trainables(root / "fsdp"), single["trainables"]) <= 1e-6


def test_rows_that_do_not_split_are_a_one_line_error_naming_the_rank(root):
    config = _config(root, "uneven", batch={"micro_batch": 1, "grad_accum": 1})
    done = _run([*TORCHRUN, "-m", "assay.cli", "train", str(config)], root / "cache")
    assert done.returncode != 0
    # Every rank refuses; torchrun stops the others once the first exits, so 1 or 2 lines.
    errors = [line for line in done.stderr.splitlines() if line.startswith("assay: error:")]
    assert 1 <= len(errors) <= 2 and all("do not split evenly over 2 ranks" in e for e in errors)
    assert {e.split("]")[0] for e in errors} <= {"assay: error: [rank 0", "assay: error: [rank 1"}
    # No worker traceback (torchrun's agent still prints its own ChildFailedError).
    assert "[rank0]: Traceback" not in done.stderr and "[rank1]: Traceback" not in done.stderr
