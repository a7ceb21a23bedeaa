"""The framework installs and imports without torch; the trainer sits behind one extra."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "bitsandbytes", "gguf", "tokenizers", "safetensors", "numpy")


def test_base_dependencies_are_the_framework_and_train_carries_the_trainer():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    names = [d.split(">")[0].split("=")[0].split("[")[0].strip() for d in project["dependencies"]]
    assert sorted(names) == ["jinja2", "jsonschema", "pytest"]
    train = " ".join(project["optional-dependencies"]["train"])
    assert all(dist in train for dist in ("torch", "bitsandbytes", "gguf", "tokenizers"))


def test_the_framework_api_never_imports_the_trainer_stack():
    code = (
        "import json, sys, assay, assay.qualify as q\n"
        "names = [q.Threshold, q.Tolerance, q.Gate, q.measure_time, q.headline, q.render_all,"
        " q.verify_all, q.read_receipt]\n"
        "import assay.qualify.plugin, assay.qualify.session, assay.qualify.environment\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_a_trainer_name_without_its_dependencies_says_which_extra(monkeypatch):
    code = (
        "import sys\n"
        "sys.modules['torch'] = None  # as if torch were not installed\n"
        "import assay\n"
        "try:\n    assay.Trainer\nexcept Exception as err:\n    print(type(err).__name__, err)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("AssayError ") and 'pip install "assay[train]"' in out.stdout
