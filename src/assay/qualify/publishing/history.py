"""Claim history: each numeric claim's measured value over its gate's ledger, drawn as a small
SVG (x: ledger order, labelled with commit and date; the bound a dashed line; a failing run
red; a partial run hollow; the device as colour), and the headline claim as a text sparkline
for the index. From a claim's first measurement on a device, every later run on that device
has a mark: one whose value is missing, NaN or infinite (or that lacks the claim) is drawn as
a red cross on the axis, and as ``x`` in the sparkline, never left out. Drawn from the
receipts alone with fixed number formatting, so one ledger always gives the same bytes and
``verify`` re-draws and compares them like the records.
"""

from __future__ import annotations

import hashlib
import html
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard, cast

from assay.qualify.judging.standing import Standing

HISTORY_DIR = "figures/history"  # under the records folder
DEVICE_COLOURS = {"cpu": "#1f6feb", "cuda": "#2da44e"}
OTHER_COLOUR = "#8250df"
FAIL_COLOUR = "#cf222e"
WIDTH, HEIGHT, PAD = 360, 120, 28
SPARKS = "▁▂▃▄▅▆▇█"


@dataclass(frozen=True)
class Point:
    """One receipt's measurement of a claim."""

    order: int  # position in the ledger (0: oldest)
    value: float | None  # None: the run made no finite measurement (drawn as not passing)
    passed: bool
    partial: bool
    device: str
    label: str  # commit and date, for the tooltip


def _numeric(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value


def _finite(value: Any) -> TypeGuard[float]:
    return _numeric(value) and abs(value) <= 1e300


def claim_points(standing: Standing) -> dict[str, tuple[list[Point], float | None]]:
    """Claim id -> (its points in ledger order, the newest bound), for claims measured as a
    finite number at least once; from its first such run on a device, each later run on that
    device is a point, with value None where it has no finite measurement of the claim."""
    found: dict[str, tuple[list[Point], float | None]] = {}
    first: dict[tuple[str, str], int] = {}
    for order, receipt in enumerate(standing.receipts):
        for claim in receipt["claims"]:
            key = (claim["id"], receipt["run"]["device"])
            if _finite(claim["measurement"].get("value")) and key not in first:
                first[key] = order
    for order, receipt in enumerate(standing.receipts):
        commit = (receipt["code"].get("commit") or "no commit")[:7]
        label = f"{commit} {receipt['created'][:10]}"
        device = receipt["run"]["device"]
        held = {claim["id"]: claim for claim in receipt["claims"]}
        for cid in sorted({c for c, d in first if d == device}):
            if order < first[(cid, device)]:
                continue
            claim = held.get(cid)
            value = None if claim is None else claim["measurement"].get("value")
            point = Point(
                order,
                float(value) if _finite(value) else None,
                claim is not None and claim["verdict"] == "pass" and _finite(value),
                bool(receipt["run"].get("partial")),
                device,
                label,
            )
            points, bound = found.get(cid, ([], None))
            if claim is not None:
                newest = claim["threshold"]["value"]
                bound = newest if _numeric(newest) else None
            found[cid] = ([*points, point], bound)
    return found


def figure_path(gate: str, claim_id: str) -> str:
    """Where a claim's history figure lives, relative to the records folder (the claim id
    made safe for a file name, with a digest so two ids never share one)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", claim_id)[:60]
    digest = hashlib.sha256(claim_id.encode("utf-8")).hexdigest()[:8]
    return f"{HISTORY_DIR}/{gate}/{safe}-{digest}.svg"


def _f(x: float) -> str:
    return f"{x:.1f}"


def history_svg(claim_id: str, points: list[Point], bound: float | None, count: int) -> str:
    """The figure of one claim: ``count`` ledger entries on x, values and bound on y."""
    values = [p.value for p in points if p.value is not None]
    values += [bound] if bound is not None else []
    low, high = min(values), max(values)
    if high == low:
        high, low = high + (abs(high) or 1.0) * 0.1, low - (abs(low) or 1.0) * 0.1

    def x(order: int) -> float:
        return PAD + (WIDTH - 2 * PAD) * (order / max(count - 1, 1))

    def y(value: float) -> float:
        return HEIGHT - PAD + (value - low) / (high - low) * (2 * PAD - HEIGHT)

    title = html.escape(claim_id)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="9">',
        f"<title>{title}: measured value per ledger entry</title>",
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
        f'<text x="{PAD}" y="12">{title}</text>',
        f'<text x="2" y="{_f(y(high) + 3)}">{high:.4g}</text>',
        f'<text x="2" y="{_f(y(low) + 3)}">{low:.4g}</text>',
    ]
    if bound is not None:
        out.append(
            f'<line x1="{PAD}" x2="{WIDTH - PAD}" y1="{_f(y(bound))}" y2="{_f(y(bound))}" '
            f'stroke="#57606a" stroke-dasharray="4 3"><title>bound {bound:.6g}</title></line>'
        )
    for device in sorted({p.device for p in points}):
        mine = [p for p in points if p.device == device]
        colour = DEVICE_COLOURS.get(device, OTHER_COLOUR)
        measured = [p for p in mine if p.value is not None]
        if len(measured) > 1:
            # measured holds only the points with a value
            line = " ".join(f"{_f(x(p.order))},{_f(y(cast(float, p.value)))}" for p in measured)
            out.append(f'<polyline points="{line}" fill="none" stroke="{colour}"/>')
        for p in mine:
            if p.value is None:
                out.append(
                    f'<text x="{_f(x(p.order))}" y="{_f(y(low) + 3)}" text-anchor="middle" '
                    f'fill="{FAIL_COLOUR}">×<title>{html.escape(p.label)} '
                    f"{html.escape(device)}: no finite value (not pass)</title></text>"
                )
                continue
            stroke = colour if p.passed else FAIL_COLOUR
            fill = "#ffffff" if p.partial else stroke
            verdict = "pass" if p.passed else "not pass"
            partial = ", partial run" if p.partial else ""
            out.append(
                f'<circle cx="{_f(x(p.order))}" cy="{_f(y(p.value))}" r="3" fill="{fill}" '
                f'stroke="{stroke}"><title>{html.escape(p.label)} {html.escape(device)}: '
                f"{p.value:.6g} ({verdict}{partial})</title></circle>"
            )
    first, last = points[0], points[-1]
    out.append(f'<text x="{PAD}" y="{HEIGHT - 8}">{html.escape(first.label)}</text>')
    out.append(
        f'<text x="{WIDTH - PAD}" y="{HEIGHT - 8}" text-anchor="end">'
        f"{html.escape(last.label)}</text>"
    )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def history_figures(standing: Standing) -> dict[str, str]:
    """Relative path -> SVG text, one per numeric claim of the gate's ledger."""
    count = len(standing.receipts)
    return {
        figure_path(standing.gate, cid): history_svg(cid, points, bound, count)
        for cid, (points, bound) in sorted(claim_points(standing).items())
    }


def sparkline(standing: Standing, claim_id: str | None, width: int = 12) -> str:
    """The last ``width`` values of ``claim_id`` as block characters (empty when there are
    fewer than two); a failing run is shown as ``x``."""
    points = claim_points(standing).get(claim_id or "", ([], None))[0][-width:]
    if len(points) < 2:
        return ""
    values = [p.value for p in points if p.value is not None]
    low, high = min(values, default=0.0), max(values, default=0.0)
    span = (high - low) or 1.0
    marks = [
        "x" if p.value is None else SPARKS[round((p.value - low) / span * (len(SPARKS) - 1))]
        for p in points
    ]
    return "".join(m if p.passed else "x" for m, p in zip(marks, points, strict=True))


def history_files(standing: Standing, records_dir: Path) -> dict[Path, bytes]:
    """Path -> bytes of the gate's history figures under ``records_dir``."""
    return {
        Path(records_dir) / rel: text.encode("utf-8")
        for rel, text in history_figures(standing).items()
    }


def history_problems(standing: Standing, records_dir: Path) -> list[str]:
    """One line per history figure missing or differing from a fresh draw."""
    problems = []
    for rel, text in history_figures(standing).items():
        target = Path(records_dir) / rel
        try:
            same = target.read_bytes() == text.encode("utf-8")
        except OSError:
            problems.append(f"{target}: history figure missing (run `assay render`)")
            continue
        if not same:
            problems.append(
                f"{target}: history figure out of sync with the ledger (run `assay render`)"
            )
    return problems
