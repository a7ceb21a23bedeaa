"""Generated ledgers for ``--gate-select=stale`` (issue 57): gates whose receipts recorded
reading some files, a change to some files, and the selection the rule calls for.

Each case is a throwaway, committed git project: one receipt per gate, recording the code
files and data files it read (with their sha256 at the time) and the torch it ran with; then a
set of those files changed in the working tree. A case may also hold a failing receipt, one
that recorded another torch than the installed one, one edited so it no longer verifies, and
its history may be unreadable (the ``.git`` folder gone, or a shallow clone). The oracle,
:func:`expected`, is independent of the selection code: it is the rule as the docs state it.
"""

from __future__ import annotations

import copy
import hashlib
import random
import shutil
import subprocess
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from assay.qualify.ledger.chain import write_receipt
from support.faults import tamper_cases

FILES = ("src/a.py", "src/b.py", "src/c.py", "data/t.json", "data/u.json", "docs/x.md")
GATES = ("p", "q", "r")
# how a case's history reads: a full checkout, no git at all, a shallow clone
HISTORIES = ("git", "no-git", "shallow")
GIT = ("-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false")
OTHER_TORCH = "0.0.1"


@dataclass(frozen=True)
class Case:
    """One generated ledger and the change made to its project."""

    reads: dict[str, list[str]]
    changed: list[str] = field(default_factory=list)
    spoiled: str | None = None  # a receipt edited after it was sealed
    failing: str | None = None  # a gate whose newest run failed
    moved: str | None = None  # a gate that recorded another torch than the installed one
    history: str = "git"


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", *GIT, *args], cwd=root, check=True, capture_output=True, timeout=60)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _receipt(root: Path, gate: str, files: list[str], case: Case) -> dict:
    receipt = copy.deepcopy(tamper_cases.synthetic_receipt("2026-01-01T00:00:00Z", 0.0, "0" * 64))
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
    receipt["environment"]["torch"] = (
        OTHER_TORCH if gate == case.moved else metadata.version("torch")
    )
    if gate == case.failing:
        receipt["status"] = "fail"
        claim["measurement"]["value"] = 1.0
        claim["verdict"] = "fail"
        claim["margin"] = 1e-3 - 1.0
    return receipt


def write_ledger(root: Path, case: Case) -> Path:
    """A committed git project at ``root`` with one receipt per gate of ``case`` (``.py``
    files read as declared code, the rest as data it opened); returns the receipts folder."""
    for rel in FILES:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"{rel}\n")
    (root / "gates").mkdir()
    receipts = root / "records" / "receipts"
    for gate, files in case.reads.items():
        (root / f"gates/gate_{gate}.py").write_text(f'"""gate-{gate}."""\n')
        write_receipt(_receipt(root, gate, files, case), receipts)
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "ledger")
    return receipts


def build(folder: Path, case: Case) -> tuple[Path, Path]:
    """The project of ``case`` under ``folder``, its change made and its history as drawn;
    returns (project root, receipts folder)."""
    root = folder / "project"
    root.mkdir(parents=True)
    write_ledger(root, case)
    if case.history == "shallow":
        clone = folder / "clone"
        subprocess.run(
            ["git", "clone", "-q", "--depth", "1", root.as_uri(), str(clone)],
            check=True,
            capture_output=True,
            timeout=60,
        )
        root = clone
    elif case.history == "no-git":
        shutil.rmtree(root / ".git")
    receipts = root / "records" / "receipts"
    change(root, case.changed)
    spoil(receipts, case.spoiled)
    return root, receipts


def change(root: Path, changed: list[str]) -> None:
    for rel in changed:
        (root / rel).write_text("changed\n")


def spoil(receipts: Path, gate: str | None) -> None:
    """Edit ``gate``'s receipt so it no longer matches its seal (nothing when None)."""
    if gate is not None:
        receipt = next((receipts / gate).glob("*.json"))
        text = receipt.read_bytes()
        receipt.write_bytes(text.replace(b'"created": "2026', b'"created": "2025', 1))


def expected(case: Case) -> set[str]:
    """The oracle: every gate when the history cannot be read; else the gates that recorded
    reading a changed file, whose receipt was spoiled, whose run failed or whose recorded
    torch is not the installed one."""
    if case.history != "git":
        return set(case.reads)
    chosen = {g for g, files in case.reads.items() if set(files) & set(case.changed)}
    return chosen | ({case.spoiled, case.failing, case.moved} - {None})


def drawn(seed: int, count: int) -> list[Case]:
    """``count`` seeded cases: each gate reads up to three files, up to three files change;
    in about one case in five each, a receipt is spoiled, a run failed, torch moved, and the
    history cannot be read."""
    rng = random.Random(seed)

    def some_gate() -> str | None:
        return rng.choice(GATES) if rng.random() < 0.2 else None

    return [
        Case(
            reads={g: rng.sample(FILES, rng.randint(0, 3)) for g in GATES},
            changed=rng.sample(FILES, rng.randint(0, 3)),
            spoiled=some_gate(),
            failing=some_gate(),
            moved=some_gate(),
            history=rng.choice(HISTORIES[1:]) if rng.random() < 0.2 else "git",
        )
        for _ in range(count)
    ]
