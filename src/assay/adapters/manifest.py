"""Export manifests: the files of an exported folder bound together by their sha256.

``assay export`` writes ``assay_manifest.json`` last, inside the staged folder: the format,
and the size and sha256 of every other file. A loader that finds the manifest checks every
listed file against it and refuses a folder with a missing, changed or unlisted file, so a
config from one export can never be read with the weights of another. A folder without a
manifest (one PEFT wrote) loads as before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from assay.atomic import json_bytes, write_synced
from assay.bounded import read_json_file
from assay.digest import file_sha256
from assay.errors import ConfigError

MANIFEST = "assay_manifest.json"
FORMAT = "assay.export/1"  # an on-disk format id: never renamed


def write_manifest(folder: Path, kind: str, base: dict[str, Any] | None = None) -> Path:
    """Write the manifest of every regular file in ``folder`` (a staged, unpublished folder),
    with ``base``, the model the export came from (its name or path, revision and sha256),
    when known."""
    files = {
        p.name: {"sha256": file_sha256(p), "bytes": p.stat().st_size}
        for p in sorted(folder.iterdir())
        if p.is_file() and p.name != MANIFEST
    }
    path = folder / MANIFEST
    path.unlink(missing_ok=True)
    manifest: dict[str, Any] = {"format": FORMAT, "kind": kind, "files": files}
    if base:
        manifest["base_model"] = base
    write_synced(path, json_bytes(manifest))
    return path


def verify_manifest(folder: Path) -> dict[str, Any] | None:
    """Check ``folder`` against its manifest; None when it has none (a foreign folder).

    ConfigError (one line, naming the file and the field) for a malformed manifest, a listed
    file that is missing, resized or changed, or a file beside it that it does not list.
    """
    path = folder / MANIFEST
    if not path.is_file():
        return None
    manifest = read_json_file(path, ConfigError)
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ConfigError(f"{path}: format: not an {FORMAT} manifest")
    if not isinstance(files, dict) or not all(
        isinstance(e, dict) and isinstance(e.get("sha256"), str) and isinstance(e.get("bytes"), int)
        for e in files.values()
    ):
        raise ConfigError(f"{path}: files: missing or malformed")
    for name, entry in sorted(files.items()):
        target = folder / name
        if "/" in name or name in ("", ".", "..") or not target.is_file():
            raise ConfigError(f"{target}: listed in {MANIFEST} but missing")
        if target.stat().st_size != entry["bytes"] or file_sha256(target) != entry["sha256"]:
            raise ConfigError(
                f"{target}: sha256 differs from {MANIFEST} (changed or from another export)"
            )
    extra = sorted(p.name for p in folder.iterdir() if p.name != MANIFEST and p.name not in files)
    if extra:
        raise ConfigError(f"{folder / extra[0]}: not listed in {MANIFEST} (a stray file)")
    return manifest
