"""DSSE v1 envelopes signed with an OpenSSH ed25519 key, and checked against allowed signers.

The signature is the raw 64-byte ed25519 signature (RFC 8032) over the DSSE pre-authentication
encoding ``PAE(payloadType, payload)``, base64 in ``sig``: the form DSSE verifiers expect of an
ed25519 key (securesystemslib, in-toto, go-securesystemslib). ``ssh-keygen -Y sign`` cannot
make it (it signs an SSHSIG blob, not the bare message), so the key is loaded and used through
the ``cryptography`` package, an optional dependency (the ``test`` extra): without it every
function here raises one AssayError line saying so. ``keyid`` is the key's fingerprint as
``ssh-keygen -l`` prints it (``SHA256:<base64>``); DSSE makes it a hint only, so verification
tries every trusted key and never decides on the keyid.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.bounded import read_capped, read_text_bounded
from assay.errors import AssayError

SIGNERS_BYTES = 1 << 20  # an allowed-signers file: one line per trusted key
KEY_BYTES = 64 << 10  # an OpenSSH private key is a few hundred bytes

PAYLOAD_TYPE = "application/vnd.in-toto+json"
CERT_AUTHORITY = "cert-authority"


class EnvelopeError(AssayError):
    """An envelope that does not hold: malformed, or no trusted key signed its payload."""


@dataclass(frozen=True)
class TrustedKey:
    """One public key a verifier accepts, with the principal it stands for."""

    principal: str
    keyid: str
    key: Any  # cryptography's Ed25519PublicKey


@dataclass(frozen=True)
class Opened:
    """A verified envelope: its payload type, the exact signed bytes and who signed them."""

    payload_type: str
    payload: bytes
    principal: str
    keyid: str


def pae(payload_type: str, body: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: ``DSSEv1 SP LEN(type) SP type SP LEN(body) SP body``.

    Lengths are byte lengths in ASCII decimal, the type is UTF-8; exactly what DSSE signs.
    """
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(body), body)


def need_cryptography() -> None:
    """Return if ``cryptography`` imports; AssayError (one line) naming the fix otherwise."""
    try:
        import cryptography  # noqa: F401
    except ImportError:
        raise AssayError(
            "attestations need the 'cryptography' package: pip install cryptography"
        ) from None


def fingerprint(public_key: Any) -> str:
    """``SHA256:<unpadded base64>`` of the key's SSH wire blob, as ``ssh-keygen -l`` prints it."""
    from cryptography.hazmat.primitives import serialization as ser

    line = public_key.public_bytes(ser.Encoding.OpenSSH, ser.PublicFormat.OpenSSH)
    blob = base64.b64decode(line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def load_signing_key(path: Path) -> Any:
    """The ed25519 private key in an unencrypted OpenSSH key file; AssayError naming the file
    when it is missing, passphrase-protected, unreadable or of another type."""
    if not Path(path).is_file():
        raise AssayError(f"{path}: no such signing key")
    need_cryptography()
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_ssh_private_key

    try:
        key = load_ssh_private_key(read_capped(path, KEY_BYTES, "signing key"), password=None)
    except TypeError:
        raise AssayError(f"{path}: passphrase-protected keys are not supported") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise AssayError(f"{path}: not an OpenSSH private key ({err})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise AssayError(f"{path}: only ed25519 keys can sign attestations")
    return key


def sign_envelope(payload: bytes, key: Any, payload_type: str = PAYLOAD_TYPE) -> dict[str, Any]:
    """A DSSE JSON envelope of ``payload`` with one signature by ``key`` over its PAE.

    ed25519 is deterministic, so the same payload and key always give the same envelope.
    """
    signature = key.sign(pae(payload_type, payload))
    return {
        "payload": base64.b64encode(payload).decode("ascii"),
        "payloadType": payload_type,
        "signatures": [
            {"keyid": fingerprint(key.public_key()), "sig": base64.b64encode(signature).decode()}
        ],
    }


def _key_fields(fields: list[str]) -> tuple[int, str, str] | None:
    """(index, type, base64) of the first ``<key type> <base64>`` pair in a key line."""
    for i, field in enumerate(fields[:-1]):
        if field.startswith(("ssh-", "ecdsa-", "sk-")):
            return i, field, fields[i + 1]
    return None


def load_allowed_signers(path: Path) -> list[TrustedKey]:
    """The ed25519 keys of an OpenSSH allowed-signers file or a ``.pub`` file, in file order.

    Other key types and ``cert-authority`` lines are skipped; options (``namespaces=`` ...)
    are not enforced. AssayError when the file is missing or holds no usable key.
    """
    try:
        lines = read_text_bounded(path, SIGNERS_BYTES).splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise AssayError(f"{path}: cannot read allowed signers ({err})") from None
    need_cryptography()
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import load_ssh_public_key

    keys = []
    for line in lines:
        fields = line.split()
        found = _key_fields(fields) if fields and not fields[0].startswith("#") else None
        if found is None or found[1] != "ssh-ed25519" or CERT_AUTHORITY in line:
            continue
        i, kind, blob = found
        try:
            key = load_ssh_public_key(f"{kind} {blob}".encode())
        except (ValueError, binascii.Error):
            raise AssayError(f"{path}: unreadable key for {fields[0]}") from None
        if isinstance(key, Ed25519PublicKey):
            principal = fields[0] if i > 0 else " ".join(fields[2:]) or Path(path).name
            keys.append(TrustedKey(principal, fingerprint(key), key))
    if not keys:
        raise AssayError(f"{path}: no ed25519 key in the allowed signers")
    return keys


def _b64(text: Any, field: str) -> bytes:
    """Decode standard or URL-safe base64 (DSSE allows both); EnvelopeError if neither."""
    if not isinstance(text, str):
        raise EnvelopeError(f"{field} is not a base64 string")
    padded = text.translate(str.maketrans("-_", "+/")) + "=" * (-len(text) % 4)
    try:
        return base64.b64decode(padded, validate=True)
    except binascii.Error:
        raise EnvelopeError(f"{field} is not valid base64") from None


def open_envelope(envelope: Any, trusted: list[TrustedKey]) -> Opened:
    """The payload of ``envelope`` if one of its signatures verifies under a trusted key.

    The returned bytes are the very bytes that were verified. EnvelopeError when the envelope
    is malformed or no signature holds (a changed byte, a key not trusted).
    """
    need_cryptography()
    from cryptography.exceptions import InvalidSignature

    if not isinstance(envelope, dict) or not isinstance(envelope.get("payloadType"), str):
        raise EnvelopeError("not a DSSE envelope (payloadType missing)")
    signatures = envelope.get("signatures")
    if not isinstance(signatures, list) or not signatures:
        raise EnvelopeError("the envelope has no signatures")
    payload = _b64(envelope.get("payload"), "payload")
    message = pae(envelope["payloadType"], payload)
    for entry in signatures:
        sig = _b64(entry.get("sig") if isinstance(entry, dict) else None, "signature")
        for candidate in trusted:
            try:
                candidate.key.verify(sig, message)
            except InvalidSignature:
                continue
            return Opened(envelope["payloadType"], payload, candidate.principal, candidate.keyid)
    raise EnvelopeError("no signature verifies under a key in the allowed signers")
