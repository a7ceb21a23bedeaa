"""A Hugging Face folder is a whole model (issue 51): config.json, safetensors and tokenizer.json
train, evaluate and generate with no GGUF anywhere, and a bad tokenizer is refused before any
weight is decoded."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from assay.cli import main
from assay_testing.hf_tokenizers import save_byte_fallback_folder
from assay_testing.tiny import FAMILIES, save_tiny

pytestmark = pytest.mark.slow


def _workspace(root: Path, family: str) -> Path:
    """Under ``root``: a tiny ``family`` folder whose vocabulary is its own tokenizer's, a chat
    data file and a LoRA config that names the folder alone."""
    from assay.model.tokenizer import load_tokenizer

    tokenizer = save_byte_fallback_folder(root / "tokenizer")
    vocab = load_tokenizer(tokenizer).vocab_size
    model = save_tiny(family, root, seed=5, gguf=False, vocab_size=vocab)["hf"]
    for file in tokenizer.iterdir():
        shutil.copy(file, model / file.name)
    rows = [
        {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}
        for q, a in (("The quick fox?", "Jumps."), ("Numbers?", "0123"), ("Words?", "lines"))
    ]
    (root / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {
        "model": str(model),
        "data": {"train": str(root / "chat.jsonl"), "format": "messages", "seq_len": 64},
        "adapter": {"method": "lora", "rank": 2, "alpha": 4},
        "steps": 2,
        "output": {"dir": str(root / "run"), "save_every": 2},
    }
    (root / "config.yaml").write_text(yaml.safe_dump(config))
    return root


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """The llama3 workspace (``_workspace``) the tests below share."""
    return _workspace(tmp_path_factory.mktemp("hf-run"), "llama3")


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_folder_trains_evaluates_generates_and_exports(tmp_path, family, capsys):
    """Issue 51's bar: a folder save_pretrained wrote, of every family, trains, evaluates,
    generates and exports with no GGUF anywhere; its merged export loads in transformers with
    the logits of the base under the exported PEFT adapter."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    root = _workspace(tmp_path, family)
    config, run = str(root / "config.yaml"), str(root / "run")
    model = yaml.safe_load((root / "config.yaml").read_text())["model"]
    data = str(root / "chat.jsonl")
    assert main(["train", config, "--json", "--no-progress"]) == 0
    assert main(["eval", config, "--checkpoint", run, "--data", data, "--json"]) == 0
    argv = ["generate", model, "--prompt", "The quick", "--chat", "--max-new-tokens", "2"]
    assert main([*argv, "--json"]) == 0
    for fmt in ("peft", "safetensors"):
        assert main(["export", run, "--format", fmt, "--out", str(root / fmt)]) == 0
    capsys.readouterr()
    assert not list(root.rglob("*.gguf"))
    ids = torch.arange(3, 40)[None]
    with torch.no_grad():
        base = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
        adapted = PeftModel.from_pretrained(base, root / "peft")(input_ids=ids).logits
        merged = AutoModelForCausalLM.from_pretrained(root / "safetensors", dtype=torch.float32)
        assert (merged(input_ids=ids).logits - adapted).abs().max().item() <= 1e-4


def test_a_folder_trains_evaluates_and_generates_without_a_gguf(workspace, capsys):
    config = workspace / "config.yaml"
    assert main(["train", str(config), "--json", "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert len(summary["losses"]) == 2 and all(loss > 0 for loss in summary["losses"])
    data = str(workspace / "chat.jsonl")
    run = str(workspace / "run")
    assert main(["eval", str(config), "--checkpoint", run, "--data", data, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["eval_loss"] > 0
    model = yaml.safe_load(config.read_text())["model"]
    argv = ["generate", model, "--prompt", "The quick", "--chat", "--max-new-tokens", "2"]
    assert main([*argv, "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["tokens"]) <= 2
    assert not list(workspace.rglob("*.gguf"))


def test_a_merged_export_is_a_whole_folder_transformers_loads_with_its_tokenizer(
    workspace, tmp_path, capsys
):
    """The merged safetensors export carries the source folder's tokenizer, template and
    generation files byte for byte, so transformers' AutoTokenizer reads the export as it reads
    the source; the control: the same export without them has no tokenizer to load."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = workspace / "config.yaml"
    run = workspace / "run"
    if not (run / "latest").exists():
        assert main(["train", str(config), "--json", "--no-progress"]) == 0
    out = tmp_path / "merged"
    assert main(["export", str(run), "--format", "safetensors", "--out", str(out)]) == 0
    source = Path(yaml.safe_load(config.read_text())["model"])
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (out / name).read_bytes() == (source / name).read_bytes()
    text = "The quick fox? 0123 \u00e9\u4e2d"
    assert (
        AutoTokenizer.from_pretrained(out)(text)["input_ids"]
        == AutoTokenizer.from_pretrained(source)(text)["input_ids"]
    )
    AutoModelForCausalLM.from_pretrained(out)  # the weights load beside them
    manifest = json.loads((out / "assay_manifest.json").read_text())
    assert "tokenizer.json" in manifest["files"]
    bare = tmp_path / "bare"
    shutil.copytree(out, bare)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (bare / name).unlink()
    with pytest.raises((OSError, ValueError, TypeError)):
        AutoTokenizer.from_pretrained(bare)


@pytest.mark.parametrize("tier", ["ram", "disk"])
def test_a_streamed_run_exports_and_generates_as_its_resident_twin(
    workspace, tmp_path, tier, capsys
):
    """A run streamed from RAM or disk keeps its base off the modules; its merged export and
    its cached generation (which read every base weight) are the resident run's, bit for bit,
    since streamed training is bitwise resident training (the outside attack: both crashed
    with a traceback for the disk tier)."""
    from safetensors.torch import load_file

    config = yaml.safe_load((workspace / "config.yaml").read_text())
    merged, generated = {}, {}
    for name, stream in (("resident", None), (tier, {"tier": tier, "buffers": 2})):
        run = tmp_path / f"run-{name}"
        changed = {**config, "output": {**config["output"], "dir": str(run)}}
        if stream is not None:
            changed["stream"] = stream
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(changed))
        assert main(["train", str(path), "--json", "--no-progress"]) == 0
        out = tmp_path / f"merged-{name}"
        assert main(["export", str(run), "--format", "safetensors", "--out", str(out)]) == 0
        merged[name] = load_file(out / "model.safetensors")
        capsys.readouterr()
        argv = ["generate", str(path), "--checkpoint", str(run), "--prompt", "The quick"]
        assert main([*argv, "--max-new-tokens", "3", "--json"]) == 0
        generated[name] = json.loads(capsys.readouterr().out)["tokens"]
    assert generated["resident"] == generated[tier]
    assert merged["resident"].keys() == merged[tier].keys()
    assert all(torch.equal(merged["resident"][k], merged[tier][k]) for k in merged["resident"])


def test_a_bad_tokenizer_is_refused_before_any_weight_is_decoded(
    workspace, tmp_path, capsys, monkeypatch
):
    import assay.storage.load

    broken = tmp_path / "model"
    shutil.copytree(yaml.safe_load((workspace / "config.yaml").read_text())["model"], broken)
    (broken / "tokenizer.json").write_text("{")
    config = yaml.safe_load((workspace / "config.yaml").read_text())
    config["model"] = str(broken)
    config["output"]["dir"] = str(tmp_path / "run")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))

    def decoded(*args, **kwargs):
        raise AssertionError("a weight was decoded before the tokenizer was checked")

    monkeypatch.setattr(assay.storage.load, "load_stored", decoded)
    for argv in (["train", str(path)], ["generate", str(broken), "--prompt", "x"]):
        capsys.readouterr()
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "tokenizer.json: not a tokenizers file" in err, err


def test_a_chat_prompt_carries_the_templates_special_tokens_once(workspace, monkeypatch, capsys):
    """--chat encodes the rendered template as transformers' apply_chat_template does: its
    own <s>, not a second one from the post-processor."""
    import assay.model.generate
    from assay.model.tokenizer import load_tokenizer

    model = yaml.safe_load((workspace / "config.yaml").read_text())["model"]
    seen: list[list[int]] = []
    real = assay.model.generate.generate

    def spy(model_, prompts, **kwargs):
        seen.extend(prompts)
        return real(model_, prompts, **kwargs)

    monkeypatch.setattr(assay.model.generate, "generate", spy)
    argv = ["generate", model, "--prompt", "Hi", "--chat", "--max-new-tokens", "1", "--json"]
    assert main(argv) == 0
    tokenizer = load_tokenizer(model)
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}], add_generation_prompt=True
    )
    assert seen == [tokenizer.encode(rendered)] and seen[0][:2].count(tokenizer.bos_id) == 1


def test_a_shard_index_that_is_no_map_is_one_line(workspace, tmp_path, capsys):
    model = tmp_path / "model"
    shutil.copytree(yaml.safe_load((workspace / "config.yaml").read_text())["model"], model)
    (model / "model.safetensors.index.json").write_text('{"weight_map": ["model.safetensors"]}')
    capsys.readouterr()
    assert main(["info", str(model)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "weight_map must map each tensor" in err
