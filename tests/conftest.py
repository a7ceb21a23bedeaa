"""Shared fixtures: the real SmolLM2 GGUF and tiny random models of every family."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]


def pytest_configure(config: pytest.Config) -> None:
    """xdist workers share the cores instead of oversubscribing them (assay_testing.cores)."""
    from assay_testing.cores import share_cores_among_xdist_workers

    share_cores_among_xdist_workers()


def smollm2_gguf() -> Path:
    """The bundled SmolLM2 GGUF. A missing package fails the test rather than skipping it, so
    CI cannot go green without it."""
    from assay.errors import AssayError
    from assay_testing.real_model import smollm2_path

    try:
        return smollm2_path()
    except AssayError as err:
        pytest.fail(str(err))


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    return smollm2_gguf()


@pytest.fixture(scope="session")
def smollm2_hf_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled SmolLM2 as a Hugging Face folder, written by examples/write_smollm2_folder.py
    (transformers' save_pretrained), once per session."""
    import runpy

    script = Path(__file__).resolve().parents[1] / "examples" / "write_smollm2_folder.py"
    folder = tmp_path_factory.mktemp("smollm2") / "smollm2-hf"
    runpy.run_path(str(script))["main"](folder)
    return folder


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Path]]:
    """family -> {"hf": safetensors dir, "gguf": file}, built once per session."""
    from assay_testing.tiny import FAMILIES, save_tiny

    root = tmp_path_factory.mktemp("tiny")
    return {family: save_tiny(family, root, seed=i) for i, family in enumerate(FAMILIES)}


@pytest.fixture
def tiny_lora_config(tmp_path):
    """A writer of a LoRA config over a tiny llama3 (byte tokenizer, 6 text rows) training into
    ``tmp_path/run``: ``tiny_lora_config(steps=6) -> config path``."""
    import yaml

    from assay_testing.text_run import save_text_run

    files = save_text_run(tmp_path, seed=2)

    def write(steps: int = 6) -> Path:
        body = {
            **files,
            "storage": "float32",
            "steps": steps,
            "seed": 1,
            "adapter": {"method": "lora", "rank": 2, "alpha": 4, "targets": ["q_proj"]},
            "batch": {"micro_batch": 2},
            "output": {"dir": str(tmp_path / "run"), "save_every": 100},
        }
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(body))
        return path

    return write
