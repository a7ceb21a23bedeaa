"""Nothing under src/ unpickles: no pickle loads, torch.load only with weights_only=True."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "robustness"))

from unsafe_scan import scan_tree, unsafe_calls

SRC = Path(__file__).resolve().parents[1] / "src"


def test_no_unsafe_loading_under_src():
    assert SRC.is_dir()
    assert list(SRC.rglob("*.py")), "no sources scanned"
    assert scan_tree(SRC) == []


@pytest.mark.parametrize(
    "snippet",
    [
        "import torch\ntorch.load(f)\n",
        "import torch\ntorch.load(f, weights_only=False)\n",
        "import pickle\npickle.loads(b)\n",
        "import pickle\npickle.load(fh)\n",
        "from pickle import loads\n",
        "import numpy as np\nnp.load(p, allow_pickle=True)\n",
    ],
)
def test_scanner_finds_each_unsafe_form(snippet):
    assert len(unsafe_calls(snippet)) == 1


def test_scanner_accepts_safe_forms():
    assert unsafe_calls("import torch\ntorch.load(f, weights_only=True)\nimport json\n") == []
