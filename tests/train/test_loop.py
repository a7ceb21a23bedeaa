"""The training loop: accumulation, exact resume, fingerprints, examples, CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from assay.cli import main
from assay.errors import AssayError
from assay.settings.loader import load_train_config, train_config_from_dict
from assay.train.loop import Trainer
from assay_testing import defects

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TEXT = [
    "The quick brown fox jumps over the lazy dog.",
    "Streaming keeps only two layers on the device at a time.",
    "NF4 stores four bits per weight and one scale per block of 64.",
    "Exact resume means the loss sequence is bitwise equal.",
    "A gate is a claim, a measurement and a control that can fail.",
    "Tokens per second are reported with the same-session ceiling.",
]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, smollm2_path) -> Path:
    """A tiny llama3 with SmolLM2's vocabulary, a text data file, and a base config."""
    from assay_testing.tiny import save_tiny

    root = tmp_path_factory.mktemp("run")
    model = save_tiny("llama3", root, seed=5, gguf=False, vocab_size=49152)["hf"]
    data = root / "text.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXT))
    config = {
        "model": str(model),
        "tokenizer": str(smollm2_path),
        "adapter": {"method": "lora", "rank": 4, "alpha": 8},
        "data": {"train": str(data), "eval": str(data), "format": "text", "seq_len": 64},
        "optim": {"lr": 1e-2, "schedule": "cosine", "warmup_steps": 1},
        "steps": 4,
        "seed": 3,
        "neftune_alpha": 5.0,
        "output": {"save_every": 2},
    }
    (root / "base.yaml").write_text(yaml.safe_dump(config))
    return root


def make_config(root: Path, name: str, **changes):
    data = yaml.safe_load((root / "base.yaml").read_text())
    for dotted, value in changes.items():
        section, _, key = dotted.rpartition(".")
        (data.setdefault(section, {}) if section else data)[key] = value
    data.setdefault("output", {})["dir"] = str(root / name)
    return train_config_from_dict(data, root / f"{name}.yaml")


def trainables(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.params.items()}


def test_accumulating_four_micro_batches_equals_a_batch_of_four(tiny_run):
    one = Trainer(
        make_config(
            tiny_run, "accum", **{"batch.micro_batch": 1, "batch.grad_accum": 4, "neftune_alpha": 0}
        ),
        progress=False,
    )
    four = Trainer(
        make_config(
            tiny_run, "batch", **{"batch.micro_batch": 4, "batch.grad_accum": 1, "neftune_alpha": 0}
        ),
        progress=False,
    )
    for trainer in (one, four):
        trainer.optimizer.step = lambda: None  # keep the gradients to compare them
        trainer.optimizer.zero_grad = lambda set_to_none=True: None
        trainer.train_step()
    for name, param in one.params.items():
        other = four.params[name].grad
        # fp32 summation order differs (4 sums of 1 row vs 1 sum of 4, padded): 1e-5 of scale.
        assert (param.grad - other).abs().max() <= 1e-5 * other.abs().max(), name
    assert any(p.grad.abs().sum() > 0 for p in one.params.values())


def test_resume_in_a_fresh_trainer_is_bitwise_exact(tiny_run):
    straight = Trainer(make_config(tiny_run, "straight"), progress=False)
    full = straight.train()
    first = Trainer(make_config(tiny_run, "split", steps=4), progress=False)
    for _ in range(2):
        first.train_step()
    first.save()
    resumed = Trainer(make_config(tiny_run, "split"), progress=False)
    assert resumed.resume(tiny_run / "split") == 2
    rest = resumed.train()
    assert rest["losses"] == full["losses"][2:]
    pairs = zip(trainables(straight).values(), trainables(resumed).values(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)


def test_resume_without_rng_diverges_under_neftune(tiny_run):
    straight = Trainer(make_config(tiny_run, "rng-straight"), progress=False)
    full = straight.train()
    partial = Trainer(make_config(tiny_run, "rng-split"), progress=False)
    for _ in range(2):
        partial.train_step()
    partial.save()
    resumed = Trainer(make_config(tiny_run, "rng-split"), progress=False)
    torch.manual_seed(12345)
    with defects.inject("train.checkpoint.directory.rng_not_restored"):
        resumed.resume(tiny_run / "rng-split")
    assert resumed.train()["losses"] != full["losses"][2:]


def test_resume_refuses_a_different_config_and_names_it(tiny_run):
    Trainer(make_config(tiny_run, "fp"), progress=False).train()
    other = Trainer(make_config(tiny_run, "fp", **{"optim.lr": 5e-3}), progress=False)
    with pytest.raises(AssayError, match="config"):
        other.resume(tiny_run / "fp")


def test_gradient_checkpointing_gives_the_same_gradients(tiny_run):
    plain = Trainer(make_config(tiny_run, "gc0", neftune_alpha=0), progress=False)
    ckpt = Trainer(
        make_config(tiny_run, "gc1", neftune_alpha=0, gradient_checkpointing=True), progress=False
    )
    assert ckpt.base.gradient_checkpointing
    assert plain.train_step().loss == ckpt.train_step().loss
    pairs = zip(trainables(plain).values(), trainables(ckpt).values(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)


def test_cli_train_and_eval(tiny_run, capsys):
    config = tiny_run / "cli.yaml"
    data = yaml.safe_load((tiny_run / "base.yaml").read_text())
    data["output"]["dir"] = str(tiny_run / "cli-run")
    config.write_text(yaml.safe_dump(data))
    assert main(["train", str(config), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["steps"] == 4 and len(summary["losses"]) == 4
    assert summary["eval_loss"] > 0
    metrics = (tiny_run / "cli-run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in metrics] == [1, 2, 3, 4]
    assert main(["eval", str(config), "--checkpoint", str(tiny_run / "cli-run"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["eval_loss"] == pytest.approx(
        summary["eval_loss"], rel=1e-6
    )


def test_cli_train_bad_config_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: m\ndata: {train: d}\nsteps: 1\noptim: {lrr: 1}\n")
    assert main(["train", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "optim.lrr" in err and "'lr'" in err


@pytest.mark.slow
@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_example_config_runs(example, tmp_path, request):
    from assay.settings.yaml_reader import read_yaml

    source = EXAMPLES / example
    data = read_yaml(source)  # reads 1e-4 as a number, as load_train_config does
    if data["model"] == "smollm2-hf":  # the folder the README writes first, written here once
        data["model"] = str(request.getfixturevalue("smollm2_hf_folder"))
    data["steps"] = min(int(data["steps"]), 2)
    data.setdefault("output", {})["dir"] = str(tmp_path / "run")
    data["output"]["save_every"] = 1
    if data.get("optim", {}).get("warmup_steps", 0) > data["steps"]:
        data["optim"]["warmup_steps"] = data["steps"]
    config = train_config_from_dict(data, source)
    assert Path(load_train_config(source).model).name == Path(config.model).name
    summary = Trainer(config, progress=False).train()
    assert summary["steps"] == data["steps"]
    assert all(torch.isfinite(torch.tensor(summary["losses"])))
    shutil.rmtree(tmp_path / "run")


def test_cli_export_merged_and_peft(tiny_run, capsys):
    import assay

    run_dir = tiny_run / "export-run"
    Trainer(make_config(tiny_run, "export-run"), progress=False).train()
    assert (run_dir / "config.yaml").is_file()
    assert (
        main(["export", str(run_dir), "--format", "gguf", "--out", str(tiny_run / "merged.gguf")])
        == 0
    )
    assert (
        main(["export", str(run_dir), "--format", "peft", "--out", str(tiny_run / "adapter")]) == 0
    )
    assert (tiny_run / "adapter" / "adapter_model.safetensors").is_file()
    trained = Trainer(make_config(tiny_run, "export-run"), progress=False)
    trained.resume(run_dir)
    trained.neftune.enabled = False
    ids = torch.randint(0, 49152, (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = trained.model(ids)
        merged = assay.load(tiny_run / "merged.gguf")(ids)
    assert (merged - expected).abs().max() <= 1e-4
