"""`assay info` on tiny models and on the bundled SmolLM2."""

from __future__ import annotations

import json

import pytest

from assay.cli import main
from assay.errors import AssayError


def test_info_json_describes_a_tiny_gguf(tiny_models, capsys):
    assert main(["info", str(tiny_models["llama3"]["gguf"]), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["format"] == "gguf"
    assert info["config"]["architecture"] == "llama"
    assert info["config"]["rope_freq_divisors"]
    assert info["tensor_types"]["F32"] > 0
    assert len(info["fingerprint"]["canonical_sha256"]) == 64
    assert info["tokenizer"] is None


def test_info_text_for_a_safetensors_dir(tiny_models, capsys):
    assert main(["info", str(tiny_models["qwen2"]["hf"])]) == 0
    out = capsys.readouterr().out
    assert "qwen2" in out and "qkv bias True" in out and "parameters" in out


def test_info_bad_storage_is_a_usage_error(tiny_models):
    with pytest.raises(SystemExit) as info:
        main(["info", str(tiny_models["qwen2"]["hf"]), "--storage", "int3"])
    assert info.value.code == 2


@pytest.mark.slow
def test_info_on_smollm2(smollm2_path, capsys):
    assert main(["info", str(smollm2_path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["fingerprint"]["parameter_count"] == 134_515_008
    assert info["fingerprint"]["decoded_fp32_bytes"] == 538_060_032
    assert info["tensor_types"] == {"Q8_0": 1, "Q4_1": 210, "F32": 61}
    assert info["tokenizer"]["vocab_size"] == 49_152
    assert main(["info", str(smollm2_path)]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("  tokenizer")]
    # a sentence, not the summary's dict (the control: the dict's text has its braces)
    assert line.split(None, 1)[1] == (
        "gpt2/smollm; vocab 49,152; 48,900 merges; special ids bos 1, eos 2, pad 2, unk 0; "
        "adds no bos or eos; chat template"
    )
    assert "{" in str(info["tokenizer"]) and "{" not in line


def _commands() -> list[str]:
    import argparse

    from assay.cli.dispatch import build_parser

    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return sorted(sub.choices)


@pytest.mark.parametrize("command", ["", *_commands()])
def test_a_usage_error_of_any_command_is_one_line(command, capsys, monkeypatch):
    """Rule: argparse's refusals are one line naming the command and where help is, like every
    other error; the usage block is for --help. Generated over the command table."""
    monkeypatch.setattr("assay.cli.dispatch.trainer_installed", lambda: True)
    argv = [command, "--no-such-option"] if command else []
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1, err
    # an unknown option is refused by the top parser (argparse's way), a missing one by the
    # command's; either way one line
    assert err.startswith(("assay: error: ", f"assay {command}: error: ")), err
    assert err.rstrip().endswith("--help)") and "usage:" not in err


@pytest.mark.parametrize(
    "error",
    [
        AssayError("bad\n  in line 3\r\nend"),
        OSError(5, "Input/output\nerror", "f.bin"),
    ],
)
def test_a_multi_line_message_from_anywhere_is_printed_on_one_line(error, capsys, monkeypatch):
    """Rule: whatever raised it, the CLI's error is one line (the exit point joins lines)."""

    def fails(_args):
        raise error

    monkeypatch.setattr("assay.cli.dispatch.trainer_installed", lambda: True)
    monkeypatch.setattr("assay.cli.info.run", fails)
    assert main(["info", "x.gguf"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("assay: error: "), err


def test_a_nul_byte_in_a_yaml_config_is_one_line(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_bytes(b"steps: 4\x00\n")
    assert main(["estimate", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(config) in err and "invalid YAML" in err, err


@pytest.mark.parametrize("command", ["train", "eval"])
@pytest.mark.parametrize(
    ("device", "says"),
    [
        ("bogus", "expected auto, cpu, cuda or cuda:N"),
        ("CPU", "expected auto, cpu, cuda or cuda:N"),
        ("meta", "expected auto, cpu, cuda or cuda:N"),
        ("cuda:x", "expected auto, cpu, cuda or cuda:N"),
        ("cuda:7", "--device cuda:7"),
    ],
)
def test_a_device_this_torch_cannot_use_is_one_line_before_loading(
    tiny_lora_config, capsys, monkeypatch, command, device, says
):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr("assay.train.loop.Trainer.__init__", _never_built)
    try:
        code = main([command, str(tiny_lora_config()), "--device", device])
    except SystemExit as exited:  # argparse's refusals
        code = exited.code
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and says in err and "Traceback" not in err, err


def _never_built(*_args, **_kwargs):
    raise AssertionError("the model was loaded before --device was checked")


@pytest.mark.parametrize(
    "argv",
    [
        ["export", "{folder}", "--format", "peft", "--out", "{out}"],
        ["generate", "{model}", "--checkpoint", "{folder}", "--prompt", "hi"],
    ],
    ids=["export", "generate"],
)
def test_a_checkpoint_argument_that_is_no_run_names_itself(argv, tmp_path, capsys):
    """A folder that is neither a run nor a checkpoint is named in the one-line refusal, never
    a config.yaml beside it that the user did not name (found by the issue-52 adversary)."""
    (tmp_path / "config.yaml").write_text("steps: 1\n")  # the parent's file, not the user's pick
    folder = tmp_path / "empty"
    folder.mkdir()
    model = tmp_path / "config.yaml"
    filled = [a.format(folder=folder, out=tmp_path / "out", model=model) for a in argv]
    assert main(filled) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{folder}: not a run folder" in err, err


@pytest.mark.parametrize(
    ("category", "shown"),
    [(UserWarning, "assay: warning: "), (FutureWarning, "assay: warning: FutureWarning: ")],
)
def test_a_warning_prints_as_one_line_without_a_source_line(
    tiny_models, capsys, monkeypatch, category, shown
):
    """Any warning a command raises, assay's or a library's, is one line on stderr (issue 54's
    attack: a PEFT folder's unverifiable base printed Python's two-line warning with a line of
    assay's source)."""
    import warnings

    import assay.cli.info

    def warns_then_runs(args):
        warnings.warn("first part\nsecond part", category, stacklevel=1)
        return 0

    monkeypatch.setattr(assay.cli.info, "run", warns_then_runs)
    assert main(["info", str(tiny_models["qwen2"]["hf"])]) == 0
    err = capsys.readouterr().err
    assert err == f"{shown}first part second part\n"
