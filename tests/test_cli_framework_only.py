"""With only the gate framework installed (no ``train`` extra), a trainer command exits 2 with
one line naming the extra, and the framework's commands still work.

Each run is a fresh interpreter whose import system refuses the train extra's modules, as if
``pip install assay-qualify`` (without ``[train]``) were all that was installed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import assay.cli
import assay.cli.commands
import assay.cli.info

INSTALL_LINE = "pip install 'assay-qualify[train]'"
BLOCKED = ("torch", "bitsandbytes", "gguf", "safetensors", "numpy", "yaml", "tokenizers", "tqdm")

# Runs `assay ARGS...` (sys.argv[1:]) with the train extra unimportable.
WITHOUT_TRAINER = f"""
import sys
from importlib.abc import MetaPathFinder

BLOCKED = {BLOCKED!r}
assert not any(name in sys.modules for name in BLOCKED), "imported before the block"


class NoTrainExtra(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, NoTrainExtra())
if sys.argv[1:] == ["--import-torch"]:
    import torch  # the control: must fail
from assay.cli import main

code = main(sys.argv[1:])
leaked = sorted(name for name in sys.modules if name.split(".")[0] in BLOCKED)
sys.exit(f"imported anyway: {{leaked}}" if leaked else code)
"""

TRAINER_RUNS = {
    "info": ["info", "model.gguf"],
    "train": ["train", "config.yaml", "--device", "cpu"],
    "eval": ["eval", "config.yaml"],
    "export": ["export", "run", "--format", "peft", "--out", "adapter"],
    "estimate": ["estimate", "config.yaml"],
    "generate": ["generate", "model.gguf", "--prompt", "hi"],
    "generate, arguments missing": ["generate"],
    "status": ["status", "run"],
}


def run_without_trainer(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_TRAINER, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def test_the_simulation_really_hides_torch(tmp_path):
    done = run_without_trainer(["--import-torch"], tmp_path)
    assert done.returncode != 0 and "ModuleNotFoundError: No module named 'torch'" in done.stderr


@pytest.mark.parametrize("args", TRAINER_RUNS.values(), ids=TRAINER_RUNS.keys())
def test_a_trainer_command_says_which_extra_in_one_line(args, tmp_path):
    done = run_without_trainer(args, tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [f"assay {args[0]} needs the trainer: {INSTALL_LINE}"]
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_every_trainer_command_is_covered():
    assert set(assay.cli.commands.TRAINER_COMMANDS) == {args[0] for args in TRAINER_RUNS.values()}


def test_framework_commands_work_without_the_trainer(tmp_path):
    done = run_without_trainer(["verify", "--help"], tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("usage: assay verify"), done.stderr
    (tmp_path / "records" / "receipts").mkdir(parents=True)
    done = run_without_trainer(["render"], tmp_path)
    assert done.returncode == 0 and "no receipts under records/receipts" in done.stderr
    done = run_without_trainer(["docs", "gate-api"], tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("# Writing a gate"), done.stderr


def test_help_of_a_trainer_command_still_prints_without_the_trainer(tmp_path):
    done = run_without_trainer(["train", "--help"], tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("usage: assay train"), done.stderr


def test_a_missing_part_of_the_extra_found_late_is_one_line_too(monkeypatch, capsys):
    def needs_gguf(args):
        raise ModuleNotFoundError("No module named 'gguf'", name="gguf")

    monkeypatch.setattr(assay.cli.info, "run", needs_gguf)
    assert assay.cli.main(["info", "model.gguf"]) == 2
    assert capsys.readouterr().err.splitlines() == [f"assay info needs the trainer: {INSTALL_LINE}"]


def test_a_missing_module_outside_the_extra_is_not_blamed_on_it(monkeypatch):
    def needs_other(args):
        raise ModuleNotFoundError("No module named 'elsewhere'", name="elsewhere")

    monkeypatch.setattr(assay.cli.info, "run", needs_other)
    with pytest.raises(ModuleNotFoundError, match="elsewhere"):
        assay.cli.main(["info", "model.gguf"])
