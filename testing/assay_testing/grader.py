"""Exact-match grading of a free-text answer, with the formatting a reasonable grader forgives.

Normalisation (both sides): keep the first non-empty line, lower-case it, drop trailing
``. ! ? , ; :`` and surrounding quotes, and collapse runs of whitespace to one space. So
``" River  Cat."`` matches ``"river cat"``; ``"cat river"``, ``"river cat cat"`` and
``"I can't help with that."`` do not. The grader knows nothing about the task beyond the
expected string.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_TRAILING = ".!?,;:"
_QUOTES = "\"'`"


def normalise(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    first = lines[0] if lines else ""
    first = " ".join(first.lower().split())
    first = first.strip(_QUOTES).rstrip(_TRAILING).strip(_QUOTES)
    return re.sub(r"\s+", " ", first).strip()


def exact_match(answer: str, expected: str) -> bool:
    """True when both normalise to the same non-empty text."""
    return normalise(answer) == normalise(expected) and normalise(expected) != ""


def score(answers: Sequence[str], expected: Sequence[str]) -> float:
    """Fraction of answers that match; 0.0 for an empty list. Lengths must agree."""
    if len(answers) != len(expected):
        raise ValueError(f"{len(answers)} answers for {len(expected)} items")
    if not expected:
        return 0.0
    return sum(exact_match(a, e) for a, e in zip(answers, expected, strict=True)) / len(expected)
