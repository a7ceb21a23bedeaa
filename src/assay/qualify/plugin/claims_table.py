"""The claims table printed at the end of a gate session: gate, claim, measured, bound,
margin, verdict and controls (how many of the claim's controls the check caught), failures
first, long lists cut with a count. Built from the receipts the session wrote (or, with
``--gate-no-write``, would have written), so it shows what they say."""

from __future__ import annotations

from typing import Any

from assay.qualify.publishing.wording import beside, exact, number_text

ROWS = 30  # claims shown; the rest are counted
WIDTH = 40  # a claim id longer than this is cut with "…"
VERDICTS = ("fail", "error", "inconclusive", "pass")  # worst first


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _controls(claim: dict[str, Any]) -> str:
    controls = claim.get("controls") or []
    if not controls:
        return "-"
    fired = sum(1 for c in controls if c.get("failed"))
    return f"{fired}/{len(controls)} caught"


def _row(gate: str, claim: dict[str, Any]) -> list[str]:
    m, t = claim["measurement"], claim["threshold"]
    unit = f" {m['unit']}" if m.get("unit") else ""
    value = m.get("non_finite") or beside(m.get("value"), t["value"])
    margin = claim.get("margin")
    return [
        gate,
        _cut(claim["id"], WIDTH),
        _cut(f"{value}{unit}", 28),
        f"{t['op']} {exact(t['value'])}",
        "-" if margin is None else number_text(margin),
        claim["verdict"],
        _controls(claim),
    ]


def _rank(verdict: str) -> int:
    return VERDICTS.index(verdict) if verdict in VERDICTS else 0


def claims_table(receipts: list[dict[str, Any]], rows: int = ROWS) -> list[tuple[str, bool]]:
    """The table's lines for ``receipts``, each with whether it shows a claim that did not pass
    (none when they hold no claim)."""
    found = [(r["gate"], c) for r in receipts for c in r["claims"]]
    if not found:
        return []
    found.sort(key=lambda gc: (_rank(gc[1]["verdict"]), gc[0], gc[1]["id"]))
    header = ["gate", "claim", "measured", "bound", "margin", "verdict", "controls"]
    table = [header, *(_row(g, c) for g, c in found[:rows])]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    lines = [(line(header), False), ("  ".join("-" * w for w in widths), False)]
    shown = zip(table[1:], found, strict=False)
    lines += [(line(r), c["verdict"] != "pass") for r, (_, c) in shown]
    if len(found) > rows:
        rest = found[rows:]
        failing = sum(1 for _, c in rest if c["verdict"] != "pass")
        more = f"... and {len(rest)} more claims ({failing} not passing); the records list them all"
        lines.append((more, failing > 0))
    return lines
