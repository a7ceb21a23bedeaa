"""Paths as receipts and records write them: never the layout of the machine that published.

A path under the project root is written relative to it; under an install root (site-packages)
as ``<site-packages>/...``; under the temporary folder as ``<tmp>/...``; under the home folder
as ``~/...``; the longest matching root wins (a virtualenv inside the checkout is an install
root, a checkout under the home folder is the project). Other absolute paths (``/dev/zero``,
``/etc/...``) are the same on every machine and stay. :func:`local_path` maps a written path
back onto this machine, so staleness still compares files outside the project. Hashes are
never touched: only text.
"""

from __future__ import annotations

import os
import re
import site
import sysconfig
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

SITE = "<site-packages>"
TMP = "<tmp>"
HOME = "~"


@cache
def _install_roots() -> tuple[str, ...]:
    found = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    found |= set(getattr(site, "getsitepackages", list)())
    found.add(site.getusersitepackages())
    return tuple(sorted({os.path.realpath(p) for p in found if p}))


def _anchors(root: Path | None) -> list[tuple[str, str]]:
    """(absolute prefix, what it is written as), longest prefix first."""
    pairs = [(p, SITE) for p in _install_roots()]
    pairs.append((os.path.realpath(tempfile.gettempdir()), TMP))
    pairs.append((os.path.realpath(os.path.expanduser("~")), HOME))
    if root is not None:
        pairs.append((os.path.realpath(root), ""))
    return sorted({(p, w) for p, w in pairs if p not in ("", "/")}, key=lambda x: -len(x[0]))


def portable_path(path: str | os.PathLike[str], root: Path | None) -> str:
    """``path`` (absolute) as a receipt writes it; see the module docstring."""
    text = os.path.realpath(path)
    for prefix, written in _anchors(root):
        if text == prefix:
            return written or "."
        if text.startswith(prefix + os.sep):
            rest = text[len(prefix) + 1 :]
            return f"{written}/{rest}" if written else rest
    return text


def portable_text(text: str, root: Path | None) -> str:
    """``text`` with every machine path inside it written portably (a message quoting a file
    under pytest's temporary folder, a subject imported from the checkout)."""
    for prefix, written in _anchors(root):
        if prefix not in text:
            continue
        # the prefix as a whole path: not inside a longer name (/work/main2, /opt/work/main)
        pattern = r"(?<![\w./-])" + re.escape(prefix) + r"(/|(?![\w.-]))"

        def written_as(match: re.Match[str], written: str = written) -> str:
            if match.group(1) == "/":
                return f"{written}/" if written else ""
            return written or "."

        text = re.sub(pattern, written_as, text)
    return text


def portable(value: Any, root: Path | None) -> Any:
    """``value`` (a receipt, or any JSON value) with :func:`portable_text` applied to every
    string in it, keys included."""
    if isinstance(value, str):
        return portable_text(value, root)
    if isinstance(value, list):
        return [portable(v, root) for v in value]
    if isinstance(value, dict):
        return {portable_text(k, root): portable(v, root) for k, v in value.items()}
    return value


def is_outside(path: str) -> bool:
    """True for a written path outside the project: absolute, or under an anchor."""
    return Path(path).is_absolute() or path.startswith((f"{HOME}/", f"{SITE}/", f"{TMP}/"))


def local_path(path: str, root: Path) -> Path:
    """A written path on this machine: relative ones under ``root``, anchored ones under this
    machine's home, temporary folder or the first install root holding them."""
    if path.startswith(f"{HOME}/"):
        return Path(os.path.expanduser("~")) / path[2:]
    if path.startswith(f"{TMP}/"):
        return Path(tempfile.gettempdir()) / path[len(TMP) + 1 :]
    if path.startswith(f"{SITE}/"):
        rest = path[len(SITE) + 1 :]
        found = [Path(p) / rest for p in _install_roots() if (Path(p) / rest).exists()]
        return found[0] if found else Path(_install_roots()[0]) / rest
    return Path(path) if Path(path).is_absolute() else Path(root) / path
