"""The words a record uses for one receipt's facts: numbers, thresholds, measurements, commit,
subject and headline, each a plain string the templates only escape and lay out."""

from __future__ import annotations

from typing import Any, cast


def plural(n: int, noun: str) -> str:
    """``1 claim``, ``2 claims``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def number_text(value: Any) -> str:
    """A measured number for display: integral values in full, others to 6 digits, ``true`` or
    ``false`` for a boolean, ``not measured`` for None."""
    if value is None:
        return "not measured"
    if isinstance(value, bool):
        return str(value).lower()
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.6g}"


def exact(value: Any) -> str:
    """A bound in full (the shortest text that reads back as the same number), so a bound of
    5.0000001 is never shown as 5."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def beside(value: Any, bound: Any) -> str:
    """A measured value for display next to its bound: to 6 digits, in full when 6 digits
    would read the same as a bound it differs from."""
    shown = number_text(value)
    if value is not None and value != bound and shown == exact(bound):
        return exact(value)
    return shown


def pct(value: Any) -> str:
    """A relative change or tolerance as a signed percentage."""
    return "n/a" if value is None else f"{value * 100:+.2f}%".replace("+0.00%", "0%")


def value_text(value: Any) -> str:
    """``value`` as text, or ``none`` for a missing component (a version, a driver, a count)."""
    return "none" if value is None else str(value)


def date_of(timestamp: str) -> str:
    """The date part of an ISO timestamp: ``2026-12-02`` of ``2026-12-02T15:17:21Z``."""
    return timestamp[:10]


def threshold_text(claim: dict[str, Any]) -> str:
    """The claim's threshold with its regression tolerance, in the claim's unit."""
    t = claim["threshold"]
    unit = f" {claim['measurement']['unit']}" if claim["measurement"]["unit"] else ""
    if not isinstance(t["tolerance"], dict):  # receipts from before tolerance modes
        return f"{t['op']} {exact(t['value'])}{unit} (regression tolerance {pct(t['tolerance'])})"
    mode, value = t["tolerance"]["mode"], t["tolerance"]["value"]
    shown = f"{number_text(value)}{unit}" if mode == "absolute" else pct(value)
    return f"{t['op']} {exact(t['value'])}{unit} (regression tolerance {shown} {mode})"


def measured_text(claim: dict[str, Any]) -> str:
    """The measured value with unit, sample spread and the derived label."""
    m = claim["measurement"]
    unit = f" {m['unit']}" if m["unit"] and m["value"] is not None else ""
    shown = f"{beside(m['value'], claim['threshold']['value'])}{unit}"
    if m.get("non_finite"):
        shown = f"{m['non_finite']} (not a finite number: the claim fails)"
    if "samples" in m:
        s = m["samples"]
        spread = (
            f"min {number_text(s['min'])}, max {number_text(s['max'])}"
            if "min" in s
            else "none finite"
        )
        if s.get("non_finite"):
            shown += f" ({s['non_finite']} of {s['n']} samples not finite; the rest: {spread})"
        else:
            shown += f" (median of {s['n']}; {spread})"
    if claim.get("derived"):
        shown += " (derived: arithmetic on measured values, not itself a measurement)"
    return shown


def check_text(claim: dict[str, Any]) -> str:
    """``id: statement [kind]``."""
    return f"{claim['id']}: {claim['statement']} [{claim['kind']}]"


def counts_text(receipt: dict[str, Any]) -> str:
    """``N claims: a pass, b fail, c inconclusive``."""
    n = {v: sum(c["verdict"] == v for c in receipt["claims"]) for v in ("pass", "fail")}
    n["inconclusive"] = len(receipt["claims"]) - n["pass"] - n["fail"]
    return (
        f"{plural(len(receipt['claims']), 'claim')}: {n['pass']} pass, {n['fail']} fail, "
        f"{n['inconclusive']} inconclusive"
    )


def cpu_text(env: dict[str, Any]) -> str:
    """CPU model with thread counts."""
    torch_threads = env["cpu"].get("torch_threads")
    extra = "" if torch_threads is None else f", torch uses {torch_threads}"
    return f"{env['cpu']['model']} ({value_text(env['cpu']['threads'])} threads{extra})"


def gpu_text(env: dict[str, Any]) -> str:
    """GPU name, compute capability, memory, driver and clocks; ``none`` without a GPU."""
    g = env["gpu"]
    if g is None:
        return "none"
    mem = "?" if g["memory_bytes"] is None else f"{g['memory_bytes'] / 2**30:.1f} GiB"
    return (
        f"{g['name']} (sm {value_text(g['compute_capability'])}, {mem}, "
        f"driver {value_text(g['driver'])}, "
        f"SM clock {value_text(g['sm_clock_mhz'])}/{value_text(g['sm_clock_max_mhz'])} MHz)"
    )


def commit_text(code: dict[str, Any]) -> str:
    """Commit (12 hex) and the dirty flag, spelled out."""
    if code["commit"] is None:
        return "unknown (not a git checkout)"
    dirty = " (dirty: the tree differed from the commit)" if code["dirty"] else " (clean tree)"
    untracked = code.get("untracked_files") or 0
    if untracked:
        dirty += f" ({plural(untracked, 'hashed file')} untracked)"
    if code.get("commit_source") == "kit manifest":
        dirty += f", from the GPU kit's manifest (tree sha256 {code.get('tree_sha256', '?')[:12]})"
    return cast(str, code["commit"])[:12] + dirty


def subject_text(receipt: dict[str, Any]) -> list[str]:
    """Lines naming the project under test: what was imported, and any disagreement."""
    s = receipt.get("subject")
    lines = []
    if s is not None:
        where = f" (from {s['source']})"
        lines.append(
            f"Project under test: {value_text(s['name'])} {value_text(s['version'])}{where}"
        )
        if s.get("path"):
            kind = "an editable checkout" if s.get("editable") else "an installed package"
            if "editable" not in s:
                kind = "a folder on the import path, not an installed distribution"
            lines.append(f"Imported from {s['path']} ({kind})")
        if s.get("declared") and s["declared"] != s.get("version"):
            ran = s.get("version") or "unknown"
            lines.append(
                f"WARNING: version {s['declared']} is declared, but the version the gates "
                f"imported is {ran}"
            )
    differs = receipt["code"].get("differs_from_tree") or []
    if differs:
        more = f" and {len(differs) - 3} more" if len(differs) > 3 else ""
        lines.append(
            f"WARNING: the code that ran differs from the project tree in "
            f"{plural(len(differs), 'file')} ({', '.join(differs[:3])}{more}): an installed "
            "copy ran, or files changed while the gates ran"
        )
    if receipt.get("wheel"):
        w = receipt["wheel"]
        lines.append(
            f"Subject: the installed wheel {w['filename']}, sha256 {w['sha256']} "
            "(gates imported it from the wheel, not the checkout)"
        )
    return lines


def headline_claim(receipt: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The claim a reader cares about, and how it was chosen."""
    wanted = receipt.get("headline_claim")
    if wanted:
        found = next((c for c in receipt["claims"] if c["id"] == wanted), None)
        if found is not None:
            return found, "declared headline"
        return None, f"declared headline {wanted} is absent from this receipt"
    if receipt["claims"]:
        return receipt["claims"][0], "first claim: the gate declares no headline"
    return None, "no claims"


def headline_text(receipt: dict[str, Any] | None) -> str:
    """``id: value (threshold op bound) verdict`` for the headline claim."""
    if receipt is None:
        return "no receipt"
    claim, how = headline_claim(receipt)
    if claim is None:
        return how
    unit = f" {claim['measurement']['unit']}" if claim["measurement"]["unit"] else ""
    t = claim["threshold"]
    derived = " (derived: arithmetic)" if claim.get("derived") else ""
    label = "" if how == "declared headline" else f" [{how}]"
    value = claim["measurement"].get("non_finite") or beside(
        claim["measurement"]["value"], claim["threshold"]["value"]
    )
    return (
        f"{claim['id']}: {value}{unit}{derived} "
        f"(threshold {t['op']} {exact(t['value'])}{unit}) {claim['verdict']}{label}"
    )
