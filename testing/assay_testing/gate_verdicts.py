"""Gate verdicts of curated mutants, kept between runs and reused only for identical inputs.

Measuring every curated mutant against the gates takes longer than a working session on two
cores (a survivor runs every covering gate test, up to 15 minutes). The campaign therefore
writes each mutant's verdict as soon as it has one, and a later run reuses a verdict only when
everything that decided it is byte for byte what it was: the covering tests, the sha256 of every
file those tests' claims executed or declared (as the gates' receipts list them), the gate and
support files, the mutation machinery and defect catalog, and the Python and torch versions.
Anything else changed means the mutant runs again. A campaign stopped part way keeps what it
measured, and the next one finishes it.

The store is one JSON file, written atomically after each verdict. A timeout or a run that could
not start says how loaded the machine was, not what the gates caught, so it is not kept.
"""

from __future__ import annotations

import hashlib
import json
import platform
import threading
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from assay.atomic import atomic_write_json
from assay.digest import file_sha256

FORMAT = "assay.gate-verdicts/1"
# What every armed gate run goes through besides the files its claims read (which the receipts
# list): the gates' conftest and support, the runner, the defect catalog and how a defect is
# armed. A change there reruns every mutant. This module only stores, so it is not among them.
MACHINERY = (
    "gates/conftest.py",
    "gates/support",
    "testing/assay_testing/mutation.py",
    "testing/assay_testing/mutants.py",
    "testing/assay_testing/defects",
    "testing/assay_testing/patching.py",
    "testing/assay_testing/stop_at_claim.py",
    "testing/assay_testing/boot",
)
# Verdicts that say how loaded the machine was, not what the gates caught: never kept.
UNSTABLE = ("timeout", "error")


def _files(root: Path, entries: Iterable[str]) -> list[str]:
    """Repository-relative paths of the files ``entries`` name (a folder: its .py, .yaml and
    .json files), sorted."""
    found: set[str] = set()
    for entry in entries:
        path = root / entry
        if path.is_dir():
            found |= {
                str(p.relative_to(root))
                for p in path.rglob("*")
                if p.suffix in (".py", ".yaml", ".json") and "__pycache__" not in p.parts
            }
        else:
            found.add(entry)
    return sorted(found)


def claim_files(receipt: dict[str, Any], tests: Sequence[str]) -> set[str]:
    """Every path the claims of ``tests`` executed, imported or declared in ``receipt``."""
    return {
        f["path"]
        for claim in receipt["claims"]
        if claim["test"] in tests
        for key in ("executed_files", "import_files", "code_files")
        for f in claim.get(key) or []
    }


def _sha256(path: Path) -> str:
    try:
        return file_sha256(path)
    except OSError:
        return "absent"


def verdict_key(
    name: str,
    selected: Sequence[str],
    read_files: Iterable[str],
    root: Path,
    versions: dict[str, str],
) -> str:
    """sha256 over what decides mutant ``name``'s gate verdict: the selected tests, each file
    they read or that runs them (path and content), and ``versions``."""
    gate_files = {node.split("::")[0] for node in selected}
    paths = _files(root, [*MACHINERY, *gate_files, *read_files])
    lines = [FORMAT, name, *selected, json.dumps(versions, sort_keys=True)]
    lines += [f"{path} {_sha256(root / path)}" for path in paths]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


# Distributions the gates run or compare against; their code is outside the tree.
DISTRIBUTIONS = ("torch", "transformers", "peft", "bitsandbytes", "numpy", "gguf", "tokenizers")


def environment_versions() -> dict[str, str]:
    """The interpreter and the versions of the libraries a verdict was measured with."""
    found = {"python": platform.python_version()}
    for name in DISTRIBUTIONS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "absent"
    return found


@dataclass(frozen=True)
class StoredVerdict:
    """One mutant's measured gate verdict and the key of the inputs that decided it."""

    key: str
    verdict: str
    wall_s: float
    selected: tuple[str, ...]
    failed_tests: tuple[str, ...]
    failed_claims: tuple[str, ...]
    clean: str | None  # the runner's verdict on the failing tests run with no mutant armed
    measured: str  # UTC time of the measurement
    tail: str


class VerdictStore:
    """The verdict file: ``get`` a verdict whose key still matches, ``put`` a new one (written
    at once, atomically; safe from several threads)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.verdicts: dict[str, dict[str, Any]] = {}
        if path.is_file():
            data = json.loads(path.read_text("utf-8"))
            if data.get("format") != FORMAT:
                raise ValueError(f"{path}: format {data.get('format')!r}, expected {FORMAT}")
            self.verdicts = data["verdicts"]

    def get(self, name: str, key: str) -> StoredVerdict | None:
        """The stored verdict of ``name`` when it was measured on inputs with this ``key``."""
        found = self.verdicts.get(name)
        if found is None or found["key"] != key:
            return None
        return StoredVerdict(
            **{k: tuple(v) if isinstance(v, list) else v for k, v in found.items()}
        )

    def put(self, name: str, verdict: StoredVerdict) -> None:
        """Keep ``verdict`` (written at once), unless it or the clean run it rests on is one
        of :data:`UNSTABLE`: a run past its budget or one that could not start is measured
        again next time (a clean run that timed out would make a kill read as invalid)."""
        if verdict.verdict in UNSTABLE or verdict.clean in UNSTABLE:
            return
        with self.lock:
            self.verdicts[name] = asdict(verdict)
            atomic_write_json(
                self.path, {"format": FORMAT, "verdicts": dict(sorted(self.verdicts.items()))}
            )


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
