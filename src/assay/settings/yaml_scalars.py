"""YAML 1.1 scalars that read as something other than what they look like, caught by key.

PyYAML reads YAML 1.1, where ``steps: 010`` is octal 8, ``model: no`` is the boolean false,
``seed: 1:30`` is the base-60 number 90 and ``0b101`` is 5; YAML 1.2 reads the first three as
10, the text "no" and the text "1:30". A config never means either silently:

- a plain scalar of one of those forms is resolved to a :class:`Surprising` marker instead of
  a value (:func:`install` puts the resolver in front of PyYAML's own);
- :func:`settle` then walks the document: ``yes``/``no``/``on``/``off`` set on a boolean
  setting keep their YAML 1.1 meaning (``truncate: yes`` is true); every other marker on a
  setting is a ConfigError naming the file, the key and both readings; under a key that is
  not a setting the marker becomes its text, so the schema names the unknown key.

Integers with a leading zero, ``0x``, ``0o`` or ``0b``, sexagesimal numbers and YAML 1.1 dates
are refused on every setting: settings take decimal integers and plain text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from assay.errors import ConfigError

TAG = "tag:assay.dev,2026:yaml11-surprise"
EXTENSION = "x-"
BOOL_WORDS = {
    **dict.fromkeys(("yes", "Yes", "YES", "on", "On", "ON"), True),
    **dict.fromkeys(("no", "No", "NO", "off", "Off", "OFF"), False),
}
_LEADING_ZERO = re.compile(r"^[-+]?0[0-9_]+$")
_HEX = re.compile(r"^[-+]?0[xX][0-9a-fA-F_]+$")
_OCTAL12 = re.compile(r"^[-+]?0[oO][0-7_]+$")
_BINARY = re.compile(r"^[-+]?0[bB][01_]+$")
_BASE60 = re.compile(r"^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$")
_DATE = re.compile(
    r"^[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}"
    r"(?:(?:[Tt]|[ \t]+)[0-9]{1,2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]*)?"
    r"(?:[ \t]*(?:Z|[-+][0-9]{1,2}(?::[0-9]{2})?))?)?$"
)
_ANY = re.compile(
    "|".join(f"(?:{rx.pattern})" for rx in (_LEADING_ZERO, _HEX, _OCTAL12, _BINARY, _BASE60, _DATE))
    + "|^(?:"
    + "|".join(BOOL_WORDS)
    + ")$"
)


@dataclass(frozen=True)
class Surprising:
    """A plain scalar that YAML 1.1 and 1.2 (or the eye) read differently; ``line`` 1-based."""

    text: str
    line: int


def install(loader: type[yaml.SafeLoader]) -> None:
    """Resolve the surprising forms on ``loader`` to :class:`Surprising`, ahead of PyYAML's
    bool, int, float and timestamp resolvers (which would otherwise read them as YAML 1.1)."""
    firsts = "+-0123456789yYnNoO"
    table = {k: list(v) for k, v in loader.yaml_implicit_resolvers.items()}
    for first in firsts:
        table[first] = [(TAG, _ANY), *table.get(first, [])]
    loader.yaml_implicit_resolvers = table

    def construct(self: yaml.SafeLoader, node: yaml.ScalarNode) -> Surprising:
        return Surprising(str(node.value), node.start_mark.line + 1)

    loader.add_constructor(TAG, construct)


def _reading(text: str) -> str:
    """What the scalar means in YAML 1.1 against 1.2, and what to write instead."""
    plain = text.replace("_", "")
    sign = -1 if plain.startswith("-") else 1
    digits = plain.lstrip("+-")
    if text in BOOL_WORDS:
        return (
            f"YAML 1.1 reads {text!r} as the boolean {str(BOOL_WORDS[text]).lower()} and YAML "
            f"1.2 as text; this setting is not a boolean: quote it ('{text}') for the text"
        )
    if _LEADING_ZERO.match(text):
        v12 = sign * int(digits, 10)
        v11 = f"octal {sign * int(digits, 8)}" if set(digits) <= set("01234567") else "text"
        return (
            f"{text} has a leading zero, which YAML 1.1 reads as {v11} and YAML 1.2 as "
            f"{v12}; write {v12} (decimal, no leading zero)"
        )
    if _HEX.match(text) or _OCTAL12.match(text) or _BINARY.match(text):
        base = {"x": 16, "o": 8, "b": 2}[digits[1].lower()]
        value: int | float = sign * int(digits[2:], base)
        name = {16: "hexadecimal", 8: "octal", 2: "binary"}[base]
        article = "an" if name[0] == "o" else "a"
        return f"{text} is {article} {name} integer; settings take decimal integers: write {value}"
    if _BASE60.match(text):
        value = 0.0
        for part in digits.split(":"):
            value = value * 60 + float(part)
        number = f"{sign * value:g}"
        return (
            f"YAML 1.1 reads {text} as the base-60 number {number} and YAML 1.2 as text; "
            f"write {number}, or quote it ('{text}') for the text"
        )
    return f"YAML 1.1 reads {text} as a date; quote it ('{text}') for the text"


def _rule_kind(path: str) -> str | None:
    """The kind of the setting at ``path`` (list indices ignored); None if not a setting."""
    from assay.settings import rule

    try:
        return rule(re.sub(r"\[\d+\]", "", path)).kind
    except (KeyError, StopIteration):
        return None


def _settle_one(value: Surprising, path: str, source: Path) -> Any:
    kind = _rule_kind(path)
    if kind is None or kind == "section":
        return value.text  # not a setting: the schema names the key
    if kind == "boolean" and value.text in BOOL_WORDS:
        return BOOL_WORDS[value.text]
    raise ConfigError(f"{source}: line {value.line}: {path}: {_reading(value.text)}")


def settle(data: Any, source: Path, path: str = "") -> Any:
    """``data`` with every :class:`Surprising` resolved or refused (see the module text);
    top-level ``x-`` keys (anchor holders) are left as they are."""
    if isinstance(data, Surprising):
        return _settle_one(data, path, source)
    if isinstance(data, dict):
        out = {}
        for key, child in data.items():
            name = key.text if isinstance(key, Surprising) else key
            if not path and isinstance(name, str) and name.startswith(EXTENSION):
                out[name] = child
                continue
            out[name] = settle(child, source, f"{path}.{name}" if path else str(name))
        return out
    if isinstance(data, list):
        return [settle(child, source, f"{path}[{i}]") for i, child in enumerate(data)]
    return data
