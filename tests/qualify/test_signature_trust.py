"""Signature trust comes from outside the tree: forgers who can edit the tree are caught.

Each receipt ledger lives under ``<tmp>/tree`` (records, receipts, code); trusted signers live
under ``<tmp>/home``, where someone who can only edit the tree cannot reach.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "gates"))

from assay.cli import main  # noqa: E402
from assay.qualify.ledger.receipt import dump_receipt, receipt_filename, seal  # noqa: E402
from assay.qualify.ledger.sign import (  # noqa: E402
    ENV_VAR,
    sig_path,
    sign_receipts,
    signature_state,
    trusted_signers,
)
from assay.qualify.publishing.verify import verify_signatures  # noqa: E402
from support.faults import tamper_cases  # noqa: E402

pytestmark = pytest.mark.skipif(
    shutil.which("ssh-keygen") is None,
    reason="ssh-keygen not installed (apt-get install openssh-client)",
)


def _key(home: Path, name: str) -> tuple[Path, str]:
    path = home / "keys" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return path, path.with_suffix(".pub").read_text("utf-8").split()[1]


def _signers(path: Path, principal: str, pub: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# who may sign\n{principal} ssh-ed25519 {pub}\n", "utf-8")
    return path


def _verify(ledger: tamper_cases.Ledger, capsys, *extra: str) -> tuple[int, str]:
    dirs = ["--receipts", str(ledger.receipts), "--records", str(ledger.records)]
    code = main(["verify", *dirs, *extra])
    return code, capsys.readouterr().out


def _signed_ledger(tmp_path: Path) -> tuple[tamper_cases.Ledger, Path]:
    """An honest ledger signed by ci@runner, who is listed both in the tree and in a trusted
    file under home. Returns (ledger, trusted file)."""
    ledger = tamper_cases.Ledger(tmp_path / "tree")
    key, pub = _key(tmp_path / "home", "ci")
    trusted = _signers(tmp_path / "home" / "trusted_signers", "ci@runner", pub)
    _signers(ledger.records / "allowed_signers", "ci@runner", pub)
    sign_receipts(ledger.receipts, key)
    return ledger, trusted


def _reseal_newest(ledger: tamper_cases.Ledger) -> Path:
    """Edit the newest receipt, re-seal and rename it, fix its LEDGER line, drop its .sig,
    re-render: nothing but the missing signature is left to see."""
    old = ledger.paths[-1]
    data = ledger.load(len(ledger.paths) - 1)
    data["claims"][0]["measurement"]["value"] = 0.0
    data["claims"][0]["margin"] = 1e-3
    forged = seal(data)
    target = old.with_name(receipt_filename(forged))
    target.write_bytes(dump_receipt(forged))
    old.unlink()
    sig_path(old).unlink()
    entries = ledger.entries()
    entries[-1] = (forged["receipt_sha256"], target.name)
    ledger.write_entries(entries)
    ledger.rerender()
    return target


def test_resealed_unsigned_receipt_fails_when_signatures_are_required(tmp_path, capsys):
    ledger, trusted = _signed_ledger(tmp_path)
    forged = _reseal_newest(ledger)
    code, out = _verify(ledger, capsys, f"--allowed-signers={trusted}")
    assert code == 0  # without the flag, only a note...
    assert "note: 1 of 3 receipts unsigned" in out
    code, out = _verify(ledger, capsys, f"--allowed-signers={trusted}", "--require-signatures")
    assert code == 1
    line = f"{forged}: unsigned, and --require-signatures is set"
    assert line in out.splitlines()
    problems, _ = verify_signatures(
        ledger.receipts, ledger.records, option=str(trusted), require=True
    )
    assert problems == [line]


def test_forger_replacing_the_in_tree_signers_is_caught_by_the_env_trust(
    tmp_path, capsys, monkeypatch
):
    ledger, trusted = _signed_ledger(tmp_path)
    mallory, mallory_pub = _key(tmp_path / "tree", "mallory")
    in_tree = _signers(ledger.records / "allowed_signers", "ci@runner", mallory_pub)
    sign_receipts(ledger.receipts, mallory, resign=True)
    assert _verify(ledger, capsys)[0] == 0  # the tree alone vouches for the forgery...
    monkeypatch.setenv(ENV_VAR, str(trusted))
    code, out = _verify(ledger, capsys)
    assert code == 1
    assert f"{in_tree}: differs from the trusted allowed signers {trusted}" in out
    assert f"(from ${ENV_VAR})" in out
    assert out.count("signature by a key not in the allowed signers") == 3


def test_required_signatures_are_refused_without_trust_outside_the_tree(tmp_path, capsys):
    ledger, _ = _signed_ledger(tmp_path)
    code, out = _verify(ledger, capsys, "--require-signatures")
    assert code == 1
    assert "--require-signatures refused: no trusted signers outside the tree" in out
    assert "taken from the tree itself: this proves nothing" in out
    in_tree = ledger.records / "allowed_signers"
    code, out = _verify(ledger, capsys, f"--allowed-signers={in_tree}", "--require-signatures")
    assert code == 1
    assert "which lies inside the tree" in out and "refused" in out


def test_user_config_signers_are_honoured(tmp_path, capsys, monkeypatch):
    ledger, trusted = _signed_ledger(tmp_path)
    (ledger.records / "allowed_signers").unlink()
    config = tmp_path / "elsewhere"
    (config / "assay").mkdir(parents=True)
    shutil.copyfile(trusted, config / "assay" / "allowed_signers")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    source = trusted_signers(None)
    assert source is not None and source.path == config / "assay" / "allowed_signers"
    code, out = _verify(ledger, capsys, "--require-signatures")
    assert code == 0, out
    assert f"signatures checked against {source.path} (from user config)" in out
    assert out.count("signed by ci@runner: good signature") == 3


def test_all_signed_by_a_trusted_key_is_ok(tmp_path, capsys):
    ledger, trusted = _signed_ledger(tmp_path)
    code, out = _verify(ledger, capsys, f"--allowed-signers={trusted}", "--require-signatures")
    assert code == 0, out
    assert out.count("signed by ci@runner: good signature") == 3
    assert "unsigned" not in out and "inside the tree" not in out
    assert [signature_state(p, trusted).state for p in ledger.paths] == ["signed"] * 3


def test_signature_state_tells_unsigned_signed_and_broken(tmp_path):
    ledger, trusted = _signed_ledger(tmp_path)
    sig_path(ledger.paths[0]).unlink()
    path = ledger.paths[1]
    path.write_bytes(path.read_bytes().replace(b'"outputs agree"', b'"outputs agree!"'))
    found = [signature_state(p, trusted) for p in ledger.paths]
    assert [f.state for f in found] == ["unsigned", "broken", "signed"]
    assert [f.ok for f in found] == [False, False, True]
    assert found[1].signer == "ci@runner" and found[2].signer == "ci@runner"
    assert signature_state(ledger.paths[2], None).state == "broken"


def test_a_named_trusted_file_that_is_missing_fails(tmp_path, capsys):
    ledger, _ = _signed_ledger(tmp_path)
    missing = tmp_path / "home" / "nope"
    code, out = _verify(ledger, capsys, f"--allowed-signers={missing}")
    assert code == 1
    assert f"{missing}: no such allowed-signers file (from --allowed-signers)" in out
