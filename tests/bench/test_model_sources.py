"""The step benchmark's model: a GGUF file, an HF safetensors folder, or a random model of a
published shape (``harness/bench_step.py --shape NAME [--layers N]``)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from assay_bench.step import step_loss
from assay_bench.subjects import build_subjects

HARNESS = Path(__file__).parents[2] / "harness" / "bench_step.py"


def first_losses(path: Path, names: list[str]) -> dict[str, torch.Tensor]:
    subjects = build_subjects(names, path, assay_loss="ce")
    ids = torch.randint(
        0, subjects[names[0]].config.vocab_size, (1, 8), generator=torch.Generator().manual_seed(0)
    )
    with torch.no_grad():
        return {n: step_loss(s.model, ids, s.loss, s.forward) for n, s in subjects.items()}


def test_subjects_build_from_an_hf_folder(tiny_models):
    """assay and its peers read the folder's weights: assay's loss is the one it has from the
    GGUF of the same weights, and transformers + PEFT (B = 0 at the start) agrees with it."""
    folder = first_losses(tiny_models["llama3"]["hf"], ["assay", "peft", "bnb-nf4"])
    gguf = first_losses(tiny_models["llama3"]["gguf"], ["assay"])
    assert torch.equal(folder["assay"], gguf["assay"])
    assert torch.allclose(folder["peft"], folder["assay"], rtol=1e-5)
    # NF4 of the same weights: near, not equal
    assert folder["bnb-nf4"] != folder["peft"]
    assert torch.allclose(folder["bnb-nf4"], folder["peft"], rtol=0.05)


@pytest.fixture
def harness(monkeypatch):
    """bench_step's ``main`` with the benchmark and the model writer replaced by recorders."""
    spec = importlib.util.spec_from_file_location("bench_step", HARNESS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    calls: dict[str, object] = {}

    def fake_random_model(name, layers=None):
        calls["random_model"] = (name, layers)
        return Path("/cache") / f"{name}-L{layers}"

    def fake_benchmark(path, names, **kwargs):
        calls["benchmark"] = (path, list(names), kwargs["seqs"])
        return {"peak_rss": {}}, {}

    monkeypatch.setattr("assay_testing.scale_models.random_model", fake_random_model)
    monkeypatch.setattr(module, "run_benchmark", fake_benchmark)
    return module.main, calls


def test_the_harness_runs_on_a_random_model_of_a_named_shape(harness, capsys):
    main, calls = harness
    argv = ["--shape", "tinyllama-1.1b", "--layers", "1", "--seq", "32", "--json"]
    assert main([*argv, "--subjects", "assay", "peft"]) == 0
    assert calls["random_model"] == ("tinyllama-1.1b", 1)
    path = Path("/cache/tinyllama-1.1b-L1")
    assert calls["benchmark"] == (path, ["assay", "peft"], [32])
    result = json.loads(capsys.readouterr().out)
    assert result["model"] == {"path": str(path), "shape": "tinyllama-1.1b", "layers": 1}


def test_the_harness_takes_an_hf_folder_as_model(harness, tiny_models, capsys):
    main, calls = harness
    folder = tiny_models["llama3"]["hf"]
    assert main(["--model", str(folder), "--json"]) == 0
    assert calls["benchmark"][0] == folder and "random_model" not in calls
    assert json.loads(capsys.readouterr().out)["model"]["shape"] is None


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--layers", "2"], "--layers needs --shape"),
        (["--shape", "tinyllama-1.1b", "--layers", "0"], "--layers needs --shape"),
        (["--shape", "tinyllama"], "invalid choice"),
        (["--shape", "tinyllama-1.1b", "--model", "x.gguf"], "not allowed with"),
        (["--model", "no/such/dir"], "expected a GGUF file or an HF safetensors folder"),
    ],
)
def test_the_harness_refuses_bad_model_options(harness, capsys, argv, says):
    main, calls = harness
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2 and says in capsys.readouterr().err
    assert not calls


def test_the_harness_leaves_the_slow_opt_in_subjects_out_by_default(harness, capsys):
    main, calls = harness
    assert main(["--seq", "32", "--json"]) == 0
    chosen = calls["benchmark"][1]
    assert "assay" in chosen and "peft" in chosen
    assert not [name for name in chosen if name.endswith(("-compiled", "-bf16"))]
