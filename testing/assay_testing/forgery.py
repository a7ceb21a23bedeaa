"""What a forger does to a checkpoint after editing it: the manifest re-sealed over the edit, so
the sha256 check passes and only the semantic checks stand between the edit and a resumed run."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def reseal(step: Path) -> None:
    """Recompute the manifest's sha256 and sizes of every file of ``step`` after an edit."""
    manifest_path = step / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    for name, entry in manifest["files"].items():
        data = (step / name).read_bytes()
        entry.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    manifest_path.write_text(json.dumps(manifest))
