"""Tamper cases for published gate records: each one a deliberate edit a reader must see.

A case starts from a small, honest ledger of three chained receipts (written through
``write_receipt``, records and index rendered), then tampers the way a careful forger would:
it re-renders the records afterwards so that only the ledger, back-links, signatures or
staleness can give it away. :func:`detected` runs ``verify`` (with signatures and staleness)
and says whether the tamper shows. Shared by gates/gate_faults.py and tests/qualify.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from assay.errors import AssayError
from assay.qualify.ledger.chain import HEADER, LEDGER, ledger_path, read_ledger, write_receipt
from assay.qualify.ledger.receipt import dump_receipt, receipt_filename, seal
from assay.qualify.publishing.index import render_all
from assay.qualify.publishing.verify import verify_all, verify_signatures, verify_stale

GATE = "demo"
CODE = "src/demo_impl.py"


def synthetic_receipt(created: str, value: float, code_sha: str) -> dict[str, Any]:
    """An unsealed, schema-valid receipt of gate ``demo`` measuring ``value`` (<= 1e-3)."""
    return {
        "schema": "assay.qualification-receipt/1",
        "gate": GATE,
        "receipt_id": str(uuid.uuid4()),
        "created": created,
        "status": "pass",
        "claims": [
            {
                "id": "diff",
                "statement": "outputs agree",
                "kind": "correctness",
                "measurement": {"value": value, "unit": "max abs"},
                "threshold": {"op": "<=", "value": 1e-3, "tolerance": 0.1},
                "verdict": "pass",
                "margin": 1e-3 - value,
                "controls": [{"name": "broken", "measured": 1.0, "failed": True}],
                "test": "gates/gate_demo.py::test_diff",
            }
        ],
        "corrects": [],
        "not_tested": [],
        "inputs": [],
        "figures": [],
        "notes": [],
        "code": {
            "commit": None,
            "dirty": None,
            "package_version": None,
            "files": [{"path": CODE, "sha256": code_sha}],
        },
        "environment": {
            "python": "CPython 3.11",
            "os": "Linux",
            "torch": None,
            "cuda": None,
            "cudnn": None,
            "bitsandbytes": None,
            "transformers": None,
            "cpu": {"model": "test cpu", "threads": 2, "torch_threads": None},
            "gpu": None,
            "env": {},
        },
        "run": {
            "argv": [],
            "nox_session": None,
            "seeds": [],
            "duration_s": 0.0,
            "device": "cpu",
            "tests": [{"nodeid": "gates/gate_demo.py::test_diff", "outcome": "passed"}],
        },
        "baseline": None,
    }


class Ledger:
    """An honest three-receipt ledger under ``root`` (``root/records``, ``root/src``)."""

    def __init__(self, root: Path) -> None:
        import hashlib

        self.root = Path(root)
        self.records = self.root / "records"
        self.receipts = self.records / "receipts"
        code = self.root / CODE
        code.parent.mkdir(parents=True, exist_ok=True)
        code.write_text("VALUE = 1\n", encoding="utf-8")
        sha = hashlib.sha256(code.read_bytes()).hexdigest()
        self.paths = [
            write_receipt(
                synthetic_receipt(f"2026-01-0{i + 1}T00:00:00Z", i * 1e-4, sha), self.receipts
            )
            for i in range(3)
        ]
        self.rerender()

    def rerender(self) -> None:
        """What a forger does last: bring records and index in line with the receipts."""
        render_all(self.receipts, self.records, self.root)

    def entries(self) -> list[tuple[str, str]]:
        return read_ledger(ledger_path(self.receipts, GATE))[0]

    def write_entries(self, entries: list[tuple[str, str]]) -> None:
        text = HEADER + "".join(f"{sha} {name}\n" for sha, name in entries)
        (self.receipts / GATE / LEDGER).write_text(text, encoding="utf-8")

    def load(self, i: int) -> dict[str, Any]:
        return json.loads(self.paths[i].read_text("utf-8"))

    def problems(self, allowed_signers: Path | None = None) -> list[str]:
        """Every problem ``assay verify --stale`` reports (signatures included)."""
        found = verify_all(self.receipts, self.records)
        option = str(allowed_signers) if allowed_signers else None
        found += verify_signatures(self.receipts, self.records, option=option, require=False)[0]
        found += verify_stale(self.receipts, self.root)[0]
        return found


def _forge(ledger: Ledger, index: int, edit: Callable[[dict[str, Any]], None]) -> None:
    """Apply ``edit`` to receipt ``index`` (the whole receipt), re-seal it under its new name
    and fix its LEDGER line, as a careful forger would."""
    data = ledger.load(index)
    edit(data)
    forged = seal(data)
    target = ledger.paths[index].with_name(receipt_filename(forged))
    target.write_bytes(dump_receipt(forged))
    ledger.paths[index].unlink()
    entries = ledger.entries()
    entries[index] = (forged["receipt_sha256"], target.name)
    ledger.write_entries(entries)


def reseal(ledger: Ledger) -> None:
    """Edit the middle receipt's measurement, re-seal, rename, fix its LEDGER line."""

    def edit(data: dict[str, Any]) -> None:
        data["claims"][0]["measurement"]["value"] = 5e-5
        data["claims"][0]["margin"] = 1e-3 - 5e-5

    _forge(ledger, 1, edit)


def delete(ledger: Ledger) -> None:
    """Remove the middle receipt and its LEDGER line."""
    ledger.paths[1].unlink()
    ledger.write_entries([e for i, e in enumerate(ledger.entries()) if i != 1])


def reorder(ledger: Ledger) -> None:
    """Swap the last two LEDGER lines."""
    a, b, c = ledger.entries()
    ledger.write_entries([a, c, b])


def insert(ledger: Ledger) -> None:
    """Write a receipt chained to the first one and list it second, as if always there."""
    first = ledger.load(0)
    fake = synthetic_receipt("2026-01-01T12:00:00Z", 0.0, first["code"]["files"][0]["sha256"])
    fake["previous_receipt_sha256"] = first["receipt_sha256"]
    fake = seal(fake)
    path = ledger.receipts / GATE / receipt_filename(fake)
    path.write_bytes(dump_receipt(fake))
    entries = ledger.entries()
    ledger.write_entries([entries[0], (fake["receipt_sha256"], path.name), *entries[1:]])


def stale_code(ledger: Ledger) -> None:
    """Change the implementation file the claims were measured on."""
    (ledger.root / CODE).write_text("VALUE = 2\n", encoding="utf-8")


def _forge_newest(ledger: Ledger, edit: Callable[[dict[str, Any]], None]) -> None:
    """Apply ``edit`` to the newest receipt's claim and forge it (``_forge``): with no later
    receipt pointing back at it, the chain holds, so only re-judging the claim from its own
    numbers can give the forgery away."""

    def whole(data: dict[str, Any]) -> None:
        edit(data["claims"][0])
        data["status"] = "pass" if data["claims"][0]["verdict"] == "pass" else "inconclusive"

    _forge(ledger, 2, whole)


def forged_control_value(ledger: Ledger) -> None:
    """The control's measurement made to meet the bound while its flag still says it failed
    (the record would show it caught), the claim marked inconclusive as that value gives: only
    re-judging the control's flag from its value shows it."""

    def edit(claim: dict[str, Any]) -> None:
        claim["controls"][0]["measured"] = 0.0
        claim["verdict"] = "inconclusive"

    _forge_newest(ledger, edit)


def forged_verdict(ledger: Ledger) -> None:
    """A control that did not fail, flagged honestly, under a claim still marked pass (its
    true verdict is inconclusive: the check was never shown able to fail)."""

    def edit(claim: dict[str, Any]) -> None:
        claim["controls"][0].update(measured=0.0, failed=False)

    _forge_newest(ledger, edit)


LEDGER_CASES: dict[str, Callable[[Ledger], None]] = {
    "re-seal": reseal,
    "delete": delete,
    "reorder": reorder,
    "insert": insert,
    "stale code file": stale_code,
    "forged control value": forged_control_value,
    "forged verdict": forged_verdict,
}


def _keygen(path: Path) -> str:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return path.with_suffix(".pub").read_text("utf-8").split()[1]


def forged_signature(ledger: Ledger, keys: Path) -> Path:
    """Sign as alice, then copy alice's signature of one receipt onto another (and sign a
    third with a key nobody allowed). Returns the allowed-signers file."""
    from assay.qualify.ledger.sign import sig_path, sign_receipts

    keys.mkdir(parents=True, exist_ok=True)
    alice = _keygen(keys / "alice")
    _keygen(keys / "mallory")
    allowed = keys / "allowed_signers"
    allowed.write_text(f"alice@lab ssh-ed25519 {alice}\n", encoding="utf-8")
    sign_receipts(ledger.receipts, keys / "alice")
    shutil.copyfile(sig_path(ledger.paths[0]), sig_path(ledger.paths[1]))
    sig_path(ledger.paths[2]).unlink()
    sign_receipts(ledger.receipts, keys / "mallory")
    return allowed


def detected(root: Path, name: str) -> list[str]:
    """Build an honest ledger under ``root``, apply tamper case ``name``, re-render and
    return what verification reports (empty: the tamper went unseen)."""
    ledger = Ledger(root)
    if name == "forged signature":
        allowed = forged_signature(ledger, root / "keys")
        ledger.rerender()
        return ledger.problems(allowed)
    if name == "edited record":  # the one forgery made after rendering: the record itself
        record = ledger.records / f"{GATE}.md"
        record.write_text(record.read_text("utf-8").replace("pass", "PASS"), encoding="utf-8")
        return ledger.problems()
    LEDGER_CASES[name](ledger)
    try:
        ledger.rerender()
    except AssayError as error:  # caught already: the forger cannot render the records
        return [str(error)]
    return ledger.problems()


CASES = [*LEDGER_CASES, "forged signature", "edited record"]
