"""Thresholds and verdicts: the arithmetic every claim is judged by, with no I/O."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from assay.errors import AssayError

OPS = ("<", "<=", "==", ">=", ">")
KINDS = ("correctness", "memory", "performance")
VERDICTS = ("pass", "fail", "inconclusive")


TOLERANCE_MODES = ("relative", "absolute", "threshold_scaled")


@dataclass(frozen=True)
class Tolerance:
    """How much worse than a baseline receipt a measurement may be before it regresses.

    ``relative``: a fraction of the baseline value (0.5 = 50 % worse is allowed); the right
    choice for timings and throughputs. ``absolute``: a distance in the measurement's unit.
    ``threshold_scaled``: a fraction of max(|baseline|, |threshold|), for error bounds whose
    baseline sits far below the threshold (0 or 3e-8 against 1e-4) and may drift across builds.
    """

    mode: str
    value: float

    def __post_init__(self) -> None:
        if self.mode not in TOLERANCE_MODES:
            raise AssayError(
                f"Tolerance.mode: expected one of {', '.join(TOLERANCE_MODES)}, got {self.mode!r}"
            )
        _finite_non_negative("Tolerance.value", self.value)

    @classmethod
    def relative(cls, value: float) -> Tolerance:
        """A fraction of the baseline value."""
        return cls("relative", value)

    @classmethod
    def absolute(cls, value: float) -> Tolerance:
        """A distance in the measurement's unit."""
        return cls("absolute", value)

    @classmethod
    def threshold_scaled(cls, value: float) -> Tolerance:
        """A fraction of max(|baseline|, |threshold|)."""
        return cls("threshold_scaled", value)

    def to_dict(self) -> dict[str, Any]:
        """The receipt form ``{"mode", "value"}``."""
        return {"mode": self.mode, "value": self.value}


def _is_finite(number: int | float) -> bool:
    """Whether a float can hold ``number`` as a finite value (an int past its range cannot)."""
    try:
        return math.isfinite(number)
    except OverflowError:
        return False


def _finite_non_negative(where: str, number: Any) -> None:
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        raise AssayError(f"{where}: expected a number, got {number!r}")
    if not _is_finite(number):
        raise AssayError(f"{where}: expected a finite number, got {str(number)[:40]}")
    if number < 0:
        raise AssayError(f"{where}: expected >= 0, got {number!r}")


@dataclass(frozen=True)
class Threshold:
    """A bound a measurement must meet: ``measured <op> value``.

    ``tolerance`` is the regression allowed against a baseline receipt; it never loosens the
    threshold itself. Pass a :class:`Tolerance` to name its mode; a bare number takes the
    claim kind's default mode (``relative`` for performance claims, ``threshold_scaled`` for
    correctness and memory claims), and the receipt always records the mode used.
    """

    op: str
    value: float
    tolerance: float | Tolerance = 0.0

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise AssayError(f"Threshold.op: expected one of {' '.join(OPS)}, got {self.op!r}")
        number = self.value
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise AssayError(f"Threshold.value: expected a number, got {number!r}")
        if not _is_finite(number):
            raise AssayError(f"Threshold.value: expected a finite number, got {str(number)[:40]}")
        if not isinstance(self.tolerance, Tolerance):
            _finite_non_negative("Threshold.tolerance", self.tolerance)

    def met_by(self, measured: float) -> bool:
        """True exactly when ``measured <op> value`` holds; NaN never meets a threshold."""
        return meets(self.op, self.value, measured)

    def to_dict(self, kind: str = "correctness") -> dict[str, Any]:
        """The receipt form ``{"op", "value", "tolerance": {"mode", "value"}}``; a bare-number
        tolerance takes ``kind``'s default mode."""
        tol = self.tolerance
        if not isinstance(tol, Tolerance):
            tol = Tolerance(default_mode(kind), tol)
        return {"op": self.op, "value": self.value, "tolerance": tol.to_dict()}


def default_mode(kind: str) -> str:
    """The tolerance mode a bare-number tolerance gets for a claim of ``kind``."""
    return "relative" if kind == "performance" else "threshold_scaled"


def tolerance_of(threshold: dict[str, Any]) -> tuple[str, float]:
    """(mode, value) of a receipt threshold; receipts written before modes existed hold a bare
    number, which was always threshold-scaled."""
    tol = threshold["tolerance"]
    if isinstance(tol, dict):
        return tol["mode"], tol["value"]
    return "threshold_scaled", tol


def tolerance_base(mode: str, baseline: float, bound: float) -> float:
    """What a tolerance of ``mode`` is a fraction of: the unit for ``absolute``."""
    if mode == "relative":
        return abs(baseline)
    if mode == "threshold_scaled":
        return max(abs(baseline), abs(bound))
    return 1.0


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
    op: str,
    tolerance: float,
    baseline: float,
    measured: float,
    bound: float = 0.0,
    mode: str = "threshold_scaled",
) -> bool:
    """True when ``measured`` is worse than ``baseline`` by more than the allowed regression.

    The allowance is ``tolerance * tolerance_base(mode, baseline, bound)``: a fraction of the
    baseline (``relative``), a distance in the unit (``absolute``) or a fraction of
    max(|baseline|, |bound|) (``threshold_scaled``). Equality thresholds compare exactly. A
    zero base (a zero baseline, relative) allows no worsening.
    """
    direction = lower_is_better(op)
    if direction is None:
        return measured != baseline
    allowed = tolerance_base(mode, baseline, bound) * tolerance
    loss = measured - baseline if direction else baseline - measured
    return loss > allowed


def non_finite_kind(value: Any) -> str | None:
    """``"nan"``, ``"inf"`` or ``"-inf"`` for a float that is not finite, else None."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return None


def judge(claim: dict[str, Any]) -> dict[str, Any]:
    """Return the verdict fields for a declared claim: verdict, margin and judged controls.

    ``claim`` carries ``threshold`` {op, value}, ``measurement`` (``{"value": ...}`` or None)
    and ``controls`` [{name, measured}]. A claim passes only when it is measured, meets the
    threshold, has at least one control and every control misses the threshold. A measurement
    that is not a finite number (``value`` None with ``non_finite`` set, or NaN/infinity given
    directly) fails; a control that is not finite shows nothing about the check, so it does not
    count as failing and the claim cannot pass on it.
    """
    op, bound = claim["threshold"]["op"], claim["threshold"]["value"]
    controls = []
    for c in claim.get("controls", []):
        broken = c.get("non_finite") or non_finite_kind(c["measured"]) or c["measured"] is None
        judged = {
            "name": c["name"],
            "measured": c["measured"],
            "failed": False if broken else not meets(op, bound, c["measured"]),
        }
        if c.get("non_finite"):
            judged["non_finite"] = c["non_finite"]
        controls.append(judged)
    measurement = claim.get("measurement")
    value = None if measurement is None else measurement["value"]
    if measurement is not None and (measurement.get("non_finite") or non_finite_kind(value)):
        verdict, signed = "fail", None
    elif value is None:
        verdict, signed = "inconclusive", None
    elif not meets(op, bound, value):
        verdict, signed = "fail", margin(op, bound, value)
    else:
        signed = margin(op, bound, value)
        conclusive = bool(controls) and all(c["failed"] for c in controls)
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
    odd = measurement.get("non_finite") or non_finite_kind(measurement["value"])
    if odd:
        return f"{name} fails: measured {odd}, which is not a finite number"
    if verdict["verdict"] == "fail":
        return f"{name} fails: measured {measurement['value']:g} {unit}, threshold {bound}".strip()
    if not verdict["controls"]:
        return f"{name} inconclusive: no control declared, so the check is not shown able to fail"
    broken = [c for c in verdict["controls"] if c.get("non_finite") or c["measured"] is None]
    if broken:
        names = ", ".join(
            f"{c['name']!r} measured {c.get('non_finite', 'nothing')}" for c in broken
        )
        return (
            f"{name} inconclusive: control {names}, not a finite number, so the check is not "
            "shown able to fail"
        )
    passed = [c for c in verdict["controls"] if not c["failed"]]
    names = ", ".join(f"{c['name']!r} measured {c['measured']:g}" for c in passed)
    return f"{name} inconclusive: control {names} met the threshold {bound}; the check cannot fail"


def unjudged(claims: list[dict[str, Any]], judged: dict[str, str]) -> list[str]:
    """Why each claim that did not pass fails its test, except those already failed at the
    end of the call with the same verdict: a claim is judged the same way wherever it was
    declared or measured (body, fixture, teardown, finalizer)."""
    found = []
    for claim in claims:
        verdict = judge(claim)
        if verdict["verdict"] != "pass" and judged.get(claim["id"]) != verdict["verdict"]:
            found.append(explain(claim, verdict))
    return found
