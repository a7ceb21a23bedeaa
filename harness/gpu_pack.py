"""Pack what a GPU box made into what its output folder can return: one archive, three notes.

Usage: python harness/gpu_pack.py --run build/gpu-run --out "$OUT"

The device tool brings back at most 8 files, each at most 16 MiB, at most two folders deep. This
writes exactly four plain files directly in OUT:

- ``assay-gpu-<commit12>.tar.gz``: the receipts each gate gained on the box since the kit's
  ledger heads (:func:`assay.qualify.ledger.archive.pack`, with their figures), the box's
  provenance,
  ``summary.tsv``, ``environment.txt``, the run log and each gate's log (gzipped; cut to their
  last 256 KiB, then less, until the archive fits 16 MiB);
- ``summary.txt``: one line per gate (exit code, seconds, receipt status) and the archive's sha256;
- ``environment.txt``: python, torch, CUDA, GPU;
- ``import.txt``: the command that brings the archive home.

Exit 0 when the output fits the limits, 1 when it does not (one line says which), 2 on bad input.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20
MAX_FILES, MAX_BYTES, MAX_DEPTH = 8, 16 * MIB, 2
LOG_TAILS = (256 << 10, 32 << 10, 4 << 10, 0)  # bytes of each log kept, tried in turn


def out_problems(out: Path) -> list[str]:
    """What in ``out`` the device tool would not bring back: too many files, too deep, too big."""
    files = [p for p in out.rglob("*") if p.is_file() or p.is_symlink()]
    problems = []
    if len(files) > MAX_FILES:
        problems.append(f"{out}: {len(files)} files, at most {MAX_FILES} come back")
    for path in files:
        rel = path.relative_to(out)
        if len(rel.parts) - 1 > MAX_DEPTH:
            problems.append(f"{rel}: {len(rel.parts) - 1} folders deep, at most {MAX_DEPTH}")
        if path.is_symlink() or path.stat().st_size > MAX_BYTES:
            problems.append(f"{rel}: a link or over {MAX_BYTES // MIB} MiB")
    return problems


def _tail(path: Path, keep: int) -> bytes:
    data = path.read_bytes()
    if len(data) <= keep:
        return data
    return b"[... cut: the last %d of %d bytes follow]\n" % (keep, len(data)) + data[-keep:]


def _json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def _summary_rows(run: Path) -> list[list[str]]:
    path = run / "summary.tsv"
    if not path.is_file():
        return []
    return [line.split("\t") for line in path.read_text().splitlines()[1:] if line.strip()]


def _status_of(run: Path, gate: str, seeded: dict[str, str | None]) -> str:
    from assay.qualify.ledger.archive import receipts_after

    entries = receipts_after(run / "receipts", gate, seeded[gate])
    if not entries:
        return "no receipt"
    receipt = json.loads((run / "receipts" / gate / entries[-1][1]).read_text())
    return f"{receipt['status']} ({receipt['receipt_sha256'][:12]}, {len(entries)} on this box)"


def pack_run(run: Path, out: Path) -> Path:
    """Write the four files into ``out``; return the archive's path."""
    from assay.qualify.ledger.archive import pack

    # a run stopped before seeding or preflight still sends its summary and logs home
    seeded = _json(run / "seeded.json").get("heads", {})
    provenance = _json(run / "provenance.json") or {"commit": None, "dirty": None}
    commit = provenance.get("commit") or "unknown"
    target = out / f"assay-gpu-{commit[:12]}.tar.gz"
    logs = sorted((run / "logs").glob("*.log"))
    logs += [p for p in [run / "gpu_qualify.log"] if p.is_file()]
    small = {
        name: (run / name).read_bytes()
        for name in ("summary.tsv", "environment.txt")
        if (run / name).is_file()
    }
    for keep in LOG_TAILS:
        extra = dict(small)
        if keep:
            for log in logs:
                extra[f"logs/{log.name}.gz"] = gzip.compress(_tail(log, keep), mtime=0)
        pack(target, run / "receipts", run / "records", seeded, provenance, extra)
        if target.stat().st_size <= MAX_BYTES:
            break
    digest = hashlib.sha256(target.read_bytes()).hexdigest()
    lines = [f"assay GPU kit run of {commit[:12]}; dirty: {provenance.get('dirty')}"]
    lines += [
        f"gate-{row[0]}: exit {row[1]} in {row[2]} s; receipt {_status_of(run, row[0], seeded)}"
        if row[0] in seeded
        else f"{row[0]}: {row[1]}"
        for row in _summary_rows(run)
        if len(row) >= 3
    ]
    lines.append(f"{target.name}: {target.stat().st_size} bytes, sha256 {digest}")
    (out / "summary.txt").write_text("\n".join(lines) + "\n")
    if (run / "environment.txt").is_file():
        (out / "environment.txt").write_bytes((run / "environment.txt").read_bytes())
    (out / "import.txt").write_text(
        "# on the machine the kit was built on, in the tree it was built from:\n"
        f"sha256sum {target.name}   # expect {digest}\n"
        f"assay import-gpu FETCHED/{target.name}\n"
        "git add records && git commit -m 'Imported the GPU kit run'\n"
    )
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python harness/gpu_pack.py", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--run", type=Path, required=True, help="the box's working folder")
    parser.add_argument("--out", type=Path, required=True, help="the folder that comes back")
    args = parser.parse_args(argv)
    from assay.errors import AssayError

    args.out.mkdir(parents=True, exist_ok=True)
    try:
        target = pack_run(args.run, args.out)
    except (AssayError, OSError, ValueError, KeyError) as err:
        print(f"gpu_pack: {err}", file=sys.stderr)
        return 2
    problems = out_problems(args.out)
    for line in problems:
        print(f"gpu_pack: {line}", file=sys.stderr)
    print(f"packed {target} ({target.stat().st_size / MIB:.2f} MiB)")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
