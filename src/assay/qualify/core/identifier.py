"""Claim ids that read as what they are: two ids that look the same are the same string.

An id is compared byte for byte everywhere (records, comparisons, corrections), so an id with
surrounding whitespace, a control character, or a form that Unicode NFKC normalisation would
change (a full-width letter, a ligature) could sit beside a visually identical one and be
listed as "missing" next to it. Such ids are refused where they are declared and where a
receipt is read.
"""

from __future__ import annotations

import unicodedata


def id_problem(value: str) -> str | None:
    """Why ``value`` is not a usable claim id, or None when it is."""
    if value != value.strip():
        return "has leading or trailing whitespace"
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") for ch in value):
        return "holds a control or invisible format character"
    if unicodedata.normalize("NFKC", value) != value:
        shown = unicodedata.normalize("NFKC", value)
        return f"is not in Unicode NFKC form (it would read as {shown!r})"
    return None
