"""Build the GPU kit: the git-ignored folder that travels with the tree to a bare GPU box.

Usage: python harness/gpu_bundle.py [--out build/gpu-kit] [--wheels-from DIR] [--check-only]

The box has Python 3.12 and a CUDA 13 torch with transformers, peft, safetensors, tokenizers,
jinja2, pytest and pyyaml, and nothing else; it reaches no network. The kit holds:

- ``wheels/``: cp312 manylinux wheels of what the box lacks (bitsandbytes, gguf, jsonschema and
  their small pure-Python or cp312 dependencies), plus assay itself (``--no-deps``). The
  bitsandbytes wheel (43 MB, one kernel library per CUDA/ROCm/XPU release) is slimmed to the
  CPU library and the CUDA 13 kernels the box's torch loads (``--bnb-cuda``): 43 MB -> ~3 MB.
- ``smollm2.skeleton.json.gz``: the real SmolLM2 GGUF's metadata and tensor specs without its
  bytes; ``assay_testing.gguf_skeleton`` rebuilds a same-shaped, same-typed GGUF with seeded random
  values on the box. The sha256 that rebuild must have is recorded in the manifest.
- ``manifest.json``: every file's bytes and sha256, the tree's commit, what was slimmed, and
  the size check: kit + tree against the 64 MiB a run may carry.

Wheels come from ``--wheels-from DIR`` (offline) or are fetched with ``pip download`` for
``--python-version 3.12 --platform manylinux_2_28_x86_64`` into ``build/wheel-cache``. Exit 0 when
the kit fits, 1 when it does not (one line says by how much and what is largest), 2 on bad input.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20
CARRY_LIMIT = 64 * MIB
# What the box lacks, as pip requirements. Pure-Python unless noted; the cp312 ones must be
# manylinux x86_64 builds for CPython 3.12.
REQUIREMENTS = (
    "bitsandbytes>=0.46",
    "gguf>=0.10",
    "jsonschema>=4.18",
    "referencing",
    "rpds-py",  # cp312 manylinux
    "attrs",
    "jsonschema-specifications",
    "requests",  # gguf's dependency
    "urllib3",
    "idna",
    "certifi",
    "charset-normalizer",  # cp312 manylinux
    "typing-extensions",
    "packaging",
)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64")
BNB_KEEP_DEFAULT = ("130", "132")


class BundleError(Exception):
    """Bad input to the bundle builder: one line naming what was expected."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def project_name(wheel: Path) -> str:
    """Normalised project name of a wheel file (``rpds_py-...whl`` -> ``rpds-py``)."""
    return re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()


def requirement_name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.split(r"[<>=!~ ;\[]", requirement)[0]).lower()


def download_wheels(dest: Path) -> None:
    """Fetch every requirement as a cp312 manylinux/any wheel with pip (no deps, binary only)."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    cmd += ["--python-version", "3.12", "--implementation", "cp", "-d", str(dest)]
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    subprocess.run([*cmd, *REQUIREMENTS], check=True)


def pick_wheels(source: Path) -> dict[str, Path]:
    """The newest wheel per required project in ``source``; BundleError names what is missing."""
    found: dict[str, Path] = {}
    for wheel in sorted(source.glob("*.whl")):
        name = project_name(wheel)
        if name in found and _version_key(found[name]) >= _version_key(wheel):
            continue
        found[name] = wheel
    wanted = [requirement_name(r) for r in REQUIREMENTS]
    missing = [name for name in wanted if name not in found]
    if missing:
        raise BundleError(f"{source}: no wheel for {', '.join(missing)}")
    for name in wanted:
        tags = found[name].name.removesuffix(".whl").split("-")[-3:]
        if tags[0] not in ("py3", "cp312", "py2.py3") or not (
            tags[2] == "any" or "x86_64" in tags[2]
        ):
            raise BundleError(f"{found[name]}: expected a cp312/py3 x86_64 or any wheel")
    return {name: found[name] for name in wanted}


def _version_key(wheel: Path) -> tuple[int, ...]:
    version = wheel.name.split("-")[1]
    return tuple(int(part) for part in re.findall(r"\d+", version)[:4])


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def slim_bitsandbytes(wheel: Path, dest: Path, keep_cuda: tuple[str, ...]) -> dict[str, object]:
    """Rewrite the bitsandbytes wheel keeping only ``libbitsandbytes_cpu.so`` and the CUDA
    kernel libraries for ``keep_cuda`` (e.g. ``130``); RECORD is regenerated so pip installs it
    as a normal wheel. Returns what was kept and dropped."""
    kept, dropped, dropped_bytes = [], [], 0
    target = dest / wheel.name
    with zipfile.ZipFile(wheel) as src:
        infos = src.infolist()
        record_name = next(i.filename for i in infos if i.filename.endswith(".dist-info/RECORD"))
        lines = []
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
            for info in infos:
                name = info.filename
                match = re.search(r"libbitsandbytes_([a-z]+)(\d*)\.(so|dll|dylib)$", name)
                if match and not (
                    match.group(1) == "cpu"
                    or (match.group(1) == "cuda" and match.group(2) in keep_cuda)
                ):
                    dropped.append(name.rsplit("/", 1)[-1])
                    dropped_bytes += info.file_size
                    continue
                if match:
                    kept.append(name.rsplit("/", 1)[-1])
                if name == record_name:
                    continue
                data = src.read(info)
                out.writestr(info, data)
                lines.append(_record_line(name, data))
            lines.append(f"{record_name},,")
            out.writestr(record_name, "\n".join(lines) + "\n")
    if not any(k.startswith("libbitsandbytes_cuda") for k in kept):
        raise BundleError(f"{wheel}: holds no CUDA library for {', '.join(keep_cuda)}")
    return {"kept": sorted(kept), "dropped": len(dropped), "dropped_bytes": dropped_bytes}


def build_assay_wheel(dest: Path) -> Path:
    """assay as a wheel (no deps) built from this tree, so the pytest11 entry point exists."""
    with tempfile.TemporaryDirectory() as tmp:
        pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp, str(ROOT)]
        # the installed setuptools first (offline); an isolated build only where it is missing
        if subprocess.run([*pip, "--no-build-isolation"], cwd=tmp, check=False).returncode:
            subprocess.run(pip, cwd=tmp, check=True)
        (built,) = Path(tmp).glob("assay_qualify-*.whl")
        return Path(shutil.copy2(built, dest / built.name))


def tree_files(root: Path = ROOT) -> list[str]:
    """What travels as the working tree: tracked files plus untracked, unignored; sorted."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout
    names = {n for n in out.decode().split("\0") if n}
    return sorted(n for n in names if (root / n).is_file() and not (root / n).is_symlink())


def tree_bytes(root: Path = ROOT) -> int:
    """Bytes of what travels as the working tree."""
    return sum((root / n).stat().st_size for n in tree_files(root))


def tree_digest(root: Path, names: list[str]) -> str:
    """sha256 over ``path NUL sha256(file) LF`` for each name, in the given order: what the
    box recomputes over the travelled files (harness/gpu_preflight.py) before trusting the
    commit the manifest names."""
    digest = hashlib.sha256()
    for name in names:
        digest.update(f"{name}\0{sha256_file(root / name)}\n".encode())
    return digest.hexdigest()


def tree_commit(root: Path = ROOT) -> dict[str, object]:
    """Commit, dirty flag, the travelling files and their digest: the box's provenance."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, check=False
        ).stdout.strip()

    names = tree_files(root)
    return {
        "commit": git("rev-parse", "HEAD"),
        "dirty": bool(git("status", "--porcelain")),
        "files": names,
        "tree_sha256": tree_digest(root, names),
    }


def size_report(kit: Path, tree: int, limit: int) -> tuple[dict[str, int], list[str]]:
    """Sizes (kit, tree, total, limit) and the problem lines, empty when it fits."""
    files = sorted((p for p in kit.rglob("*") if p.is_file()), key=lambda p: -p.stat().st_size)
    kit_total = sum(p.stat().st_size for p in files)
    sizes = {"kit_bytes": kit_total, "tree_bytes": tree, "total_bytes": kit_total + tree}
    sizes["limit_bytes"] = limit
    problems = []
    if kit_total + tree > limit:
        largest = ", ".join(f"{p.name} {p.stat().st_size / MIB:.1f} MiB" for p in files[:3])
        problems.append(
            f"{kit} ({kit_total / MIB:.1f} MiB) + tree ({tree / MIB:.1f} MiB) = "
            f"{(kit_total + tree) / MIB:.1f} MiB exceeds the {limit / MIB:.0f} MiB carry limit "
            f"by {(kit_total + tree - limit) / MIB:.1f} MiB; largest: {largest}"
        )
    return sizes, problems


def write_skeleton(kit: Path, gguf: Path, fingerprint: bool) -> dict[str, object]:
    """Skeleton of ``gguf`` into the kit; with ``fingerprint``, the rebuild's sha256 (seed 0)."""
    from assay_testing import gguf_skeleton

    skeleton = gguf_skeleton.extract_skeleton(gguf)
    path = gguf_skeleton.save_skeleton(skeleton, kit / "smollm2.skeleton.json.gz")
    info: dict[str, object] = {
        "skeleton": path.name,
        "source": skeleton["source"],
        "source_sha256": skeleton["source_sha256"],
        "seed": 0,
    }
    if fingerprint:
        with tempfile.TemporaryDirectory() as tmp:
            built = gguf_skeleton.write_travel_model(skeleton, Path(tmp) / "travel.gguf", seed=0)
            info["sha256"] = gguf_skeleton.file_sha256(built)
            info["bytes"] = built.stat().st_size
    return info


def build(args: argparse.Namespace) -> int:
    kit: Path = args.out
    if not args.check_only:
        if kit.exists():
            shutil.rmtree(kit)
        (kit / "wheels").mkdir(parents=True)
        source = args.wheels_from
        if source is None:
            source = args.cache
            try:
                wheels = pick_wheels(source)  # a complete cache is reused without the network
            except BundleError:
                download_wheels(source)
        wheels = pick_wheels(source)
        slim = None
        for name, wheel in wheels.items():
            if name == "bitsandbytes" and not args.keep_full_bnb:
                slim = slim_bitsandbytes(wheel, kit / "wheels", tuple(args.bnb_cuda))
            else:
                shutil.copy2(wheel, kit / "wheels" / wheel.name)
        if not args.no_assay_wheel:
            build_assay_wheel(kit / "wheels")
        travel = None
        if not args.no_skeleton:
            from assay_testing.real_model import smollm2_path

            gguf = args.skeleton_from or smollm2_path()
            travel = write_skeleton(kit, gguf, fingerprint=not args.no_fingerprint)
        manifest = {
            "format": "assay.gpu-kit/1",
            "tree": tree_commit(),
            "bitsandbytes_slim": slim,
            "travel_model": travel,
            "files": [
                {
                    "path": str(p.relative_to(kit)),
                    "bytes": p.stat().st_size,
                    "sha256": sha256_file(p),
                }
                for p in sorted(kit.rglob("*"))
                if p.is_file() and p.name != "manifest.json"
            ],
        }
    else:
        manifest_path = kit / "manifest.json"
        if not manifest_path.is_file():
            raise BundleError(f"{manifest_path}: no kit built here; run without --check-only")
        manifest = json.loads(manifest_path.read_text())
    sizes, problems = size_report(kit, tree_bytes(), args.limit_mib * MIB)
    manifest["size"] = sizes
    tmp = kit / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, kit / "manifest.json")
    print(
        f"gpu kit {kit}: {sizes['kit_bytes'] / MIB:.1f} MiB + tree {sizes['tree_bytes'] / MIB:.1f}"
        f" MiB = {sizes['total_bytes'] / MIB:.1f} MiB of {args.limit_mib} MiB"
    )
    for line in problems:
        print(f"error: {line}", file=sys.stderr)
    return 1 if problems else 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python harness/gpu_bundle.py", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--out", type=Path, default=ROOT / "build" / "gpu-kit", help="kit folder")
    p.add_argument("--wheels-from", type=Path, help="take wheels from DIR instead of pip download")
    p.add_argument("--cache", type=Path, default=ROOT / "build" / "wheel-cache")
    p.add_argument(
        "--bnb-cuda",
        nargs="+",
        default=list(BNB_KEEP_DEFAULT),
        metavar="VER",
        help="CUDA kernel libraries of bitsandbytes to keep (default: 130 132)",
    )
    p.add_argument("--keep-full-bnb", action="store_true", help="carry the unslimmed wheel")
    p.add_argument("--no-assay-wheel", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--no-skeleton", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--skeleton-from", type=Path, help="GGUF to skeletonise (default: SmolLM2)")
    p.add_argument(
        "--no-fingerprint",
        action="store_true",
        help="skip rebuilding the travel model here to record its sha256",
    )
    p.add_argument("--limit-mib", type=int, default=CARRY_LIMIT // MIB)
    p.add_argument("--check-only", action="store_true", help="re-check an existing kit's size")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return build(args)
    except BundleError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
