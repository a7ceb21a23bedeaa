"""The first minute of a GPU lease: stop with one line if the box cannot run the kit.

Usage: python harness/gpu_preflight.py --kit build/gpu-kit --run build/gpu-run --device cuda
                                       [--min-free-gib 4]

Checks, cheapest first, each printed as ``preflight ok: ...``:

1. every kit file against the manifest's sha256 (a kit altered or cut short in transit);
2. the travelled tree against the manifest's file list: the files' digest equals
   ``tree.tree_sha256`` (else the receipts are marked dirty, and the files that differ are
   named); writes ``RUN/provenance.json`` (commit, dirty, tree_sha256) for ``--gate-provenance``;
3. free disk under RUN (the travelling GGUF, receipts, logs);
4. with ``--device cuda``: torch sees a CUDA device, and bitsandbytes loads its CUDA library and
   runs one 4-bit (NF4) matmul forward and backward on it, checked against the dequantized
   weight. With ``--device cpu`` (the dry run) the same matmul runs on bitsandbytes' CPU backend.

Exit 0 when all pass; 1 with ``preflight FAILED: <what> (<what to do>)`` on the first failure.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_bundle import sha256_file, tree_digest  # noqa: E402  (a sibling script)


class Preflight(Exception):
    """The one line that stops the lease."""


def check_kit(kit: Path) -> dict:
    """The manifest, once every listed kit file has its recorded sha256."""
    try:
        manifest = json.loads((kit / "manifest.json").read_text())
        files, tree = manifest["files"], manifest["tree"]
        commit, digest = tree["commit"], tree["tree_sha256"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise Preflight(
            f"{kit}/manifest.json is not a kit manifest of this version ({type(err).__name__}: "
            f"{err}); build the kit again with harness/gpu_bundle.py"
        ) from None
    hexes = (
        re.fullmatch(r"[0-9a-f]{40,64}", str(commit)),
        re.fullmatch(r"[0-9a-f]{64}", str(digest)),
    )
    if not all(hexes):
        raise Preflight(
            f"the kit names commit {commit!r}: build it from a git checkout, so receipts can "
            "name the commit they qualify"
        )
    bad = [
        f["path"]
        for f in files
        if not (kit / f["path"]).is_file() or sha256_file(kit / f["path"]) != f["sha256"]
    ]
    if bad:
        raise Preflight(f"kit files changed or missing: {', '.join(bad[:5])}; carry the kit again")
    return manifest


def check_tree(root: Path, tree: dict, run: Path) -> str:
    """Write RUN/provenance.json from the manifest's tree entry, dirty also when the travelled
    files differ from the ones the kit was built from; returns the summary line."""
    names = tree.get("files", [])
    differ = [name for name in names if not (root / name).is_file()]
    same = not differ and tree_digest(root, names) == tree.get("tree_sha256")
    dirty = bool(tree.get("dirty")) or not same
    provenance = {"commit": tree["commit"], "dirty": dirty, "tree_sha256": tree["tree_sha256"]}
    run.mkdir(parents=True, exist_ok=True)
    (run / "provenance.json").write_text(json.dumps(provenance, indent=1) + "\n")
    state = "as built" if same else f"DIFFERS from the kit's ({', '.join(differ[:3]) or 'content'})"
    return f"tree {tree['commit'][:12]} ({'dirty' if dirty else 'clean'}), travelled files {state}"


def check_disk(run: Path, min_free_gib: float) -> str:
    free = shutil.disk_usage(run).free / 2**30
    if free < min_free_gib:
        raise Preflight(f"{free:.1f} GiB free under {run}, need {min_free_gib}; free disk space")
    return f"{free:.0f} GiB free under {run}"


def check_compute(device: str) -> str:
    """torch on ``device`` and one bitsandbytes NF4 matmul there, forward and backward."""
    try:
        import torch
    except ImportError as err:
        raise Preflight(f"torch does not import ({err})") from None
    if device == "cuda" and not torch.cuda.is_available():
        raise Preflight(f"torch {torch.__version__} sees no CUDA device; is this the GPU box?")
    try:
        import bitsandbytes as bnb
        import bitsandbytes.functional as bnbf
    except Exception as err:  # any import failure (missing .so too) stops the lease alike
        raise Preflight(f"bitsandbytes does not import ({type(err).__name__}: {err})") from None
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(128, 64, generator=generator).to(device)
    x = torch.randn(4, 64, generator=generator).to(device).requires_grad_(True)
    try:
        packed, state = bnbf.quantize_4bit(weight, quant_type="nf4", blocksize=64)
        out = bnb.matmul_4bit(x, packed.t(), quant_state=state)
        out.sum().backward()
        dense = bnbf.dequantize_4bit(packed, state)
    except Exception as err:  # a missing kernel raises many kinds
        raise Preflight(
            f"bitsandbytes NF4 matmul on {device} failed ({type(err).__name__}: {err}); the kit "
            "carries the wrong kernel library (harness/gpu_bundle.py --bnb-cuda)"
        ) from None
    error = float((out.detach() - x.detach() @ dense.t()).abs().max())
    grad_error = float((x.grad - dense.sum(0)).abs().max())
    if not error < 1e-2 or not grad_error < 1e-2:
        raise Preflight(
            f"bitsandbytes NF4 matmul on {device} is wrong (forward {error:.3g}, "
            f"backward {grad_error:.3g}); do not spend the lease on it"
        )
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    return (
        f"torch {torch.__version__} on {name}; bitsandbytes {bnb.__version__} NF4 matmul "
        f"forward and backward on {device} (max error {error:.2g})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python harness/gpu_preflight.py", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--kit", type=Path, required=True)
    parser.add_argument("--run", type=Path, required=True, help="the box's working folder")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--min-free-gib", type=float, default=4.0)
    args = parser.parse_args(argv)
    try:
        manifest = check_kit(args.kit)
        print(f"preflight ok: kit, {len(manifest['files'])} files match the manifest", flush=True)
        print(f"preflight ok: {check_tree(ROOT, manifest['tree'], args.run)}", flush=True)
        print(f"preflight ok: {check_disk(args.run, args.min_free_gib)}", flush=True)
        print(f"preflight ok: {check_compute(args.device)}", flush=True)
    except Preflight as err:
        print(f"preflight FAILED: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
