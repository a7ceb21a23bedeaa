"""Records: jinja2 renders ``records/<gate>.md`` from all receipts of that gate.

Output depends only on the receipts (no clock, no machine state), so re-rendering in memory
and comparing is how ``verify_all`` detects a record out of sync.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jinja2

from assay.errors import AssayError
from assay.qualify.receipt import newest_first, read_receipt, receipt_paths, write_atomic

_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_MD = set("\\`*_[]|~#!")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
GATE_DIR = re.compile(r"^[A-Za-z0-9_]+$")


def inline(value: Any) -> str:
    """``value`` as inert inline Markdown: HTML and Markdown punctuation escaped, newlines
    turned into ``<br>``, so no string from a gate can add markup, links, images or cells."""
    lines = str(value).replace("\r\n", "\n").replace("\r", "\n").split("\n")
    escaped = []
    for line in lines:
        line = _CONTROL.sub(" ", line.replace("\t", " "))
        escaped.append("".join(_HTML.get(ch) or (f"\\{ch}" if ch in _MD else ch) for ch in line))
    return "<br>".join(escaped).strip()


def cell(value: Any) -> str:
    """Inert text for one Markdown table cell (pipes escaped, no line breaks)."""
    return inline(value)


def text(value: Any) -> str:
    """Inert text for a list item or paragraph: also defuses leading block markers."""
    out = inline(value)
    out = re.sub(r"^([-+=])", r"\\\1", out)
    return re.sub(r"^(\d+)([.)])", r"\1\\\2", out)


def num(value: Any) -> str:
    """A measured number for display; integral values print in full, others to 6 digits."""
    if value is None:
        return "not measured"
    if isinstance(value, bool):
        return str(value).lower()
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.6g}"


def pct(value: Any) -> str:
    """A relative change or tolerance as a signed percentage."""
    return "n/a" if value is None else f"{value * 100:+.2f}%".replace("+0.00%", "0%")


def opt(value: Any) -> str:
    """``value`` or ``none`` for a missing component."""
    return "none" if value is None else str(value)


def _day(created: str) -> str:
    return created[:10]


def _threshold(claim: dict[str, Any]) -> str:
    t = claim["threshold"]
    unit = f" {claim['measurement']['unit']}" if claim["measurement"]["unit"] else ""
    if not isinstance(t["tolerance"], dict):  # receipts from before tolerance modes
        return f"{t['op']} {num(t['value'])}{unit} (regression tolerance {pct(t['tolerance'])})"
    mode, value = t["tolerance"]["mode"], t["tolerance"]["value"]
    shown = f"{num(value)}{unit}" if mode == "absolute" else pct(value)
    return f"{t['op']} {num(t['value'])}{unit} (regression tolerance {shown} {mode})"


def _in_base(comparison: dict[str, Any], field: str) -> str:
    """Change or Tolerance of a baseline row in the tolerance mode's base."""
    if comparison.get("tolerance_mode") == "absolute":
        value = comparison[field]
        return "n/a" if value is None else f"{value:+.6g}"
    return pct(comparison[field])


def _measured(claim: dict[str, Any]) -> str:
    m = claim["measurement"]
    unit = f" {m['unit']}" if m["unit"] and m["value"] is not None else ""
    shown = f"{num(m['value'])}{unit}"
    if "samples" in m:
        s = m["samples"]
        shown += f" (median of {s['n']}; min {num(s['min'])}, max {num(s['max'])})"
    if claim.get("derived"):
        shown += " (derived: arithmetic on measured values, not itself a measurement)"
    return shown


def _check(claim: dict[str, Any]) -> str:
    return f"{claim['id']}: {claim['statement']} [{claim['kind']}]"


class _Ledger:
    """Cross-receipt lookups for one gate: receipts by sha and corrections by target."""

    def __init__(self, receipts: list[dict[str, Any]]) -> None:
        self.receipts = receipts
        self.by_sha = {r["receipt_sha256"]: r for r in receipts}

    def corrections_of(self, sha: str, claim_id: str) -> list[tuple[dict[str, Any], str]]:
        return [
            (r, c["reason"])
            for r in reversed(self.receipts)
            for c in r["corrects"]
            if c["receipt_sha256"] == sha and c["claim_id"] == claim_id
        ]

    def verdict(self, claim: dict[str, Any], receipt: dict[str, Any]) -> str:
        shown = claim["verdict"]
        if claim["margin"] is not None:
            shown += f" (margin {'+' if claim['margin'] >= 0 else ''}{num(claim['margin'])})"
        parts = [shown]
        for c in receipt["corrects"]:
            if c["claim_id"] == claim["id"]:
                parts.append(f"corrects receipt {c['receipt_sha256'][:12]}: {c['reason']}")
        for later, reason in self.corrections_of(receipt["receipt_sha256"], claim["id"]):
            parts.append(
                f"corrected {_day(later['created'])} by receipt "
                f"{later['receipt_sha256'][:12]}: {reason}"
            )
        return "; ".join(parts)

    def correction_rows(self) -> list[dict[str, str]]:
        rows = []
        for r in reversed(self.receipts):  # oldest correction first
            for c in r["corrects"]:
                original = self.by_sha.get(c["receipt_sha256"])
                old = (
                    None
                    if original is None
                    else next((x for x in original["claims"] if x["id"] == c["claim_id"]), None)
                )
                new = next((x for x in r["claims"] if x["id"] == c["claim_id"]), None)
                now = "" if new is None else f" Now: {_measured(new)}, {new['verdict']}."
                rows.append(
                    {
                        "original_sha": c["receipt_sha256"],
                        "original_date": "" if original is None else _day(original["created"]),
                        "check": f"{c['claim_id']} (receipt not in this ledger)"
                        if old is None
                        else _check(old),
                        "threshold": "" if old is None else _threshold(old),
                        "measured": "" if old is None else _measured(old),
                        "verdict": "" if old is None else old["verdict"],
                        "correction": f"{_day(r['created'])}, receipt {r['receipt_sha256'][:12]}: "
                        f"{c['reason']}.{now}",
                    }
                )
        return rows


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(Path(__file__).parent / "templates")),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(cell=cell, text=text, num=num, pct=pct, opt=opt)
    return env


def _counts(r: dict[str, Any]) -> str:
    n = {v: sum(c["verdict"] == v for c in r["claims"]) for v in ("pass", "fail", "inconclusive")}
    return (
        f"{len(r['claims'])} claims: {n['pass']} pass, {n['fail']} fail, "
        f"{n['inconclusive']} inconclusive"
    )


def _cpu(env: dict[str, Any]) -> str:
    return (
        f"{env['cpu']['model']} ({opt(env['cpu']['threads'])} threads, "
        f"torch uses {opt(env['cpu']['torch_threads'])})"
    )


def _gpu(env: dict[str, Any]) -> str:
    g = env["gpu"]
    if g is None:
        return "none"
    mem = "?" if g["memory_bytes"] is None else f"{g['memory_bytes'] / 2**30:.1f} GiB"
    return (
        f"{g['name']} (sm {opt(g['compute_capability'])}, {mem}, driver {opt(g['driver'])}, "
        f"SM clock {opt(g['sm_clock_mhz'])}/{opt(g['sm_clock_max_mhz'])} MHz)"
    )


def _commit(code: dict[str, Any]) -> str:
    if code["commit"] is None:
        return "unknown (not a git checkout)"
    return f"`{code['commit'][:12]}`" + (" (dirty)" if code["dirty"] else "")


def render_text(gate: str, receipts: list[dict[str, Any]], banner: str = "") -> str:
    """The Markdown record for ``gate`` from its (already validated) receipts.

    Deterministic: the same receipts in any order give the same text. The newest receipt is
    the headline; every receipt appears in the ledger. ``banner`` (from
    :func:`assay.qualify.stale.banner`) is placed above the status line.
    """
    if not receipts:
        raise AssayError(f"gate {gate!r}: no receipts to render")
    from assay.qualify.assemble import headline

    ordered = newest_first(receipts)
    ledger = _Ledger(ordered)
    template = _environment().get_template("record.md.j2")
    return template.render(
        banner=banner,
        gate=gate,
        head=headline(ordered),
        in_base=_in_base,
        receipts=ordered,
        corrections=ledger.correction_rows(),
        counts=_counts,
        created=lambda r: r["created"],
        cpu=_cpu,
        gpu=_gpu,
        machine=lambda env: _gpu(env) if env["gpu"] else env["cpu"]["model"],
        commit=_commit,
        check=_check,
        threshold=_threshold,
        measured=_measured,
        verdict=ledger.verdict,
        tally=lambda r, v: sum(c["verdict"] == v for c in r["claims"]),
        corrects=lambda r: ", ".join(sorted({c["receipt_sha256"][:12] for c in r["corrects"]})),
    )


def load_gate(receipts_dir: Path, gate: str) -> list[dict[str, Any]]:
    """All receipts of ``gate``; AssayError naming the first invalid or tampered file."""
    receipts = []
    for path in receipt_paths(receipts_dir, gate):
        receipt = read_receipt(path)
        if receipt["gate"] != gate:
            raise AssayError(f"{path}: receipt of gate {receipt['gate']!r} filed under {gate!r}")
        receipts.append(receipt)
    return receipts


def gates_in(receipts_dir: Path) -> list[str]:
    """Gate names that have a receipts folder with at least one receipt, sorted."""
    root = Path(receipts_dir)
    if not root.is_dir():
        return []
    return sorted(
        d.name
        for d in root.iterdir()
        if d.is_dir() and GATE_DIR.match(d.name) and receipt_paths(root, d.name)
    )


def record_path(records_dir: Path, gate: str) -> Path:
    """Where the record of ``gate`` lives: ``<records>/<gate>.md``."""
    return Path(records_dir) / f"{gate}.md"


def project_root(records_dir: Path) -> Path:
    """The tree staleness is judged against by default: the parent of the records folder."""
    return Path(records_dir).resolve().parent


def render_gate(gate: str, receipts_dir: Path, records_dir: Path, root: Path | None = None) -> Path:
    """Rebuild ``<records>/<gate>.md`` from all receipts of ``gate``; return its path.

    A gate CI cannot re-run whose implementation files changed in ``root`` (default: the
    records folder's parent) gets a "stale since <commit>" banner.
    """
    from assay.qualify.stale import banner, check_gate

    receipts = load_gate(receipts_dir, gate)
    shown = banner(check_gate(root or project_root(records_dir), receipts))
    path = record_path(records_dir, gate)
    write_atomic(path, render_text(gate, receipts, shown).encode("utf-8"), overwrite=True)
    return path


def render_all(receipts_dir: Path, records_dir: Path, root: Path | None = None) -> list[Path]:
    """Rebuild every record from the receipts; return the record paths, sorted by gate.

    Raises AssayError naming the file if any receipt is invalid or tampered: a record is
    never rendered from a receipt that does not verify. Gates without a LEDGER get one
    (legacy receipts listed by creation time); the index ``README.md`` is rebuilt too.
    """
    from assay.qualify.chain import ensure_ledger
    from assay.qualify.index import render_index

    gates = gates_in(receipts_dir)
    for g in gates:
        ensure_ledger(receipts_dir, g)
    paths = [render_gate(g, receipts_dir, records_dir, root) for g in gates]
    if gates:
        render_index(receipts_dir, records_dir, root)
    return paths
