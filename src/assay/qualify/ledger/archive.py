"""Receipts made away from home (a lent GPU box) travel back as one archive and join the ledger.

Design: **the box chains onto the ledger heads it carried.** The tree that travels holds
``records/receipts``; the box seeds its own receipts folder from it, so each receipt made there
links (``previous_receipt_sha256``, sealed content) to the head the gate had when the kit was
built. Seals are never recomputed, so an archive can only join a ledger whose head is still
that one: :func:`import_archive` refuses, with one line, when the head moved meanwhile (run the
kit again from the current tree). One ledger per gate keeps every device's runs in one order;
the standing then gives each device its own head, and since an archive lands only directly on
the head it was built against, an older commit's receipt cannot be appended after a newer one
of the same device.

The archive (``.tar.gz``) holds ``manifest.json`` (format, the kit's provenance, each gate's
chained-onto head and receipt names in ledger order, every other member's bytes and sha256),
the receipts under ``receipts/<gate>/``, their figures under ``figures/<gate>/``, and whatever
else the packer adds (logs, summary). Importing checks the archive against its manifest and
every receipt against the schema, its seal and its back-link before writing anything.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from assay.bounded import parse_json
from assay.errors import AssayError
from assay.qualify.ledger.import_commit import GatePlan, same_bytes

ARCHIVE_FORMAT = "assay.receipt-archive/1"
MANIFEST = "manifest.json"
# what a member may be called: no absolute paths, no .., nothing odd
_MEMBER = re.compile(r"^(?!\.\.?/)[A-Za-z0-9_.-]+(/(?!\.\.?(/|$))[A-Za-z0-9_.-]+){0,3}$")
MAX_UNPACKED = 512 << 20  # bytes read from an archive at most, whatever its headers say


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def receipts_after(receipts_dir: Path, gate: str, base: str | None) -> list[tuple[str, str]]:
    """Ledger entries of ``gate`` written after the entry sealed ``base`` (all when None).
    AssayError when ``base`` is not in the ledger."""
    from assay.qualify.ledger.chain import ledger_path, read_ledger

    path = ledger_path(receipts_dir, gate)
    entries, problems = read_ledger(path) if path.exists() else ([], [])
    if problems:
        raise AssayError(problems[0])
    if base is None:
        return entries
    shas = [sha for sha, _ in entries]
    if base not in shas:
        raise AssayError(f"{path}: the seeded head {base[:12]} is not in the ledger")
    return entries[shas.index(base) + 1 :]


def pack(
    target: Path,
    receipts_dir: Path,
    records_dir: Path,
    base_heads: dict[str, str | None],
    provenance: dict[str, Any],
    extra: dict[str, bytes] | None = None,
) -> dict[str, Any]:
    """Write ``target`` (.tar.gz): every receipt each gate of ``base_heads`` gained after its
    base head, with its figures and the ``extra`` members (name -> bytes). Written to a temp
    name, fsynced and renamed; returns the manifest."""
    from assay.atomic import fsync_file

    members: dict[str, bytes] = {}
    gates: dict[str, dict[str, Any]] = {}
    for gate, base in sorted(base_heads.items()):
        names = [name for _, name in receipts_after(receipts_dir, gate, base)]
        if not names:
            continue  # nothing to bring home: an empty entry would only block the import
        for name in names:
            data = (Path(receipts_dir) / gate / name).read_bytes()
            members[f"receipts/{gate}/{name}"] = data
            for figure in parse_json(data).get("figures", []):
                members[figure["path"]] = (Path(records_dir) / figure["path"]).read_bytes()
        gates[gate] = {"chained_onto": base, "receipts": names}
    for name, data in (extra or {}).items():
        if not _MEMBER.match(name) or name == MANIFEST or name in members:
            raise AssayError(f"archive member {name!r}: expected a new relative name")
        members[name] = data
    manifest = {
        "format": ARCHIVE_FORMAT,
        "provenance": provenance,
        "gates": gates,
        "files": [
            {"path": name, "bytes": len(data), "sha256": _sha256(data)}
            for name, data in sorted(members.items())
        ],
    }
    target = Path(target)
    tmp = target.with_name(f".{target.name}.tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for name, data in [(MANIFEST, _manifest_bytes(manifest)), *sorted(members.items())]:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    fsync_file(tmp)
    tmp.replace(target)
    return manifest


def _manifest_bytes(manifest: dict[str, Any]) -> bytes:
    return (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode("utf-8")


def read_archive(path: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The manifest and members of an archive, checked: only plain files with safe names,
    each listed in the manifest with its bytes and sha256, none missing, none extra. Every
    size is capped while streaming (:mod:`assay.qualify.ledger.tar_stream`). AssayError names
    the archive and the first thing wrong."""
    from assay.qualify.ledger.tar_stream import Caps, read_members

    members: dict[str, bytes] = {}
    for name, data in read_members(path, Caps(total_bytes=MAX_UNPACKED)):
        if not _MEMBER.match(name) or name in members:
            raise AssayError(f"{path}: member {name!r} is not a plain, safe, new file")
        members[name] = data
    try:
        manifest = parse_json(members.pop(MANIFEST))
    except KeyError:
        raise AssayError(f"{path}: no {MANIFEST}") from None
    except ValueError as err:
        raise AssayError(f"{path}: {MANIFEST} is not JSON ({err})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != ARCHIVE_FORMAT:
        raise AssayError(f"{path}: {MANIFEST} format is not {ARCHIVE_FORMAT!r}")
    sums = _listed_files(path, manifest.get("files", []))
    if not _gates_well_formed(manifest.get("gates", {})):
        raise AssayError(
            f"{path}: {MANIFEST} gates: expected {{gate name: {{chained_onto: 64 hex or null, "
            "receipts: [file names]}}}}"
        )
    for name in sorted(set(sums) | set(members)):
        if name not in members:
            raise AssayError(f"{path}: {name} is in the manifest but not in the archive")
        if name not in sums:
            raise AssayError(f"{path}: {name} is in the archive but not in the manifest")
        if len(members[name]) != sums[name][1]:
            raise AssayError(
                f"{path}: {name} holds {len(members[name])} bytes, the manifest says "
                f"{sums[name][1]}"
            )
        if _sha256(members[name]) != sums[name][0]:
            raise AssayError(f"{path}: {name} sha256 differs from the manifest's")
    listed = {
        f"receipts/{gate}/{name}"
        for gate, entry in manifest.get("gates", {}).items()
        for name in entry.get("receipts") or []
    }
    stray = sorted(n for n in members if n.startswith("receipts/") and n not in listed)
    if stray:  # a receipt nothing would import must not vanish behind an "ok"
        raise AssayError(f"{path}: {stray[0]} is in the archive but no gate of {MANIFEST} lists it")
    return manifest, members


def _listed_files(archive: Path, files: Any) -> dict[str, tuple[str, int]]:
    """path -> (sha256, bytes) of the manifest's ``files``; AssayError naming the first bad
    entry."""
    if not isinstance(files, list):
        raise AssayError(f"{archive}: {MANIFEST} files: expected a list of {{path, bytes, sha256}}")
    sums: dict[str, tuple[str, int]] = {}
    for i, entry in enumerate(files):
        ok = (
            isinstance(entry, dict)
            and isinstance(entry.get("path"), str)
            and isinstance(entry.get("sha256"), str)
            and isinstance(entry.get("bytes"), int)
            and not isinstance(entry.get("bytes"), bool)
        )
        if not ok:
            raise AssayError(
                f"{archive}: {MANIFEST} files[{i}]: expected {{path: text, bytes: integer, "
                "sha256: text}}"
            )
        sums[entry["path"]] = (entry["sha256"], entry["bytes"])
    return sums


def _gates_well_formed(gates: Any) -> bool:
    from assay.qualify.core.layout import GATE_NAME

    if not isinstance(gates, dict):
        return False
    for gate, entry in gates.items():
        if not (isinstance(gate, str) and GATE_NAME.match(gate) and isinstance(entry, dict)):
            return False
        base, names = entry.get("chained_onto"), entry.get("receipts", [])
        if base is not None and not (isinstance(base, str) and re.fullmatch(r"[0-9a-f]{64}", base)):
            return False
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            return False
    return True


@dataclass
class Imported:
    """What an import wrote, and what was already home."""

    written: list[Path] = field(default_factory=list)
    present: list[Path] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)
    gates: list[str] = field(default_factory=list)


def _checked_gate(
    archive: Path, gate: str, entry: dict[str, Any], members: dict[str, bytes], receipts_dir: Path
) -> tuple[list[tuple[str, dict[str, Any], bytes]], int, list[tuple[str, str]]]:
    """The gate's receipts from the archive, each valid and linked to the one before, how
    many of them the home ledger already holds right after the base head, and the ledger's
    entries. Reads only."""
    from assay.qualify.ledger.chain import ledger_path, read_ledger
    from assay.qualify.ledger.receipt import problems_in, receipt_filename

    link = entry.get("chained_onto")
    found = []
    for name in entry.get("receipts", []):
        member = f"receipts/{gate}/{name}"
        if member not in members:
            raise AssayError(f"{archive}: {member} is listed for gate {gate} but absent")
        try:
            receipt = parse_json(members[member])
        except ValueError as err:
            raise AssayError(f"{archive}: {member} is not JSON ({err})") from None
        problems = problems_in(receipt)
        if problems:
            raise AssayError(f"{archive}: {member}: invalid receipt: {problems[0]}")
        if receipt["gate"] != gate or receipt_filename(receipt) != name:
            raise AssayError(f"{archive}: {member} is not named and filed as its content says")
        if receipt.get("previous_receipt_sha256") != link:
            raise AssayError(f"{archive}: {member} does not link to the receipt before it")
        link = receipt["receipt_sha256"]
        found.append((name, receipt, members[member]))
    ledger = ledger_path(receipts_dir, gate)
    if not ledger.exists() and any(
        not (p.name.startswith(".")) for p in (Path(receipts_dir) / gate).glob("*.json")
    ):
        raise AssayError(f"{ledger}: missing; run `assay render` once to list the receipts")
    entries, problems = read_ledger(ledger) if ledger.exists() else ([], [])
    if problems:
        raise AssayError(problems[0])
    shas = [sha for sha, _ in entries]
    base = entry.get("chained_onto")
    start = 0 if base is None else shas.index(base) + 1 if base in shas else -1
    if start < 0:  # only a base that is not None gives -1
        raise AssayError(
            f"{ledger}: the archive chains {gate} onto {cast(str, base)[:12]}, which this ledger "
            "does not hold; import into the records the kit was built from"
        )
    held = shas[start:]
    present = 0
    while (
        present < min(len(held), len(found))
        and held[present] == found[present][1]["receipt_sha256"]
    ):
        present += 1
    if present < len(held) and present < len(found):
        head = shas[-1][:12]
        raise AssayError(
            f"{ledger}: head moved since the kit was built (the archive chains {gate} onto "
            f"{(base or 'genesis')[:12]}, the head is now {head}); run the kit again from this tree"
        )
    return found, present, entries


def _plan(
    archive: Path,
    manifest: dict[str, Any],
    members: dict[str, bytes],
    gates: list[str],
    receipts_dir: Path,
    records_dir: Path,
) -> tuple[list[GatePlan], list[Path]]:
    """(what each gate gains, the receipts already home): every check, nothing written.

    A receipt file on disk that no ledger lists, with exactly the archive's bytes, was placed
    by an import that was interrupted before its LEDGER; it is listed now, not refused."""
    plans: list[GatePlan] = []
    already: list[Path] = []
    for gate in gates:
        found, present, entries = _checked_gate(
            archive, gate, manifest["gates"][gate], members, receipts_dir
        )
        plan = GatePlan(gate, entries=entries)
        for name, receipt, data in found[present:]:
            target = Path(receipts_dir) / gate / name
            if target.exists():
                if not same_bytes(target, data):
                    raise AssayError(f"{target}: exists but is not in the ledger; not overwritten")
                plan.on_disk.add(name)
            for figure in receipt.get("figures", []):
                if not re.fullmatch(
                    rf"figures/{re.escape(gate)}/[A-Za-z0-9_.-]+\.png", figure["path"]
                ):
                    raise AssayError(f"{archive}: figure path {figure['path']!r} is not its gate's")
                image = members.get(figure["path"])
                if image is None or _sha256(image) != figure["sha256"]:
                    raise AssayError(f"{archive}: figure {figure['path']} missing or altered")
                home = Path(records_dir) / figure["path"]
                if home.exists() and not same_bytes(home, image):
                    raise AssayError(f"{home}: exists with other bytes; not overwritten")
                if not home.exists():
                    plan.figures[figure["path"]] = image
            plan.receipts.append((name, data, receipt["receipt_sha256"]))
        if plan.receipts:
            plans.append(plan)
        already.extend(Path(receipts_dir) / gate / name for name, _, _ in found[:present])
    return plans, already


def import_archive(archive: Path, receipts_dir: Path, records_dir: Path) -> Imported:
    """Add an archive's receipts (and figures) to ``receipts_dir``/``records_dir``, all or
    nothing: every check first (manifest, schema, seals, back-links, ledger heads, figure
    bytes), so a refused archive writes nothing, not even a folder; then, under the gates'
    locks, the checks again and the staged commit of
    :mod:`assay.qualify.ledger.import_commit`. An import interrupted at any write leaves the
    records as they were or completable by importing the same archive again. Receipts the
    ledger already holds are skipped, so the same archive, or a later one from the same lease
    that repeats them, imports once."""
    from assay.qualify.ledger.chain import locked
    from assay.qualify.ledger.import_commit import commit, remove_stale_temporaries

    receipts_dir, records_dir = Path(receipts_dir), Path(records_dir)
    manifest, members = read_archive(archive)
    gates = sorted(g for g, e in manifest.get("gates", {}).items() if e.get("receipts"))
    plans, already = _plan(archive, manifest, members, gates, receipts_dir, records_dir)
    if not plans:
        return Imported(present=already)
    wanted = [p.gate for p in plans]
    new_folders = [receipts_dir / g for g in wanted if not (receipts_dir / g).exists()]
    with contextlib.ExitStack() as held:
        for gate in wanted:  # checked again and written under the locks: no run lands between
            held.enter_context(locked(receipts_dir, gate))
        try:
            plans, already = _plan(archive, manifest, members, wanted, receipts_dir, records_dir)
            remove_stale_temporaries(
                [receipts_dir / g for g in wanted] + [records_dir / "figures" / g for g in wanted]
            )
            done = commit(plans, receipts_dir, records_dir)
        except OSError as err:
            imported = getattr(err, "committed", [])
            raise AssayError(
                f"{archive}: import stopped ({err.strerror or err}); "
                + (f"gates {', '.join(imported)} imported, " if imported else "")
                + "the records are otherwise as they were; run the same command again"
            ) from None
        finally:
            for folder in new_folders:  # made only to hold a lock
                with contextlib.suppress(OSError):
                    folder.rmdir()
    result = Imported(present=already, gates=done)
    for plan in plans:
        result.figures.extend(Path(records_dir) / path for path in sorted(plan.figures))
        result.written.extend(receipts_dir / plan.gate / name for name, _, _ in plan.receipts)
    return result
