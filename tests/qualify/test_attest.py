"""`assay attest`: receipts as in-toto Statements in DSSE envelopes, signed with an OpenSSH
ed25519 key; the signature checked by us, by openssl, and shown to fail when it should. I10: an
attestation is about the code its receipt says ran, a stale receipt is refused unless asked for,
and ``--verify`` trusts what ``assay verify`` trusts and prints each receipt's status."""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "gates"))

from assay.errors import AssayError  # noqa: E402
from assay.qualify.ledger.dsse import (  # noqa: E402
    EnvelopeError,
    load_allowed_signers,
    pae,
)
from assay.qualify.publishing import attest  # noqa: E402
from support.faults import tamper_cases  # noqa: E402

pytestmark = pytest.mark.skipif(
    shutil.which("ssh-keygen") is None,
    reason="ssh-keygen not installed (apt-get install openssh-client)",
)
needs_crypto = pytest.mark.skipif(
    importlib.util.find_spec("cryptography") is None,
    reason="cryptography not installed (it is in the test extra)",
)


def _key(tmp_path: Path, name: str) -> Path:
    path = tmp_path / "keys" / name
    path.parent.mkdir(exist_ok=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return path


def _allowed(tmp_path: Path, principal: str, key: Path) -> Path:
    kind, blob = key.with_suffix(".pub").read_text("utf-8").split()[:2]
    path = tmp_path / f"allowed_{principal}"
    path.write_text(f"{principal} {kind} {blob}\n", "utf-8")
    return path


def _cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="assay attest")
    attest.attest_arguments(parser)
    return attest.run_attest(parser.parse_args(list(argv)))


def _sign(receipts: Path, key: Path, out: Path, *extra: str) -> int:
    return _cli("--receipts", str(receipts), "--key", str(key), "--out", str(out), *extra)


@pytest.fixture
def signed(tmp_path: Path) -> dict:
    """All three receipts of a ledger attested with alice's key; the paths a test needs."""
    pytest.importorskip("cryptography")
    ledger = tamper_cases.Ledger(tmp_path)
    alice = _key(tmp_path, "alice")
    out = tmp_path / "att"
    assert _sign(ledger.receipts, alice, out, "--all", "--root", str(tmp_path)) == 0
    return {
        "ledger": ledger,
        "alice": alice,
        "out": out,
        "allowed": _allowed(tmp_path, "alice@lab", alice),
    }


def _first(signed: dict) -> tuple[Path, dict]:
    path = sorted(signed["out"].glob("*.intoto.json"))[0]
    return path, json.loads(path.read_text("utf-8"))


# --- DSSE pre-authentication encoding ---------------------------------------------------


def test_pae_is_the_dsse_spec_test_vector():
    # protocol.md's example, and byte (not character) lengths for a non-ASCII type
    assert pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )
    assert pae("t/\u00fc", b"\x00\xff") == b"DSSEv1 4 t/\xc3\xbc 2 \x00\xff"
    assert pae("", b"") == b"DSSEv1 0  0 "


# --- statement shape --------------------------------------------------------------------


def test_one_statement_per_receipt_about_the_code_it_ran(signed):
    receipts = signed["ledger"].paths
    names = sorted(p.name for p in signed["out"].iterdir())
    assert names == sorted(p.stem + ".intoto.json" for p in receipts)
    path, envelope = _first(signed)
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    statement = json.loads(base64.b64decode(envelope["payload"]))
    assert set(statement) == {"_type", "subject", "predicateType", "predicate"}
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == attest.PREDICATE_TYPE
    receipt = next(p for p in receipts if path.name.startswith(p.stem))
    data = json.loads(receipt.read_text("utf-8"))
    assert statement["predicate"] == data
    (code,) = data["code"]["files"]
    listing = f"{code['sha256']}  {code['path']}\n".encode()
    digest = {"sha256": hashlib.sha256(listing).hexdigest()}
    assert statement["subject"] == [{"name": attest.CODE_FILES, "digest": digest}]


def test_keyid_is_the_ssh_keygen_fingerprint(signed):
    _, envelope = _first(signed)
    printed = subprocess.run(
        ["ssh-keygen", "-l", "-f", str(signed["alice"].with_suffix(".pub"))],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()[1]
    assert [s["keyid"] for s in envelope["signatures"]] == [printed]
    assert len(base64.b64decode(envelope["signatures"][0]["sig"])) == 64  # raw ed25519


# --- signatures: good, and the controls that must fail ----------------------------------


def test_signature_verifies_with_the_signers_key(signed, capsys):
    files = [str(p) for p in sorted(signed["out"].iterdir())]
    trust = ("--allowed-signers", str(signed["allowed"]))
    assert _cli("--verify", *files, *trust, "--receipts", str(signed["ledger"].receipts)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("note: signatures checked against ")  # the file lies in the tree
    assert len(lines) == 4 and all(" signed by alice@lab " in line for line in lines[1:])
    assert all(", status pass, " in line for line in lines[1:])
    assert sum("(a run it shows)" in line for line in lines) == 1  # the gate shows its newest
    trusted = load_allowed_signers(signed["allowed"])
    found = attest.check_attestation(Path(files[0]), trusted)
    assert found["signer"] == "alice@lab" and found["gate"] == "demo"


def _rewrite(path: Path, change) -> None:
    envelope = json.loads(path.read_text("utf-8"))
    change(envelope)
    path.write_text(json.dumps(envelope), "utf-8")


def _flip_payload_byte(envelope: dict) -> None:
    body = bytearray(base64.b64decode(envelope["payload"]))
    body[len(body) // 2] ^= 0x01
    envelope["payload"] = base64.b64encode(bytes(body)).decode()


@pytest.mark.parametrize(
    "change",
    [
        _flip_payload_byte,
        lambda e: e.update(payloadType="application/vnd.in-toto+jsoN"),
        lambda e: e["signatures"][0].update(sig=base64.b64encode(bytes(64)).decode()),
    ],
    ids=["payload byte flipped", "payload type changed", "signature zeroed"],
)
def test_a_changed_envelope_fails(signed, capsys, change):
    path, _ = _first(signed)
    trusted = load_allowed_signers(signed["allowed"])
    attest.check_attestation(path, trusted)  # holds before the change
    _rewrite(path, change)
    with pytest.raises(EnvelopeError, match="no signature verifies"):
        attest.check_attestation(path, trusted)
    assert _cli("--verify", str(path), "--allowed-signers", str(signed["allowed"])) == 1
    assert "no signature verifies" in capsys.readouterr().out


def test_another_key_does_not_verify(signed, tmp_path, capsys):
    path, _ = _first(signed)
    mallory = _allowed(tmp_path, "mallory@elsewhere", _key(tmp_path, "mallory"))
    assert _cli("--verify", str(path), "--allowed-signers", str(mallory)) == 1
    assert "no signature verifies" in capsys.readouterr().out
    # the keyid is a hint, never trusted: naming mallory's key changes nothing either way
    _rewrite(
        path, lambda e: e["signatures"][0].update(keyid=load_allowed_signers(mallory)[0].keyid)
    )
    assert _cli("--verify", str(path), "--allowed-signers", str(mallory)) == 1
    assert _cli("--verify", str(path), "--allowed-signers", str(signed["allowed"])) == 0


def test_a_statement_about_other_code_than_its_receipt_ran_is_refused(signed, capsys):
    """A key holder's statement that a receipt qualifies HEAD, or a wheel built later, is not
    about what ran: verify refuses it even though the signature holds."""
    path, envelope = _first(signed)
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["subject"] = [{"name": "assay-9.9-py3-none-any.whl", "digest": {"sha256": "0" * 64}}]
    from assay.qualify.ledger.dsse import load_signing_key, sign_envelope

    payload = attest.canonical_json(statement)
    forged = sign_envelope(payload, load_signing_key(signed["alice"]))
    path.write_text(json.dumps(forged), "utf-8")
    assert _cli("--verify", str(path), "--allowed-signers", str(signed["allowed"])) == 1
    assert "is not the code its receipt ran" in capsys.readouterr().out


def test_verify_trusts_what_assay_verify_trusts(signed, tmp_path, capsys, monkeypatch):
    files = [str(p) for p in sorted(signed["out"].iterdir())][:1]
    receipts = ["--receipts", str(signed["ledger"].receipts)]
    # no file named: $ASSAY_ALLOWED_SIGNERS, as for assay verify
    monkeypatch.setenv("ASSAY_ALLOWED_SIGNERS", str(signed["allowed"]))
    assert _cli("--verify", *files, *receipts) == 0
    assert "from $ASSAY_ALLOWED_SIGNERS" in capsys.readouterr().out
    monkeypatch.delenv("ASSAY_ALLOWED_SIGNERS")
    # nothing outside the tree: refused, rather than trusting whatever the tree holds
    assert "no allowed signers to trust" in _one_line_error(
        capsys, _cli("--verify", *files, *receipts)
    )
    # only the tree's own file: it verifies, and says that proves nothing against a tree editor
    (signed["ledger"].records / "allowed_signers").write_text(signed["allowed"].read_text())
    assert _cli("--verify", *files, *receipts) == 0
    assert "proves nothing" in capsys.readouterr().out


def test_a_stale_receipt_is_refused_unless_asked_for(signed, tmp_path, capsys):
    (tmp_path / tamper_cases.CODE).write_text("VALUE = 2\n", "utf-8")  # the code changed since
    out = tmp_path / "again"
    code = _sign(signed["ledger"].receipts, signed["alice"], out, "--root", str(tmp_path))
    assert "has changed since" in _one_line_error(capsys, code)
    assert not out.exists()
    extra = ("--root", str(tmp_path), "--allow-stale")
    assert _sign(signed["ledger"].receipts, signed["alice"], out, *extra) == 0
    assert len(list(out.iterdir())) == 1  # by default, the run the gate's standing shows


def test_receipt_subject_is_its_wheel_else_its_commit_else_its_files():
    receipt = tamper_cases.synthetic_receipt("2026-01-01T00:00:00Z", 0.0, "a" * 64)
    assert attest.receipt_subject(receipt)["name"] == attest.CODE_FILES
    receipt["code"].update(commit="c" * 40, dirty=True)
    assert attest.receipt_subject(receipt) == {
        "name": attest.GIT_COMMIT,
        "digest": {"gitCommit": "c" * 40},
        "annotations": {"dirty": True},
    }
    receipt["wheel"] = {"filename": "x-1-py3-none-any.whl", "sha256": "b" * 64}
    assert attest.receipt_subject(receipt) == {
        "name": "x-1-py3-none-any.whl",
        "digest": {"sha256": "b" * 64},
    }


def test_a_wheel_the_receipts_did_not_run_is_refused(signed, tmp_path, capsys):
    wheel = tmp_path / "assay-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"PK\x03\x04 not really a zip, but bytes with a digest")
    out = tmp_path / "wheel-att"
    code = _sign(
        signed["ledger"].receipts,
        signed["alice"],
        out,
        "--wheel",
        str(wheel),
        "--root",
        str(tmp_path),
    )
    assert "this receipt did not run assay-0.1.0-py3-none-any.whl" in _one_line_error(capsys, code)
    path, _ = _first(signed)
    allowed = str(signed["allowed"])
    assert _cli("--verify", str(path), "--allowed-signers", allowed, "--wheel", str(wheel)) == 1
    assert "sha256 differs" in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl not installed")
def test_openssl_accepts_the_signature(signed, tmp_path):
    """An independent ed25519 implementation checks the raw signature over the PAE bytes."""
    _, envelope = _first(signed)
    body = base64.b64decode(envelope["payload"])
    kind = envelope["payloadType"].encode()
    message = b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(body), body)
    (tmp_path / "pae.bin").write_bytes(message)
    (tmp_path / "sig.bin").write_bytes(base64.b64decode(envelope["signatures"][0]["sig"]))
    for name in ("alice", "bob"):
        key = signed["alice"] if name == "alice" else _key(tmp_path, "bob")
        raw = base64.b64decode(key.with_suffix(".pub").read_text().split()[1])[-32:]
        spki = bytes.fromhex("302a300506032b6570032100") + raw  # ed25519 SubjectPublicKeyInfo
        (tmp_path / f"{name}.der").write_bytes(spki)
    argv = [
        "openssl",
        "pkeyutl",
        "-verify",
        "-pubin",
        "-keyform",
        "DER",
        "-rawin",
        "-in",
        str(tmp_path / "pae.bin"),
        "-sigfile",
        str(tmp_path / "sig.bin"),
        "-inkey",
    ]
    good = subprocess.run([*argv, str(tmp_path / "alice.der")], capture_output=True, text=True)
    if "rawin" in good.stderr and good.returncode != 0:
        pytest.skip("this openssl cannot verify ed25519 with -rawin")
    assert good.returncode == 0, good.stderr
    bad = subprocess.run([*argv, str(tmp_path / "bob.der")], capture_output=True, text=True)
    assert bad.returncode != 0


def test_allowed_signers_options_comments_and_other_key_types(signed, tmp_path):
    kind, blob = signed["alice"].with_suffix(".pub").read_text().split()[:2]
    path = tmp_path / "allowed_signers"
    path.write_text(
        "# who may sign\n\n"
        "carol@lab ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ\n"
        f'alice@lab,alice@home namespaces="assay-receipt,git" {kind} {blob}\n',
        "utf-8",
    )
    assert [k.principal for k in load_allowed_signers(path)] == ["alice@lab,alice@home"]
    only_rsa = tmp_path / "rsa_only"
    only_rsa.write_text("carol@lab ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ\n", "utf-8")
    with pytest.raises(AssayError, match="no ed25519 key"):
        load_allowed_signers(only_rsa)


# --- the command line: one-line errors, exit 2, nothing written -------------------------


def _one_line_error(capsys, code: int) -> str:
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith("assay attest: ")
    assert "Traceback" not in err
    return err


def test_missing_key_is_one_line(tmp_path, capsys):
    ledger = tamper_cases.Ledger(tmp_path)
    out = tmp_path / "att"
    code = _sign(ledger.receipts, tmp_path / "nope", out, "--root", str(tmp_path))
    assert "no such signing key" in _one_line_error(capsys, code)
    assert not out.exists()


@needs_crypto
def test_bad_receipt_is_one_line_and_nothing_is_written(tmp_path, capsys):
    ledger = tamper_cases.Ledger(tmp_path)
    (ledger.receipts / "demo" / "20990101T000000Z-000000000000.json").write_text("{", "utf-8")
    out = tmp_path / "att"
    code = _sign(ledger.receipts, _key(tmp_path, "alice"), out, "--root", str(tmp_path))
    assert "not a readable JSON receipt" in _one_line_error(capsys, code)
    assert not out.exists()


def test_usage_errors_are_one_line(tmp_path, capsys):
    assert "needs --key FILE and --out DIR" in _one_line_error(capsys, _cli("--key", "k"))
    code = _cli("--verify", "x.json", "--out", str(tmp_path))
    assert "do not apply" in _one_line_error(capsys, code)
    code = _cli("--verify", "x.json", "--allowed-signers", str(tmp_path / "none"))
    assert "no such allowed-signers file" in _one_line_error(capsys, code)


def test_without_cryptography_the_feature_says_so_in_one_line(tmp_path, capsys, monkeypatch):
    ledger = tamper_cases.Ledger(tmp_path)
    key = _key(tmp_path, "alice")
    monkeypatch.setitem(sys.modules, "cryptography", None)  # `import cryptography` fails
    code = _sign(ledger.receipts, key, tmp_path / "att", "--root", str(tmp_path))
    assert "need the 'cryptography' package" in _one_line_error(capsys, code)


def test_the_assay_command_has_attest():
    from assay.cli.dispatch import build_parser

    args = build_parser().parse_args(["attest", "--verify", "x.intoto.json"])
    row = args.command_row
    assert (row.module, row.run) == (attest.__name__, "run_attest") and not row.needs_trainer


def test_an_attested_partial_run_says_so_and_counts_as_shown_when_nothing_is_complete():
    from types import SimpleNamespace

    result = {
        "ok": True,
        "file": "a.intoto.json",
        "gate": "demo",
        "receipt_sha256": "ab" * 32,
        "status": "pass",
        "partial": True,
        "subject": {"name": "src"},
        "signer": "me",
        "keyid": "SHA256:x",
        "standing": "no complete run",
        "shown": True,
    }
    assert ", status pass (a partial run), about src," in attest.attest_line(result)
    assert "(a partial run)" not in attest.attest_line({**result, "partial": False})
    partial_only = SimpleNamespace(
        devices=[SimpleNamespace(head=None)], newest={"receipt_sha256": "ab" * 32}
    )
    assert attest.shown_runs(partial_only) == {"ab" * 32}  # what attest picks, verify shows
