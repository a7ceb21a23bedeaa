"""harness/gpu_bundle.py: wheel selection, the slim bitsandbytes wheel, the manifest and the
64 MiB size check, on fake wheels (nothing downloaded). The slow test runs the whole dry run
of harness/gpu_qualify.sh on them."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from fake_kit import MACHINERY_LIMIT, ROOT, harness_module

gpu_bundle = harness_module("gpu_bundle")


def test_missing_wheel_is_named(wheels: Path):
    next(wheels.glob("gguf-*.whl")).unlink()
    with pytest.raises(gpu_bundle.BundleError, match="gguf"):
        gpu_bundle.pick_wheels(wheels)


def test_wrong_python_wheel_is_refused(wheels: Path):
    next(wheels.glob("rpds_py-*.whl")).rename(
        wheels / "rpds_py-1.0-cp311-cp311-manylinux_2_17_x86_64.whl"
    )
    with pytest.raises(gpu_bundle.BundleError, match="cp312"):
        gpu_bundle.pick_wheels(wheels)


def test_slim_bitsandbytes_keeps_cpu_and_cuda13_with_a_valid_record(wheels: Path, tmp_path: Path):
    out = tmp_path / "slim"
    out.mkdir()
    facts = gpu_bundle.slim_bitsandbytes(next(wheels.glob("bitsandbytes-*.whl")), out, ("130",))
    assert facts["kept"] == ["libbitsandbytes_cpu.so", "libbitsandbytes_cuda130.so"]
    assert facts["dropped"] == 3
    with zipfile.ZipFile(next(out.glob("*.whl"))) as slim:
        names = set(slim.namelist())
        record = slim.read("bitsandbytes-1.0.dist-info/RECORD").decode().splitlines()
        for line in record:
            name, digest, _ = line.split(",")
            assert name in names
            if digest:
                data = slim.read(name)
                want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
                assert digest == "sha256=" + want.decode()
    assert "bitsandbytes/libbitsandbytes_cuda118.so" not in names


def test_slim_without_the_cuda_library_is_refused(wheels: Path, tmp_path: Path):
    with pytest.raises(gpu_bundle.BundleError, match="no CUDA library"):
        gpu_bundle.slim_bitsandbytes(next(wheels.glob("bitsandbytes-*.whl")), tmp_path, ("999",))


def _build(wheels: Path, kit: Path, *extra: str) -> int:
    return gpu_bundle.main(
        [
            "--out",
            str(kit),
            "--wheels-from",
            str(wheels),
            "--no-assay-wheel",
            "--no-skeleton",
            *MACHINERY_LIMIT,
            *extra,
        ]
    )


def test_manifest_lists_every_file_with_its_hash(wheels: Path, tmp_path: Path):
    kit = tmp_path / "kit"
    assert _build(wheels, kit) == 0
    manifest = json.loads((kit / "manifest.json").read_text())
    on_disk = {str(p.relative_to(kit)) for p in kit.rglob("*.whl")}
    assert {f["path"] for f in manifest["files"]} == on_disk
    for entry in manifest["files"]:
        assert hashlib.sha256((kit / entry["path"]).read_bytes()).hexdigest() == entry["sha256"]
    size = manifest["size"]
    assert size["total_bytes"] == size["kit_bytes"] + size["tree_bytes"] <= size["limit_bytes"]
    assert manifest["bitsandbytes_slim"]["kept"][0] == "libbitsandbytes_cpu.so"


def test_over_the_carry_limit_fails_with_one_clear_line(wheels: Path, tmp_path: Path, capsys):
    assert _build(wheels, tmp_path / "kit", "--limit-mib", "1") == 1
    err = capsys.readouterr().err
    assert "exceeds the 1 MiB carry limit" in err and "largest:" in err


# a real kit (the wheels, the slimmed bitsandbytes, the model skeleton), as the README states
REAL_KIT_MIB = 9


@pytest.mark.xfail(
    strict=True,
    reason="records/receipts alone is about 59 MiB: the tree (65 MiB) is over the 64 MiB a device "
    "call carries, so the GPU line cannot travel until the receipt archive travels slimmer; "
    "strict, so this mark must go the day it fits",
)
def test_this_tree_and_a_real_kit_fit_one_device_call():
    tree = gpu_bundle.tree_bytes()
    assert tree + REAL_KIT_MIB * gpu_bundle.MIB <= gpu_bundle.CARRY_LIMIT, (
        f"tree {tree / gpu_bundle.MIB:.1f} MiB + kit {REAL_KIT_MIB} MiB"
    )


def test_size_report_counts_the_tree(tmp_path: Path):
    (tmp_path / "blob").write_bytes(b"x" * 1000)
    sizes, problems = gpu_bundle.size_report(tmp_path, tree=500, limit=2000)
    assert sizes["total_bytes"] == 1500 and problems == []
    _, problems = gpu_bundle.size_report(tmp_path, tree=1500, limit=2000)
    assert len(problems) == 1


@pytest.mark.slow
def test_dry_run_comes_home_as_one_archive_and_imports(wheels: Path, tmp_path: Path):
    """The whole kit on CPU (fake wheels, a tiny skeleton): kit, cp312 install, seeding,
    preflight, travel rebuild, gate-cuda (all not tested on CPU), pack. What lands in OUT fits
    what the device tool returns, and the archive imports into a copy of this repository's
    records beside their CPU receipts: the ledger grows, verify passes, quality is unchanged."""
    import assay
    from assay.cli import main
    from assay.model.gguf_export import write_gguf
    from assay.qualify import verify_all
    from assay.qualify.judging.standing import gate_standing
    from assay.qualify.ledger.archive import read_archive
    from assay.qualify.ledger.chain import chain_head, read_ledger
    from assay_testing.tiny import llama_config

    pack = harness_module("gpu_pack")
    model = assay.model.Decoder(llama_config())
    gguf = write_gguf(
        tmp_path / "tiny.gguf", model.config, {n: p.detach() for n, p in model.state_dict().items()}
    )
    out = tmp_path / "out"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src"),
        "ASSAY_GPU_KIT": str(tmp_path / "kit"),
        "ASSAY_WHEELS_FROM": str(wheels),
        "ASSAY_BUNDLE_ARGS": f"--no-assay-wheel --skeleton-from {gguf} {' '.join(MACHINERY_LIMIT)}",
    }
    proc = subprocess.run(
        ["bash", "harness/gpu_qualify.sh", "--dry-run", "--gates", "cuda", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "matches the manifest" in proc.stdout
    assert "preflight ok: torch" in proc.stdout
    assert pack.out_problems(out) == []
    names = sorted(p.name for p in out.iterdir())
    assert len(names) == 4 and names[1:] == ["environment.txt", "import.txt", "summary.txt"]
    archive = out / names[0]
    assert re.fullmatch(r"assay-gpu-[0-9a-f]{12}\.tar\.gz", archive.name)
    manifest, members = read_archive(archive)
    home = tmp_path / "records"
    shutil.copytree(ROOT / "records", home)
    assert manifest["gates"]["cuda"]["chained_onto"] == chain_head(home / "receipts", "cuda")
    assert any(name.startswith("logs/gate_cuda.log") for name in members)
    (name,) = manifest["gates"]["cuda"]["receipts"]
    receipt = json.loads(members[f"receipts/cuda/{name}"])
    assert receipt["claims"] == [] and receipt["run"]["device"] == "cpu"
    assert "gate-cuda: exit 0" in (out / "summary.txt").read_text()

    quality_before = gate_standing(home / "receipts", "quality", home).summary()
    cuda_before = len(read_ledger(home / "receipts" / "cuda" / "LEDGER")[0])
    assert main(["import-gpu", str(archive), "--receipts", str(home / "receipts")]) == 0
    assert len(read_ledger(home / "receipts" / "cuda" / "LEDGER")[0]) == cuda_before + 1
    assert verify_all(home / "receipts", home) == []
    assert gate_standing(home / "receipts", "quality", home).summary() == quality_before


def test_out_limits_are_checked(tmp_path: Path):
    pack = harness_module("gpu_pack")
    for i in range(9):
        (tmp_path / f"f{i}").write_bytes(b"x")
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    (deep / "x").write_bytes(b"x")
    problems = pack.out_problems(tmp_path)
    assert any("10 files" in p for p in problems) and any("3 folders deep" in p for p in problems)
