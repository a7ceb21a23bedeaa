"""Receipt signatures with OpenSSH: ``ssh-keygen -Y sign`` / ``-Y verify``.

A signature is a detached ``<receipt>.json.sig`` beside the receipt, over the file's bytes,
in namespace ``assay-receipt``. Who may sign is an OpenSSH allowed-signers file (one
``<principal> <key type> <public key>`` per line), so receipts written on several machines
keep their own signers in one ledger.

Trust must come from outside the tree: a forger who can edit the tree can also replace
``records/allowed_signers`` with their own key. :func:`trusted_signers` finds the file the
verifier chose (``--allowed-signers``, ``$ASSAY_ALLOWED_SIGNERS``, then the user config);
the in-tree file is only a fallback, and is reported when it disagrees with the trusted one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from assay.errors import AssayError
from assay.qualify.ledger.receipt import receipt_paths

NAMESPACE = "assay-receipt"
SIG_SUFFIX = ".sig"
IN_TREE = "allowed_signers"
ENV_VAR = "ASSAY_ALLOWED_SIGNERS"
State = Literal["unsigned", "signed", "broken"]


@dataclass(frozen=True)
class Signature:
    """What checking one receipt's signature found.

    ``state`` is "unsigned" (no ``.sig``), "signed" (holds, by a trusted signer) or "broken"
    (does not hold for these bytes, or the signer is not trusted); ``signer`` is the trusted
    principal whose key made it, None when unknown.
    """

    path: Path
    signer: str | None
    state: State
    detail: str

    @property
    def ok(self) -> bool:
        """True only for a signature that holds, by a trusted signer."""
        return self.state == "signed"


@dataclass(frozen=True)
class TrustSource:
    """An allowed-signers file the verifier named, and where it was named (one phrase)."""

    path: Path
    origin: str


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


def user_config_signers() -> Path:
    """The user's allowed-signers file: ``$XDG_CONFIG_HOME/assay/allowed_signers``, or
    ``~/.config/assay/allowed_signers`` when the variable is unset or not absolute (as the XDG
    base-directory spec says). The file need not exist."""
    base = os.environ.get("XDG_CONFIG_HOME", "")
    config = Path(base) if os.path.isabs(base) else Path.home() / ".config"
    return config / "assay" / IN_TREE


def trusted_signers(option: str | None) -> TrustSource | None:
    """The allowed-signers file chosen by the verifier, None when none was chosen.

    In order: ``--allowed-signers`` (``option``), ``$ASSAY_ALLOWED_SIGNERS``, then the user
    config file when it exists. A file named by the option or the variable is returned even
    when missing, so that the caller reports it instead of silently trusting something else.
    """
    if option:
        return TrustSource(Path(option), "--allowed-signers")
    named = os.environ.get(ENV_VAR, "")
    if named:
        return TrustSource(Path(named), f"${ENV_VAR}")
    config = user_config_signers()
    if config.is_file():
        return TrustSource(config, "user config")
    return None


@dataclass(frozen=True)
class Trust:
    """What signatures are checked against: ``path`` (None: no allowed-signers file at all),
    whether it was chosen by the verifier outside the tree, the problems finding it raised,
    and a note saying where it came from."""

    path: Path | None
    outside: bool
    problems: tuple[str, ...]
    note: str | None


def _inside(path: Path, tree: Path) -> bool:
    return path.resolve().is_relative_to(tree)


def resolve_trust(records_dir: Path, option: str | None) -> Trust:
    """Where signatures under ``records_dir`` get their trust.

    The verifier's file (:func:`trusted_signers`) when it lies outside the tree (the parent
    of ``records_dir``, as for ``--stale``); else that file or ``<records>/allowed_signers``
    with a note that trust taken from the tree proves nothing against someone who can edit
    it. A named file that is missing, or an in-tree file whose signer lines differ from the
    verifier's, is a problem naming both files.
    """
    records_dir = Path(records_dir)
    in_tree = records_dir / IN_TREE
    tree = records_dir.resolve().parent
    source = trusted_signers(option)
    if source is None:
        if not in_tree.is_file():
            return Trust(None, False, (), None)
        return Trust(in_tree, False, (), _from_tree(in_tree, "taken from the tree itself"))
    if not source.path.is_file():
        what = "not a regular file" if source.path.exists() else "no such allowed-signers file"
        missing = f"{source.path}: {what} (from {source.origin})"
        return Trust(source.path, not _inside(source.path, tree), (missing,), None)
    problems = _disagreement(in_tree, source)
    if _inside(source.path, tree):
        how = f"(from {source.origin}), which lies inside the tree"
        return Trust(source.path, False, problems, _from_tree(source.path, how))
    note = f"signatures checked against {source.path} (from {source.origin})"
    return Trust(source.path, True, problems, note)


def _disagreement(in_tree: Path, source: TrustSource) -> tuple[str, ...]:
    if not in_tree.is_file() or in_tree.samefile(source.path):
        return ()
    if signer_lines(in_tree) == signer_lines(source.path):
        return ()
    return (
        f"{in_tree}: differs from the trusted allowed signers {source.path} (from {source.origin})",
    )


def _from_tree(path: Path, how: str) -> str:
    return (
        f"signatures checked against {path}, {how}: this proves "
        "nothing against someone who can edit the tree; name trusted signers outside it "
        f"with --allowed-signers FILE, ${ENV_VAR} or {user_config_signers()}"
    )


def signer_lines(path: Path) -> frozenset[str]:
    """The non-comment lines of an allowed-signers file, whitespace-normalised, as a set."""
    from assay.bounded import read_capped
    from assay.qualify.ledger.dsse import SIGNERS_BYTES

    if not path.is_file():
        raise AssayError(f"{path}: allowed signers: not a regular file")
    text = read_capped(path, SIGNERS_BYTES, "allowed-signers file").decode("utf-8", "replace")
    lines = (" ".join(line.split()) for line in text.splitlines())
    return frozenset(line for line in lines if line and not line.startswith("#"))


def signature_state(receipt_path: Path, trusted: Path | None) -> Signature:
    """Check ``receipt_path``'s detached signature against the allowed-signers file
    ``trusted``; always returns a :class:`Signature`.

    "signed" only when the signature holds for the file's bytes in namespace
    ``assay-receipt`` and its key belongs to a principal in ``trusted``. A signature by a key
    not in the file, over other bytes, in another namespace, or with no (or a missing)
    ``trusted`` file is "broken".
    """
    path = Path(receipt_path)
    sig = sig_path(path)
    if not sig.exists():
        return Signature(path, None, "unsigned", "no signature")
    if trusted is None or not Path(trusted).is_file():
        return Signature(path, None, "broken", "signed, but there is no allowed-signers file")
    tool = ssh_keygen()
    found = subprocess.run(
        [tool, "-Y", "find-principals", "-s", str(sig), "-f", str(trusted)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    principals = found.stdout.split()
    if found.returncode != 0 or not principals:
        return Signature(path, None, "broken", "signature by a key not in the allowed signers")
    argv = [tool, "-Y", "verify", "-f", str(trusted), "-I", principals[0]]
    argv += ["-n", NAMESPACE, "-s", str(sig)]
    with path.open("rb") as data:
        done = subprocess.run(
            argv, stdin=data, capture_output=True, text=True, timeout=60, check=False
        )
    if done.returncode != 0:
        return Signature(path, principals[0], "broken", "signature does not hold for these bytes")
    return Signature(path, principals[0], "signed", "good signature")


def check_signature(path: Path, allowed_signers: Path | None) -> Signature | None:
    """:func:`signature_state`, but None when the receipt is unsigned."""
    found = signature_state(path, allowed_signers)
    return None if found.state == "unsigned" else found
