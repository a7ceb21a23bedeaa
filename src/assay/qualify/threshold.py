"""Thresholds and verdicts: the arithmetic every claim is judged by, with no I/O."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from assay.errors import AssayError
from assay.faultpoints import armed, declare

NO_CONTROL_PASSES = declare(
    "qualify.threshold.controls_ignored",
    "a claim passes on its measurement alone, whatever its controls",
)

OPS = ("<", "<=", "==", ">=", ">")
KINDS = ("correctness", "memory", "performance")
VERDICTS = ("pass", "fail", "inconclusive")


@dataclass(frozen=True)
class Threshold:
    """A bound a measurement must meet: ``measured <op> value``.

    ``tolerance`` is the relative regression allowed against a baseline receipt (0.05 = 5 %
    worse is still acceptable); it never loosens the threshold itself.
    """

    op: str
    value: float
    tolerance: float = 0.0

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise AssayError(f"Threshold.op: expected one of {' '.join(OPS)}, got {self.op!r}")
        for field in ("value", "tolerance"):
            number = getattr(self, field)
            if isinstance(number, bool) or not isinstance(number, (int, float)):
                raise AssayError(f"Threshold.{field}: expected a number, got {number!r}")
            if not math.isfinite(number):
                raise AssayError(f"Threshold.{field}: expected a finite number, got {number!r}")
        if self.tolerance < 0:
            raise AssayError(f"Threshold.tolerance: expected >= 0, got {self.tolerance!r}")

    def met_by(self, measured: float) -> bool:
        """True exactly when ``measured <op> value`` holds; NaN never meets a threshold."""
        return meets(self.op, self.value, measured)

    def to_dict(self) -> dict[str, Any]:
        """The receipt form: ``{"op", "value", "tolerance"}``."""
        return {"op": self.op, "value": self.value, "tolerance": self.tolerance}


def meets(op: str, bound: float, measured: float) -> bool:
    """True when ``measured <op> bound``; an unknown operator or NaN gives False."""
    if op == "<":
        return measured < bound
    if op == "<=":
        return measured <= bound
    if op == "==":
        return measured == bound
    if op == ">=":
        return measured >= bound
    if op == ">":
        return measured > bound
    return False


def margin(op: str, bound: float, measured: float) -> float:
    """Signed distance to the bound, positive inside it, in the measurement's unit.

    For ``==`` the margin is ``-|measured - bound|``: zero when met, negative otherwise.
    """
    if op in ("<", "<="):
        return bound - measured
    if op in (">", ">="):
        return measured - bound
    return -abs(measured - bound)


def lower_is_better(op: str) -> bool | None:
    """Direction of improvement implied by the operator; None for equality."""
    if op in ("<", "<="):
        return True
    if op in (">", ">="):
        return False
    return None


def worse_than(
    op: str, tolerance: float, baseline: float, measured: float, bound: float = 0.0
) -> bool:
    """True when ``measured`` is worse than ``baseline`` by more than ``tolerance`` (relative).

    Equality thresholds compare exactly: any change from the baseline value is worse. The
    tolerance scales with the larger of the baseline and the threshold's ``bound``, so a
    floating-point error far below its bound (0 or 3e-8 against 1e-4, tolerance 0.1) may
    drift by up to 1e-5 across machines and library builds without counting as a
    regression; with a zero baseline and a zero bound, no worsening is allowed.
    """
    direction = lower_is_better(op)
    if direction is None:
        return measured != baseline
    allowed = max(abs(baseline), abs(bound)) * tolerance
    loss = measured - baseline if direction else baseline - measured
    return loss > allowed


def judge(claim: dict[str, Any]) -> dict[str, Any]:
    """Return the verdict fields for a declared claim: verdict, margin and judged controls.

    ``claim`` carries ``threshold`` {op, value}, ``measurement`` (``{"value": ...}`` or None)
    and ``controls`` [{name, measured}]. A claim passes only when it is measured, meets the
    threshold, has at least one control and every control misses the threshold.
    """
    op, bound = claim["threshold"]["op"], claim["threshold"]["value"]
    controls = [
        {
            "name": c["name"],
            "measured": c["measured"],
            "failed": not meets(op, bound, c["measured"]),
        }
        for c in claim.get("controls", [])
    ]
    measurement = claim.get("measurement")
    value = None if measurement is None else measurement["value"]
    if value is None:
        verdict, signed = "inconclusive", None
    elif not meets(op, bound, value):
        verdict, signed = "fail", margin(op, bound, value)
    else:
        signed = margin(op, bound, value)
        conclusive = bool(controls) and all(c["failed"] for c in controls)
        conclusive = conclusive or armed(NO_CONTROL_PASSES)
        verdict = "pass" if conclusive else "inconclusive"
    return {"verdict": verdict, "margin": signed, "controls": controls}


def explain(claim: dict[str, Any], verdict: dict[str, Any]) -> str:
    """One line saying why a claim did not pass (empty for a pass)."""
    t = claim["threshold"]
    bound = f"{t['op']} {t['value']:g}"
    unit = claim.get("unit", "")
    name = f"claim {claim['id']!r}"
    if verdict["verdict"] == "pass":
        return ""
    measurement = claim.get("measurement")
    if measurement is None:
        return f"{name} inconclusive: it was declared but never measured"
    if verdict["verdict"] == "fail":
        return f"{name} fails: measured {measurement['value']:g} {unit}, threshold {bound}".strip()
    if not verdict["controls"]:
        return f"{name} inconclusive: no control declared, so the check is not shown able to fail"
    passed = [c for c in verdict["controls"] if not c["failed"]]
    names = ", ".join(f"{c['name']!r} measured {c['measured']:g}" for c in passed)
    return f"{name} inconclusive: control {names} met the threshold {bound}; the check cannot fail"
