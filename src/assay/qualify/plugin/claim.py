"""One claim of a gate test: a statement, a threshold, one measurement and the controls that
must fail it, kept as JSON-ready data. A measurement that is not a finite number is kept as not
finite, so it never vanishes into a median or a pass."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable
from typing import Any, Protocol, cast

from assay.errors import AssayError
from assay.qualify.core.threshold import Threshold, non_finite_kind


class Owner(Protocol):
    """What a claim needs of its gate: whether declarations are still taken."""

    def check_open(self, where: str) -> None: ...


# seconds per unit, for timing measurements recorded in a claim's own time unit
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
# other spellings of a time, read case-blind: a claim in any of them is a timing claim
_TIME_WORDS = {
    **dict.fromkeys(("sec", "secs", "second", "seconds"), 1.0),
    **dict.fromkeys(("msec", "msecs", "millisecond", "milliseconds"), 1e-3),
    **dict.fromkeys(("μs", "usec", "usecs", "microsecond", "microseconds"), 1e-6),  # Greek mu
    **dict.fromkeys(("nsec", "nsecs", "nanosecond", "nanoseconds"), 1e-9),
    **dict.fromkeys(("min", "mins", "minute", "minutes"), 60.0),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), 3600.0),
}


def seconds_per(unit: str) -> float | None:
    """Seconds in one ``unit`` when it names a time (``ms``, ``msec``, ``seconds``, ``μs``
    ...), else None."""
    if unit in TIME_UNITS:
        return TIME_UNITS[unit]
    return _TIME_WORDS.get(unit.strip().lower())


def _number(value: Any, where: str) -> float:
    """``value`` as a Python float (an int stays an int when a float can hold it); NaN and
    infinity pass through, to be kept as not finite. AssayError for anything else: a string, a
    bool, an int beyond a float's range, an object whose ``__float__`` fails."""
    if isinstance(value, (bool, str, bytes)):
        raise AssayError(f"{where}: expected a number, got {value!r}")
    if isinstance(value, float):
        return value
    if not isinstance(value, int) and not hasattr(value, "__float__"):
        raise AssayError(f"{where}: expected a number, got {value!r}")
    try:  # numpy/torch scalars and Decimal expose __float__; accept them, nothing else
        number = float(value)
    except (TypeError, ValueError, OverflowError) as err:
        shown = repr(value)[:40]
        raise AssayError(f"{where}: {shown} is not a number a float can hold ({err})") from None
    if math.isinf(number) and _finite_text(value):  # Decimal("1e400"): finite, past a float
        raise AssayError(f"{where}: {repr(value)[:40]} is not a number a float can hold")
    return value if isinstance(value, int) else number


def _finite_text(value: Any) -> bool:
    """Whether a number-like whose float is infinite says it is finite (a Decimal does)."""
    is_finite = getattr(value, "is_finite", None)
    try:
        return bool(is_finite()) if callable(is_finite) else False
    except Exception:  # an object whose is_finite is not Decimal's: trust its float
        return False


def _stats(numbers: list[float]) -> dict[str, Any]:
    median = statistics.median(numbers)
    found: dict[str, Any] = {"median": median}
    if len(numbers) > 1:
        q1, _, q3 = statistics.quantiles(numbers, n=4)
        iqr = q3 - q1
        outliers = sum(x < q1 - 1.5 * iqr or x > q3 + 1.5 * iqr for x in numbers)
        found.update(q1=q1, q3=q3, iqr=iqr, outliers=outliers)
    return found


def _spread(numbers: list[float]) -> dict[str, Any]:
    """n, min, median, max and, for several samples, quartiles, IQR and Tukey outliers, all
    finite for finite samples: where the arithmetic overflows (two samples near the largest
    float) it is done on scaled values, and quartiles that still cannot be held are left out."""
    found: dict[str, Any] = {"n": len(numbers), "min": min(numbers), "max": max(numbers)}
    stats = _stats(numbers)
    if any(non_finite_kind(v) for v in stats.values()):
        scale = max(abs(x) for x in numbers)
        scaled = _stats([x / scale for x in numbers])
        stats = {k: v if k == "outliers" else v * scale for k, v in scaled.items()}
        if any(non_finite_kind(v) for v in stats.values()):
            stats = {"median": stats["median"]}
    return {**found, "median": stats.pop("median"), **stats}


class MeasuredControl(float):
    """A control's median time per call in ``unit``, as :func:`measure_control` measured it:
    the only kind of control a timing claim takes (a number typed in shows nothing about the
    timing). ``claim.control`` converts it to the claim's own unit."""

    unit: str

    def __new__(cls, seconds_in_unit: float, unit: str) -> MeasuredControl:
        if unit not in TIME_UNITS:
            raise AssayError(f"measure_control: unit {unit!r} is not one of s, ms, us or ns")
        made = super().__new__(cls, seconds_in_unit)
        made.unit = unit
        return made

    def __reduce__(self) -> tuple[Any, ...]:
        return (MeasuredControl, (float(self), self.unit))

    def in_unit(self, unit: str, where: str) -> float:
        """This time in ``unit``; AssayError naming ``where`` when ``unit`` is not a time."""
        seconds = seconds_per(unit)
        if seconds is None:
            raise AssayError(
                f"{where}: a time measured in {self.unit} cannot be compared with a claim in "
                f"{unit!r} (expected s, ms, us or ns)"
            )
        return float(self) * TIME_UNITS[self.unit] / seconds


def nonempty_text(value: Any, where: str) -> str:
    """``value`` when it is a non-empty string; AssayError naming ``where`` otherwise."""
    if not isinstance(value, str) or not value.strip():
        raise AssayError(f"{where}: expected a non-empty string, got {value!r}")
    return value


class Claim:
    """One claim: a statement, a threshold, one measurement and the controls that must fail it."""

    def __init__(self, data: dict[str, Any], threshold: Threshold, gate: Owner) -> None:
        self._data = data
        self.threshold = threshold
        self._gate = gate
        self._measured_controls: list[bool] = []

    def _timed(self) -> bool:
        """A timing claim: measured with ``timing=``, or a performance claim in a time unit
        (its samples may come from any clock; its controls must still be measured)."""
        measurement = self._data["measurement"]
        if measurement is not None and "timing" in measurement:
            return True
        timed_unit = seconds_per(self._data["unit"]) is not None
        return self._data.get("kind") == "performance" and timed_unit

    def _gate_open(self, where: str) -> None:
        self._gate.check_open(where)

    @property
    def id(self) -> str:
        """The claim id, unique within its gate."""
        return cast(str, self._data["id"])  # Gate.claim takes the id as a str

    def measure(
        self,
        value: float | None = None,
        *,
        samples: Iterable[float] | None = None,
        timing: Any = None,
    ) -> None:
        """Record the measurement: one ``value``, repeated ``samples`` (value = median), or a
        ``timing`` from :func:`assay.qualify.plugin.timing.measure_time` (value = median time per
        call in the claim's unit, one of s, ms, us, ns; its statistics go in the receipt).

        A claim is measured exactly once. A value, sample or timing that is NaN or infinite
        never vanishes: the measurement is kept as not finite (``value`` None, ``non_finite``
        naming it, the finite samples' spread beside it) and the claim fails.
        """
        where = f"claim {self.id!r} measure"
        self._gate_open(where)
        if self._data["measurement"] is not None:
            raise AssayError(f"{where}: already measured; a claim takes one measurement")
        if sum(x is not None for x in (value, samples, timing)) != 1:
            raise AssayError(f"{where}: pass exactly one of value, samples= or timing=")
        unit = self._data["unit"]
        if timing is not None:
            if unit not in TIME_UNITS:
                raise AssayError(f"{where}: a timing needs the claim unit s, ms, us or ns")
            if not all(self._measured_controls):
                raise AssayError(
                    f"{where}: a timing claim's controls must be measured slower variants "
                    "(assay.qualify.measure_control), and one was a number typed in"
                )
            scale = 1.0 / TIME_UNITS[unit]
            stats = timing.stats(scale)
            odd = next((k for v in stats.values() if (k := non_finite_kind(v))), None)
            if odd:  # a timer that returned garbage: the claim fails, the stats cannot travel
                self._data["measurement"] = {"value": None, "unit": unit, "non_finite": odd}
                return
            self._data["measurement"] = {
                "value": stats["median"],
                "unit": unit,
                "samples": {k: stats[k] for k in ("n", "min", "median", "max")},
                "timing": stats,
            }
            return
        if samples is None:
            number = _number(value, where)
            odd = non_finite_kind(number)
            self._data["measurement"] = (
                {"value": None, "unit": unit, "non_finite": odd}
                if odd
                else {"value": number, "unit": unit}
            )
            return
        numbers = [_number(s, f"{where} samples") for s in samples]
        if not numbers:
            raise AssayError(f"{where}: samples is empty; expected at least one number")
        odd_kinds = [k for x in numbers if (k := non_finite_kind(x))]
        finite = [x for x in numbers if non_finite_kind(x) is None]
        summary = _spread(finite) if finite else {}
        if odd_kinds:  # a NaN never vanishes into a median: the claim fails and says so
            summary = {**summary, "n": len(numbers), "non_finite": len(odd_kinds)}
            self._data["measurement"] = {
                "value": None,
                "unit": unit,
                "non_finite": odd_kinds[0],
                "samples": summary,
            }
            return
        self._data["measurement"] = {"value": summary["median"], "unit": unit, "samples": summary}

    def control(self, name: str, measured: float) -> None:
        """Record the same check on a deliberately broken subject; it must miss the threshold.
        A control that measured NaN or infinity shows nothing: it is kept as not finite and the
        claim cannot pass on it."""
        where = f"claim {self.id!r} control"
        self._gate_open(where)
        name = nonempty_text(name, f"{where} name")
        if any(c["name"] == name for c in self._data["controls"]):
            raise AssayError(f"{where}: control {name!r} declared twice")
        timed_control = isinstance(measured, MeasuredControl)
        if self._timed() and not timed_control:
            raise AssayError(
                f"{where}: a timing claim's control is a measured slower variant "
                "(assay.qualify.measure_control, or MeasuredControl(seconds_in_unit, unit) for "
                "a time you took yourself), not a number typed in"
            )
        if isinstance(measured, MeasuredControl):  # measured in its own unit: read in ours
            measured = measured.in_unit(self._data["unit"], where)
        number = _number(measured, where)
        odd = non_finite_kind(number)
        plain = number if type(number) in (int, float) else float(number)  # travels via xdist
        entry: dict[str, Any] = {"name": name, "measured": None if odd else plain}
        self._measured_controls.append(timed_control)
        if odd:
            entry["non_finite"] = odd
        self._data["controls"].append(entry)

    def ran_on(self, device: str) -> None:
        """Record the device this claim's tensors were on (``cpu``, ``cuda``, ``cuda:1`` ...), as
        the test read it from its tensors or model. The framework imports no torch: it only
        stores the device type, so a claim measured on the CPU inside a run started with
        ``--gate-device cuda`` is labelled cpu. A label must be a device this process could have
        used: ``cpu``, or ``cuda``/``mps``/``xpu`` when the process's torch sees one
        (AssayError otherwise)."""
        where = f"claim {self.id!r} ran_on"
        self._gate_open(where)
        kind = nonempty_text(device, where).split(":", 1)[0].strip().lower()
        if not re.fullmatch(r"[a-z][a-z0-9_]*", kind):
            raise AssayError(
                f"{where}: expected a device type like 'cpu' or 'cuda', not {device!r}"
            )
        from assay.qualify.plugin.environment import device_seen

        if not device_seen(kind):
            raise AssayError(
                f"{where}: {kind!r}, but this process's torch sees no such device (known: cpu, "
                "cuda, mps, xpu); a label comes from the tensors the test actually used"
            )
        self._data["device"] = kind

    @property
    def measured(self) -> float | None:
        """The measured value, or None before :meth:`measure`."""
        m = self._data["measurement"]
        return None if m is None else m["value"]
