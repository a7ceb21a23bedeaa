"""The ``wheels`` fixture: one fake wheel per project the GPU kit carries."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fake_kit import fake_wheel, harness_module


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    folder = tmp_path / "wheels"
    folder.mkdir()
    bundle = harness_module("gpu_bundle")
    for requirement in bundle.REQUIREMENTS:
        name = bundle.requirement_name(requirement)
        module = name.replace("-", "_")
        files = {f"{module}/__init__.py": b""}
        tag = "py3-none-any"
        if name == "bitsandbytes":
            tag = "py3-none-manylinux_2_24_x86_64"
            for lib in ("cpu", "cuda118", "cuda130", "cuda132", "rocm64"):
                files[f"bitsandbytes/libbitsandbytes_{lib}.so"] = os.urandom(1000)
        elif name == "rpds-py":
            tag = "cp312-cp312-manylinux_2_17_x86_64"
        fake_wheel(folder, name, tag, files)
    return folder
