"""`assay attest`: receipts as in-toto Statements in DSSE envelopes, signed with an OpenSSH
ed25519 key; the signature checked by us, by openssl, and shown to fail when it should."""

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

import tamper_cases  # noqa: E402
from assay.errors import AssayError  # noqa: E402
from assay.qualify.ledger.dsse import (  # noqa: E402
    EnvelopeError,
    load_allowed_signers,
    pae,
)
from assay.qualify.publishing import attest  # noqa: E402

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
    parser = argparse.ArgumentParser(prog="assay")
    attest.add_attest(parser.add_subparsers())
    args = parser.parse_args(["attest", *argv])
    return args.func(args)


def _sign(receipts: Path, key: Path, out: Path, *extra: str) -> int:
    return _cli("--receipts", str(receipts), "--key", str(key), "--out", str(out), *extra)


@pytest.fixture
def signed(tmp_path: Path) -> dict:
    """Three receipts attested about a wheel with alice's key; the paths a test needs."""
    pytest.importorskip("cryptography")
    ledger = tamper_cases.Ledger(tmp_path)
    wheel = tmp_path / "assay-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"PK\x03\x04 not really a zip, but bytes with a digest")
    alice = _key(tmp_path, "alice")
    out = tmp_path / "att"
    assert _sign(ledger.receipts, alice, out, "--wheel", str(wheel)) == 0
    return {
        "ledger": ledger,
        "wheel": wheel,
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


def test_one_statement_per_receipt_about_the_wheel(signed):
    receipts = signed["ledger"].paths
    names = sorted(p.name for p in signed["out"].iterdir())
    assert names == sorted(p.stem + ".intoto.json" for p in receipts)
    path, envelope = _first(signed)
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    statement = json.loads(base64.b64decode(envelope["payload"]))
    assert set(statement) == {"_type", "subject", "predicateType", "predicate"}
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == attest.PREDICATE_TYPE
    wheel_sha = hashlib.sha256(signed["wheel"].read_bytes()).hexdigest()
    assert statement["subject"] == [{"name": signed["wheel"].name, "digest": {"sha256": wheel_sha}}]
    receipt = next(p for p in receipts if path.name.startswith(p.stem))
    assert statement["predicate"] == json.loads(receipt.read_text("utf-8"))


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
    assert _cli("--verify", *files, "--allowed-signers", str(signed["allowed"])) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and all(" signed by alice@lab " in line for line in lines)
    trusted = load_allowed_signers(signed["allowed"])
    found = attest.check_attestation(Path(files[0]), trusted, signed["wheel"])
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


def test_subject_must_be_the_named_wheel(signed, tmp_path, capsys):
    path, _ = _first(signed)
    other = tmp_path / "other.whl"
    other.write_bytes(b"different bytes")
    allowed = str(signed["allowed"])
    assert _cli("--verify", str(path), "--allowed-signers", allowed, "--wheel", str(other)) == 1
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
    assert "cannot read allowed signers" in _one_line_error(capsys, code)


def test_without_cryptography_the_feature_says_so_in_one_line(tmp_path, capsys, monkeypatch):
    ledger = tamper_cases.Ledger(tmp_path)
    key = _key(tmp_path, "alice")
    monkeypatch.setitem(sys.modules, "cryptography", None)  # `import cryptography` fails
    code = _sign(ledger.receipts, key, tmp_path / "att", "--root", str(tmp_path))
    assert "need the 'cryptography' package" in _one_line_error(capsys, code)


def test_the_assay_command_has_attest():
    from assay.cli import build_parser

    args = build_parser().parse_args(["attest", "--verify", "x.intoto.json"])
    assert args.func is attest.run_attest


# --- the source-tree subject ------------------------------------------------------------


def _tree(root: Path) -> None:
    (root / "src" / "pkg" / "__pycache__").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'pkg'\n", "utf-8")
    (root / "src" / "pkg" / "__init__.py").write_text("VALUE = 1\n", "utf-8")
    (root / "src" / "pkg" / "b c.py").write_text("# a space in the name\n", "utf-8")
    (root / "src" / "pkg" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\x00")
    (root / "src" / ".hidden").write_text("left out\n", "utf-8")
    (root / "README.md").write_text("not source\n", "utf-8")


def test_without_git_the_digest_is_the_sha256sum_listing(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    _tree(tmp_path)
    sha = lambda p: hashlib.sha256((tmp_path / p).read_bytes()).hexdigest()  # noqa: E731
    listing = "".join(
        f"{sha(p)}  {p}\n" for p in ("pyproject.toml", "src/pkg/__init__.py", "src/pkg/b c.py")
    )
    subject = attest.tree_subject(tmp_path)
    assert subject == {
        "name": attest.FILE_TREE,
        "digest": {"sha256": hashlib.sha256(listing.encode()).hexdigest()},
    }
    (tmp_path / "README.md").write_text("changed, but not source\n", "utf-8")
    assert attest.tree_subject(tmp_path) == subject
    (tmp_path / "src" / "pkg" / "__init__.py").write_text("VALUE = 2\n", "utf-8")
    assert attest.tree_subject(tmp_path) != subject
    with pytest.raises(AssayError, match=r"no pyproject\.toml or src/"):
        attest.tree_subject(tmp_path / "src" / "pkg" / "__pycache__")


def _git(root: Path, *argv: str) -> str:
    ident = [
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@example.invalid",
        "-c",
        "commit.gpgsign=false",
    ]
    done = subprocess.run(
        ["git", "-C", str(root), *ident, *argv], check=True, capture_output=True, text=True
    )
    return done.stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_in_git_the_digest_is_ls_tree_of_head(tmp_path):
    _tree(tmp_path)
    _git(tmp_path, "init", "-q")
    with pytest.raises(AssayError, match="without a commit"):
        attest.tree_subject(tmp_path)
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "one")
    listing = _git(tmp_path, "-c", "core.quotepath=true", "ls-tree", "-r", "--full-tree", "HEAD")
    subject = attest.tree_subject(tmp_path / "src")  # any folder inside the work tree
    assert subject == {
        "name": attest.GIT_TREE,
        "digest": {
            "sha256": hashlib.sha256(listing.encode()).hexdigest(),
            "gitCommit": _git(tmp_path, "rev-parse", "HEAD").strip(),
        },
    }
    (tmp_path / "src" / "pkg" / "__init__.py").write_text("VALUE = 2\n", "utf-8")
    assert attest.tree_subject(tmp_path) == subject  # uncommitted edits are not covered
    _git(tmp_path, "commit", "-q", "-am", "two")
    assert attest.tree_subject(tmp_path)["digest"]["sha256"] != subject["digest"]["sha256"]


@needs_crypto
def test_attest_without_wheel_names_the_tree(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    ledger = tamper_cases.Ledger(tmp_path)  # writes src/demo_impl.py: a source tree
    key = _key(tmp_path, "alice")
    assert _sign(ledger.receipts, key, tmp_path / "att", "--root", str(tmp_path), "--json") == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["subject"]["name"] == attest.FILE_TREE
    assert len(shown["attestations"]) == 3
