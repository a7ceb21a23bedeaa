"""Receipt signatures with ssh-keygen: signers reported, several in one ledger, forgeries seen."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "gates"))

from assay.cli import main  # noqa: E402
from assay.qualify.ledger.sign import check_signature, sig_path, sign_receipts  # noqa: E402
from assay.qualify.publishing.verify import verify_all, verify_signatures  # noqa: E402
from support.faults import tamper_cases  # noqa: E402

pytestmark = pytest.mark.skipif(
    shutil.which("ssh-keygen") is None,
    reason="ssh-keygen not installed (apt-get install openssh-client)",
)


def _key(tmp_path: Path, name: str) -> tuple[Path, str]:
    path = tmp_path / "keys" / name
    path.parent.mkdir(exist_ok=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return path, path.with_suffix(".pub").read_text("utf-8").split()[1]


def test_receipts_from_two_machines_keep_their_own_signers(tmp_path):
    ledger = tamper_cases.Ledger(tmp_path / "tree")
    alice, alice_pub = _key(tmp_path, "alice")
    bob, bob_pub = _key(tmp_path, "bob")
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(
        f"alice@gpu-box ssh-ed25519 {alice_pub}\nbob@laptop ssh-ed25519 {bob_pub}\n", "utf-8"
    )
    # the first two receipts came from alice's machine; the third is signed by bob
    ledger.paths[2].rename(tmp_path / "held")
    assert len(sign_receipts(ledger.receipts, alice)) == 2
    (tmp_path / "held").rename(ledger.paths[2])
    assert sign_receipts(ledger.receipts, bob) == [sig_path(ledger.paths[2])]
    problems, notes = verify_signatures(
        ledger.receipts, ledger.records, option=str(allowed), require=True
    )
    assert problems == []
    assert notes[0] == f"signatures checked against {allowed} (from --allowed-signers)"
    assert [n.split(": signed by ")[1] for n in notes[1:]] == [
        "alice@gpu-box: good signature",
        "alice@gpu-box: good signature",
        "bob@laptop: good signature",
    ]
    assert verify_all(ledger.receipts, ledger.records) == []


def test_forged_signatures_are_reported(tmp_path):
    ledger = tamper_cases.Ledger(tmp_path)
    allowed = tamper_cases.forged_signature(ledger, tmp_path / "keys")
    problems, _ = verify_signatures(
        ledger.receipts, ledger.records, option=str(allowed), require=False
    )
    assert any("claims signer alice@lab" in p and "does not hold" in p for p in problems)
    assert any("not in the allowed signers" in p for p in problems)


def test_an_edited_signed_receipt_fails_its_signature(tmp_path):
    ledger = tamper_cases.Ledger(tmp_path)
    key, pub = _key(tmp_path, "k")
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f"me ssh-ed25519 {pub}\n", "utf-8")
    sign_receipts(ledger.receipts, key)
    path = ledger.paths[0]
    path.write_bytes(path.read_bytes().replace(b'"outputs agree"', b'"outputs agree!"'))
    found = check_signature(path, allowed)
    assert found is not None and not found.ok and found.signer == "me"


def test_cli_sign_then_verify_prints_signers(tmp_path, capsys):
    ledger = tamper_cases.Ledger(tmp_path)
    key, pub = _key(tmp_path, "k")
    (ledger.records / "allowed_signers").write_text(f"ci@runner ssh-ed25519 {pub}\n", "utf-8")
    dirs = ["--receipts", str(ledger.receipts), "--records", str(ledger.records)]
    assert main(["sign", *dirs, "--key", str(key)]) == 0
    assert main(["verify", *dirs]) == 0
    out = capsys.readouterr().out
    assert out.count("signed by ci@runner: good signature") == 3
    assert "taken from the tree itself: this proves nothing" in out
    assert main(["sign", *dirs, "--key", str(tmp_path / "missing")]) == 2
    assert "no such signing key" in capsys.readouterr().err
