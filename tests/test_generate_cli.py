"""``assay generate``: a model with a tokenizer, a config, a run's checkpoint, and bad input."""

from __future__ import annotations

import json

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
    from assay.train.checkpoint import load_checkpoint

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
