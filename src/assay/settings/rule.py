"""One setting's rule (type, default, bounds, help, where it applies) and the dataclass-field
builders that attach a rule to each key of a settings section."""

from __future__ import annotations

import dataclasses
import math
import numbers
import operator
from dataclasses import dataclass
from typing import Any

_BOUND_HOLDS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}


@dataclass(frozen=True)
class Rule:
    """What one setting accepts and means.

    ``kind`` is a JSON type ("string", "integer", "number", "boolean", "array"), "size" (bytes
    or a string such as 4GiB) or "section". ``applies`` names the values of the section's
    selector (``adapter.method``, ``loss.type``) under which the key may be set; elsewhere it
    is refused and left None (``held`` keeps its default there instead: checkpoints of
    ``full`` runs were fingerprinted with the default targets). ``default`` is the value an
    applicable, omitted key takes; ``default_text`` says it in words where it is not one value.
    ``keep_null``: null is a meaning of its own (``optim.grad_clip: null`` disables clipping)
    and is written back.
    """

    help: str
    kind: str
    default: Any = None
    default_text: str | None = None
    choices: tuple[Any, ...] | None = None
    nullable: bool = False
    required: bool = False
    minimum: float | None = None
    exclusive_minimum: float | None = None
    maximum: float | None = None
    exclusive_maximum: float | None = None
    min_length: int | None = None
    items: dict[str, Any] | None = None
    min_items: int | None = None
    max_items: int | None = None
    unique: bool = False
    applies: tuple[str, ...] | None = None
    applies_text: str | None = None
    by_selector: dict[str | None, Any] | None = None
    keep_null: bool = False
    held: bool = False

    def default_for(self, selector: str | None = None) -> Any:
        """The default this key takes when omitted under ``selector`` (None if it does not
        apply there)."""
        if self.applies is not None and selector not in self.applies:
            return None
        return (self.by_selector or {}).get(selector, self.default)

    def violation(self, value: Any) -> str | None:
        """What a value given from Python (not from YAML, which the schema checks) breaks of
        this rule, as "must be ..., got ..."; None when it obeys. Checks the kind of a plain
        key (integer, number, string, boolean; numpy scalars count as numbers), finiteness,
        the bounds and the choices."""
        if self.choices is not None:
            expected = "one of " + ", ".join(str(c) for c in self.choices)
            return None if value in self.choices else f"must be {expected}, got {value!r}"
        kinds = {
            "integer": ("an integer", numbers.Integral),
            "number": ("a finite number", numbers.Real),
            "string": ("a string", str),
            "boolean": ("true or false", bool),
        }
        if self.kind not in kinds:
            return None  # arrays, sizes and sections are checked where they are read
        word, wanted = kinds[self.kind]
        bounds = [
            (sign, bound)
            for sign, bound in (
                (">=", self.minimum),
                (">", self.exclusive_minimum),
                ("<=", self.maximum),
                ("<", self.exclusive_maximum),
            )
            if bound is not None
        ]
        expected = " and ".join([word, *(f"{sign} {bound:g}" for sign, bound in bounds)])
        expected = expected.replace(" and ", " ", 1)
        ok = isinstance(value, wanted) and (self.kind == "boolean" or not isinstance(value, bool))
        if ok and wanted is numbers.Real:
            ok = math.isfinite(value)
        if ok and bounds:
            ok = all(_BOUND_HOLDS[sign](value, bound) for sign, bound in bounds)
        return None if ok else f"must be {expected}, got {value!r}"

    def where(self) -> str | None:
        """Where the key applies, in words, or None when it always does."""
        if self.applies is None:
            return None
        return self.applies_text or ", ".join(self.applies)


def setting(
    help: str,
    kind: str,
    default: Any = None,
    *,
    base: str | None = None,
    computed: bool = False,
    **rule: Any,
):
    """A dataclass field carrying its ``Rule``. The field's own default is the rule's default
    under the section's default selector ``base`` (None where the key does not apply). A
    required key, or one the loader ``computed`` when it is omitted, gets no field default."""
    found = Rule(help, kind, default, **rule)
    if found.required or computed:
        return dataclasses.field(metadata={"rule": found})
    value = found.default_for(base) if found.applies is not None else default
    if isinstance(value, (list, dict)):
        raise TypeError("mutable defaults are written as tuples")
    return dataclasses.field(default=value, metadata={"rule": found})


def section(
    help: str, cls: type, *, nullable: bool = False, required: bool = False, computed: bool = False
):
    """A dataclass field holding a nested section. An optional, non-null section defaults to
    ``cls()``; a nullable one to None (absent); a required or ``computed`` one has no default."""
    found = Rule(help, "section", nullable=nullable, required=required)
    if required or computed:
        return dataclasses.field(metadata={"rule": found, "section": cls})
    if nullable:
        return dataclasses.field(default=None, metadata={"rule": found, "section": cls})
    return dataclasses.field(default_factory=cls, metadata={"rule": found, "section": cls})
