"""Optional receipt signatures with OpenSSH: ``ssh-keygen -Y sign`` / ``-Y verify``.

A signature is a detached ``<receipt>.json.sig`` beside the receipt, over the file's bytes,
in namespace ``assay-receipt``. Who may sign is an OpenSSH allowed-signers file (default
``records/allowed_signers``: one ``<principal> <key type> <public key>`` per line), so
receipts written on several machines keep their own signers in one ledger.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from assay import faultpoints
from assay.errors import AssayError
from assay.qualify.receipt import receipt_paths

NAMESPACE = "assay-receipt"
SIG_SUFFIX = ".sig"
ACCEPT_ANY = faultpoints.declare(
    "qualify.sign.accept_any", "a signature is reported good without being checked"
)


@dataclass(frozen=True)
class Signature:
    """What verifying one receipt's signature found: signer (None when unknown) and verdict."""

    path: Path
    signer: str | None
    ok: bool
    detail: str


def ssh_keygen() -> str:
    """Path of ``ssh-keygen``; AssayError when OpenSSH is not installed."""
    found = shutil.which("ssh-keygen")
    if found is None:
        raise AssayError("ssh-keygen not found: install OpenSSH (openssh-client) to sign")
    return found


def sig_path(receipt: Path) -> Path:
    """The detached signature beside ``receipt``."""
    return receipt.with_name(receipt.name + SIG_SUFFIX)


def sign_receipts(receipts_dir: Path, key: Path, *, resign: bool = False) -> list[Path]:
    """Sign every receipt without a signature (all with ``resign``); return the new .sig paths.

    AssayError naming the receipt if ssh-keygen refuses (bad key, passphrase needed).
    """
    tool = ssh_keygen()
    if not Path(key).is_file():
        raise AssayError(f"{key}: no such signing key")
    made = []
    for path in receipt_paths(receipts_dir):
        sig = sig_path(path)
        if sig.exists() and not resign:
            continue
        sig.unlink(missing_ok=True)
        done = subprocess.run(
            [tool, "-Y", "sign", "-q", "-f", str(key), "-n", NAMESPACE, str(path)],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=60,
            check=False,
        )
        if done.returncode != 0 or not sig.exists():
            reason = (done.stderr or done.stdout).strip().splitlines()
            raise AssayError(f"{path}: not signed: {reason[-1] if reason else 'ssh-keygen failed'}")
        made.append(sig)
    return made


def check_signature(path: Path, allowed_signers: Path | None) -> Signature | None:
    """Verify ``path``'s detached signature; None when the receipt is unsigned.

    The signer is the allowed-signers principal whose key made the signature. A signature by
    a key not in the file, over other bytes, or in another namespace does not hold.
    """
    sig = sig_path(path)
    if not sig.exists():
        return None
    if faultpoints.armed(ACCEPT_ANY):
        return Signature(path, "unchecked", True, "good signature")
    if allowed_signers is None or not Path(allowed_signers).is_file():
        return Signature(path, None, False, "signed, but there is no allowed-signers file")
    tool = ssh_keygen()
    found = subprocess.run(
        [tool, "-Y", "find-principals", "-s", str(sig), "-f", str(allowed_signers)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    principals = found.stdout.split()
    if found.returncode != 0 or not principals:
        return Signature(path, None, False, "signature by a key not in the allowed signers")
    argv = [tool, "-Y", "verify", "-f", str(allowed_signers), "-I", principals[0]]
    argv += ["-n", NAMESPACE, "-s", str(sig)]
    with path.open("rb") as data:
        done = subprocess.run(
            argv, stdin=data, capture_output=True, text=True, timeout=60, check=False
        )
    if done.returncode != 0:
        return Signature(path, principals[0], False, "signature does not hold for these bytes")
    return Signature(path, principals[0], True, "good signature")
