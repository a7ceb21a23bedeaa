"""``assay generate``: a model with a tokenizer, a config, a run's checkpoint, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from assay.cli import main
from assay_testing.text_run import save_text_run


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("gen")
    config = {
        **save_text_run(root, seed=3),
        "adapter": {"method": "lora", "rank": 4, "alpha": 8},
        "optim": {"lr": 0.05},
        "steps": 3,
        "output": {"dir": str(root / "run"), "save_every": 3},
    }
    path = root / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["train", str(path), "--json", "--no-progress"]) == 0
    return root, config, path


def _generate(capsys, *argv: str) -> list[dict]:
    capsys.readouterr()
    assert main(["generate", *argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    return out if isinstance(out, list) else [out]


def test_a_run_generates_what_its_restored_model_does(workspace, capsys):
    from assay.model.generate import generate
    from assay.settings.loader import load_train_config
    from assay.train.build import build_model, build_tokenizer, trainable_parameters
    from assay.train.checkpoint.directory import load_checkpoint

    root, _, path = workspace
    rows = _generate(
        capsys,
        str(path),
        "--checkpoint",
        str(root / "run"),
        "--prompt",
        "Hi",
        "--prompt",
        "Rank zero",
        "--max-new-tokens",
        "6",
    )
    config = load_train_config(path)
    _, base = build_model(config)
    load_checkpoint(root / "run").restore(trainable_parameters(base), rng=False)
    tok = build_tokenizer(config)
    prompts = [tok.encode(t, add_special_tokens=True) for t in ("Hi", "Rank zero")]
    want = generate(base, prompts, max_new_tokens=6, eos_id=tok.eos_id, pad_id=tok.eos_id or 0)
    assert [r["tokens"] for r in rows] == [list(g.tokens) for g in want]
    assert [r["stop"] for r in rows] == [g.stop for g in want]
    untrained = _generate(
        capsys, str(path), "--prompt", "Hi", "--prompt", "Rank zero", "--max-new-tokens", "6"
    )
    assert [r["tokens"] for r in untrained] != [r["tokens"] for r in rows]


def test_a_model_directory_with_a_tokenizer(workspace, capsys):
    _, config, _ = workspace
    rows = _generate(
        capsys,
        config["model"],
        "--tokenizer",
        config["tokenizer"],
        "--prompt",
        "Hi",
        "--max-new-tokens",
        "3",
    )
    assert len(rows[0]["tokens"]) <= 3 and rows[0]["prompt"] == "Hi"


@pytest.fixture(scope="module")
def exported(workspace, tmp_path_factory):
    root, _, _ = workspace
    out = tmp_path_factory.mktemp("export") / "adapter"
    assert main(["export", str(root / "run"), "--format", "peft", "--out", str(out)]) == 0
    return out


def test_an_exported_adapter_generates_what_transformers_and_peft_generate(
    workspace, exported, capsys
):
    """Issue 54: the folder `assay export --format peft` writes, given to --adapter, gives the
    tokens transformers + PEFT greedily generate from the same folder on the same base; the
    control: the base alone generates otherwise."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from assay.model.tokenizer import load_tokenizer

    _, config, _ = workspace
    argv = [config["model"], "--tokenizer", config["tokenizer"], "--max-new-tokens", "8"]
    rows = _generate(capsys, *argv, "--adapter", str(exported), "--prompt", "Hi there")
    tok = load_tokenizer(config["tokenizer"])
    ids = torch.tensor([tok.encode("Hi there", add_special_tokens=True)])
    base = AutoModelForCausalLM.from_pretrained(config["model"], dtype=torch.float32)
    peft = PeftModel.from_pretrained(base, str(exported))
    assert json.loads((exported / "adapter_config.json").read_text())[
        "base_model_name_or_path"
    ] == str(Path(config["model"]).resolve())
    with torch.no_grad():
        out = peft.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=8,
            do_sample=False,
            eos_token_id=tok.eos_id,
            pad_token_id=tok.eos_id,
        )
    new = out[0, ids.shape[1] :].tolist()
    if tok.eos_id in new:  # assay's tokens end before the eos it stopped at
        new = new[: new.index(tok.eos_id)]
    assert rows[0]["tokens"] == new
    plain = _generate(capsys, *argv, "--prompt", "Hi there")
    assert plain[0]["tokens"] != rows[0]["tokens"]


def test_an_adapter_where_a_model_or_a_run_goes_is_named(workspace, exported, capsys):
    root, config, path = workspace
    cases = [
        ([str(exported), "--prompt", "x"], "an adapter folder, not a model"),
        (
            [config["model"], "--checkpoint", str(exported), "--prompt", "x"],
            f"--checkpoint {exported}: an exported adapter, not a run",
        ),
        (
            [config["model"], "--adapter", str(root), "--prompt", "x"],
            f"--adapter {root}: not an adapter folder (no adapter_config.json",
        ),
        (
            [str(path), "--adapter", str(exported), "--prompt", "x"],
            "needs a model file or folder as MODEL_OR_CONFIG, not a train config",
        ),
        (
            [str(path), "--checkpoint", str(root / "run"), "--adapter", str(exported)],
            "--adapter and --checkpoint: give one",
        ),
    ]
    for argv, message in cases:
        capsys.readouterr()
        if "--prompt" not in argv:
            argv = [*argv, "--prompt", "x"]
        assert main(["generate", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, (argv, err)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["/no/such/model", "--prompt", "x"], "no such model"),
        (["MODEL", "--prompt", "x"], "MODEL: no tokenizer.json in the folder"),
        (["MODEL", "--tokenizer", "MODEL", "--prompt", "x"], "MODEL: no tokenizer.json"),
        (["MODEL", "--prompt", "x", "--max-new-tokens", "-1"], "expected 0 or more"),
        (["MODEL", "--prompt", ""], "a prompt is empty"),
        (
            ["MODEL", "--tokenizer", "TOK", "--prompt", "x", "--max-new-tokens", "100000"],
            "--max-new-tokens 100000: the longest prompt",
        ),
        (["MODEL", "--tokenizer", "TOK", "--prompt", "x", "--prompt", "LONG"], "--prompt 2: "),
    ],
)
def test_bad_input_is_one_line_and_exit_2(workspace, capsys, argv, message):
    _, config, _ = workspace
    names = {"MODEL": config["model"], "TOK": config["tokenizer"], "LONG": "word " * 20000}
    argv = [names.get(a, a) for a in argv]
    message = message.replace("MODEL", config["model"])
    capsys.readouterr()
    assert main(["generate", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_generation_config_json_sets_the_stops_and_the_length(workspace, tmp_path, capsys):
    """A folder's generation_config.json: every eos_token_id of its list ends a continuation,
    and its max_new_tokens is the default length (an explicit --max-new-tokens wins); the
    control is the same folder without the file, which runs on past that token."""
    import shutil

    _, config, _ = workspace
    model = tmp_path / "model"
    shutil.copytree(config["model"], model)
    argv = [str(model), "--tokenizer", config["tokenizer"], "--prompt", "Hi there"]
    free = _generate(capsys, *argv, "--max-new-tokens", "8")[0]["tokens"]
    assert len(free) == 8 and free[2] not in free[:2]
    (model / "generation_config.json").write_text(
        json.dumps({"eos_token_id": [999_999, free[2]], "max_new_tokens": 5, "do_sample": True})
    )
    stopped = _generate(capsys, *argv, "--max-new-tokens", "8")[0]
    assert stopped["tokens"] == free[:2] and stopped["stop"] == "eos"  # ends before the eos
    (model / "generation_config.json").write_text(json.dumps({"max_new_tokens": 5}))
    assert _generate(capsys, *argv)[0]["tokens"] == free[:5]
    assert len(_generate(capsys, *argv, "--max-new-tokens", "7")[0]["tokens"]) == 7
    (model / "generation_config.json").write_text(json.dumps({"eos_token_id": "two"}))
    capsys.readouterr()
    assert main(["generate", *argv]) == 2
    err = capsys.readouterr().err
    assert "generation_config.json: eos_token_id: expected a token id" in err
    assert err.count("\n") == 1
