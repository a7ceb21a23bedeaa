"""Generated ledgers for ``--gate-select=stale`` (issue 57): gates whose receipts recorded
reading some files, a change to some files, perhaps a receipt edited so it no longer verifies,
and the selection the rule calls for.

Each case is a throwaway, committed git project: one passing receipt per gate, recording the
code files and data files it read (with their sha256 at the time), and then a set of those
files changed in the working tree. The oracle is independent of the selection code: a gate
must run exactly when a file it recorded reading changed or its ledger no longer verifies.
"""

from __future__ import annotations

import copy
import hashlib
import random
import subprocess
from pathlib import Path

from assay.qualify.ledger.chain import write_receipt
from support import faults_tamper_cases as tamper_cases

FILES = ("src/a.py", "src/b.py", "src/c.py", "data/t.json", "data/u.json", "docs/x.md")
GATES = ("p", "q", "r")
GIT = ("-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false")


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", *GIT, *args], cwd=root, check=True, capture_output=True, timeout=60)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_ledger(root: Path, reads: dict[str, list[str]]) -> Path:
    """A committed git project at ``root`` with one passing receipt per gate that read
    ``reads[gate]`` (``.py`` files as declared code, the rest as data it opened); returns the
    receipts folder."""
    for rel in FILES:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"{rel}\n")
    (root / "gates").mkdir()
    receipts = root / "records" / "receipts"
    for gate, files in reads.items():
        (root / f"gates/gate_{gate}.py").write_text(f'"""gate-{gate}."""\n')
        receipt = copy.deepcopy(
            tamper_cases.synthetic_receipt("2026-01-01T00:00:00Z", 0.0, "0" * 64)
        )
        receipt["gate"] = gate
        receipt["gate_file"] = f"gates/gate_{gate}.py"
        code = [f for f in files if f.endswith(".py")]
        data = [f for f in files if not f.endswith(".py")]
        claim = receipt["claims"][0]
        claim["code_files"] = [{"path": p, "sha256": _sha(root / p)} for p in code]
        claim["read_files"] = [{"path": p, "sha256": _sha(root / p)} for p in data]
        receipt["code"]["files"] = [
            {"path": p, "sha256": _sha(root / p)} for p in [f"gates/gate_{gate}.py", *code]
        ]
        write_receipt(receipt, receipts)
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "ledger")
    return receipts


def change(root: Path, changed: list[str]) -> None:
    for rel in changed:
        (root / rel).write_text("changed\n")


def spoil(receipts: Path, gate: str | None) -> None:
    """Edit ``gate``'s receipt so it no longer matches its seal (nothing when None)."""
    if gate is not None:
        receipt = next((receipts / gate).glob("*.json"))
        receipt.write_bytes(receipt.read_bytes().replace(b'"pass"', b'"PASS"', 1))


def expected(reads: dict[str, list[str]], changed: list[str], spoiled: str | None) -> set[str]:
    """The oracle: the gates that recorded reading a changed file, and the spoiled one."""
    chosen = {g for g, files in reads.items() if set(files) & set(changed)}
    return chosen | ({spoiled} if spoiled else set())


def drawn(seed: int, count: int) -> list[tuple[dict[str, list[str]], list[str], str | None]]:
    """``count`` seeded cases: each gate reads up to three files, up to three files change,
    and in about one case of four one gate's receipt is spoiled."""
    rng = random.Random(seed)
    return [
        (
            {g: rng.sample(FILES, rng.randint(0, 3)) for g in GATES},
            rng.sample(FILES, rng.randint(0, 3)),
            rng.choice(GATES) if rng.random() < 0.25 else None,
        )
        for _ in range(count)
    ]
