"""harness/gpu_preflight.py: the first minute of a lease stops with one line when the box
cannot run the kit, and names the commit the receipts will carry."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _preflight():
    spec = importlib.util.spec_from_file_location(
        "gpu_preflight", ROOT / "harness" / "gpu_preflight.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


preflight = _preflight()


def _kit(tmp_path: Path) -> Path:
    kit = tmp_path / "kit"
    kit.mkdir()
    (kit / "a.whl").write_bytes(b"wheel bytes")
    files = [{"path": "a.whl", "sha256": hashlib.sha256(b"wheel bytes").hexdigest()}]
    tree = {"commit": "ab" * 20, "dirty": False, "files": [], "tree_sha256": "0" * 64}
    (kit / "manifest.json").write_text(json.dumps({"files": files, "tree": tree}))
    return kit


def test_an_altered_kit_file_stops_the_lease(tmp_path):
    kit = _kit(tmp_path)
    assert preflight.check_kit(kit)["files"][0]["path"] == "a.whl"
    (kit / "a.whl").write_bytes(b"cut short")
    with pytest.raises(preflight.Preflight, match=r"a\.whl"):
        preflight.check_kit(kit)


def _tree(root: Path) -> dict:
    names = ["src/x.py", "README.md"]
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(name)
    digest = hashlib.sha256()
    for name in names:
        sha = hashlib.sha256((root / name).read_bytes()).hexdigest()
        digest.update(f"{name}\0{sha}\n".encode())
    return {"commit": "ab" * 20, "dirty": False, "files": names, "tree_sha256": digest.hexdigest()}


def test_a_kit_without_a_commit_stops_the_lease(tmp_path):
    kit = _kit(tmp_path)
    manifest = json.loads((kit / "manifest.json").read_text())
    manifest["tree"]["commit"] = ""  # built outside git
    (kit / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(preflight.Preflight, match="git checkout"):
        preflight.check_kit(kit)
    (kit / "manifest.json").write_text(json.dumps({"files": []}))  # an older kit's manifest
    with pytest.raises(preflight.Preflight, match="build the kit again"):
        preflight.check_kit(kit)


def test_provenance_is_clean_only_when_the_travelled_tree_is_the_kits(tmp_path):
    root, run = tmp_path / "tree", tmp_path / "run"
    tree = _tree(root)
    line = preflight.check_tree(root, tree, run)
    provenance = json.loads((run / "provenance.json").read_text())
    assert provenance == {"commit": "ab" * 20, "dirty": False, "tree_sha256": tree["tree_sha256"]}
    assert "clean" in line and "as built" in line
    (root / "src" / "x.py").write_text("edited on the way")
    line = preflight.check_tree(root, tree, run)
    assert json.loads((run / "provenance.json").read_text())["dirty"] is True
    assert "DIFFERS" in line


def test_no_cuda_is_one_line_and_exit_1(tmp_path, capsys):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    kit = _kit(tmp_path)
    manifest = json.loads((kit / "manifest.json").read_text())
    manifest["tree"] = _tree(tmp_path / "tree")
    (kit / "manifest.json").write_text(json.dumps(manifest))
    code = preflight.main(["--kit", str(kit), "--run", str(tmp_path / "run"), "--device", "cuda"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1
    assert err[0].startswith("preflight FAILED: ") and "sees no CUDA device" in err[0]


def test_the_nf4_matmul_check_runs_on_the_cpu_backend():
    pytest.importorskip("bitsandbytes")
    line = preflight.check_compute("cpu")
    assert "NF4 matmul forward and backward on cpu" in line


def test_too_little_disk_stops(tmp_path):
    with pytest.raises(preflight.Preflight, match="GiB free"):
        preflight.check_disk(tmp_path, min_free_gib=1e9)
