"""Shared by the GPU kit tests: the harness scripts as modules, and fake wheels (nothing is
downloaded) standing in for what the kit carries."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def harness_module(name: str):
    """``harness/<name>.py`` imported as a module."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "harness" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_wheel(folder: Path, project: str, tag: str, files: dict[str, bytes]) -> Path:
    """A minimal installable wheel: the files, METADATA, WHEEL and a RECORD with hashes."""
    dist = project.replace("-", "_")
    info = f"{dist}-1.0.dist-info"
    contents = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {project}\nVersion: 1.0\n".encode(),
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: {tag}\n".encode(),
    }
    lines = []
    for name, data in contents.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{name},sha256={digest},{len(data)}")
    contents[f"{info}/RECORD"] = ("\n".join([*lines, f"{info}/RECORD,,"]) + "\n").encode()
    path = folder / f"{dist}-1.0-{tag}.whl"
    with zipfile.ZipFile(path, "w") as out:
        for name, data in contents.items():
            out.writestr(name, data)
    return path


# The kit tests exercise the kit's machinery (wheels, manifest, install, pack) on fake wheels,
# not this repository's size: they build with a carry limit the tree always fits. Whether this
# tree and a real kit fit what a device call carries is its own claim
# (tests/harness/test_gpu_bundle.py::test_this_tree_and_a_real_kit_fit_one_device_call).
MACHINERY_LIMIT = ("--limit-mib", "4096")
