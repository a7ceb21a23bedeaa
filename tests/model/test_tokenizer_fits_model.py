"""A tokenizer whose vocabulary is larger than the model's embedding (a tiny model with a
bigger tokenizer) is refused at load, naming both files and both sizes, in ``train`` and
``generate``; before, the first forward raised IndexError."""

from __future__ import annotations

import json

import pytest
import yaml

from assay.cli import main


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    from assay_testing.byte_tokenizer import save_byte_tokenizer
    from assay_testing.tiny import save_tiny

    root = tmp_path_factory.mktemp("vocab")
    model = save_tiny("llama3", root, seed=0, gguf=False, vocab_size=200)["hf"]
    tokenizer = save_byte_tokenizer(root / "bytes.gguf")
    (root / "train.jsonl").write_text(json.dumps({"text": "hello there"}) + "\n")
    return root, model, tokenizer


def _refused(capsys, argv, tokenizer) -> None:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert str(tokenizer) in err and "more than the 200 of the model" in err


def test_train_refuses_a_tokenizer_larger_than_the_model(small_model, capsys):
    root, model, tokenizer = small_model
    config = root / "c.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "model": str(model),
                "tokenizer": str(tokenizer),
                "steps": 1,
                "data": {"train": str(root / "train.jsonl"), "format": "text", "seq_len": 16},
                "output": {"dir": str(root / "run")},
            }
        )
    )
    _refused(capsys, ["train", str(config), "--no-progress"], tokenizer)
    assert not (root / "run").exists()


def test_generate_refuses_a_tokenizer_larger_than_the_model(small_model, capsys):
    _, model, tokenizer = small_model
    argv = ["generate", str(model), "--tokenizer", str(tokenizer), "--prompt", "hi"]
    _refused(capsys, argv, tokenizer)
