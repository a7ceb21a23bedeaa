"""``assay publish --html DIR``: a static site of the index, records, figures and ledgers.

Pages are rendered straight from the receipts with an autoescaping template, so every string
a gate wrote is inert text; a Content-Security-Policy forbids scripts and any outside asset.
Layout: ``index.html``, ``<gate>.html``, ``figures/<gate>/*.png`` and
``receipts/<gate>/{*.json, *.json.sig, LEDGER.txt}``; every link is relative.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import jinja2

from assay.errors import AssayError
from assay.qualify.chain import ledger_path, read_ledger
from assay.qualify.index import headline, what_it_gates
from assay.qualify.receipt import newest_first, receipt_paths, write_atomic
from assay.qualify.render import (
    _check,
    _counts,
    _cpu,
    _gpu,
    _Ledger,
    _measured,
    _threshold,
    gates_in,
    load_gate,
    project_root,
)
from assay.qualify.sign import check_signature, sig_path
from assay.qualify.stale import check_gate


def _template() -> jinja2.Template:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(Path(__file__).parent / "templates")),
        undefined=jinja2.StrictUndefined,
        autoescape=True,
    )
    return env.get_template("site.html.j2")


def _copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)


def _stale_text(found: Any) -> str:
    if found is None:
        return "current"
    return f"stale since {found.since}" + ("" if found.ci_runs else f" (needs {found.needs})")


def _entries(
    receipts_dir: Path, gate: str, receipts: list[dict[str, Any]], allowed: Path | None
) -> list[dict[str, str]]:
    by_name = {p.name: p for p in receipt_paths(receipts_dir, gate)}
    by_sha = {r["receipt_sha256"]: r for r in receipts}
    ledger = ledger_path(receipts_dir, gate)
    order = read_ledger(ledger)[0] if ledger.exists() else []
    listed = [(sha, name) for sha, name in order if sha in by_sha and name in by_name]
    seen = {sha for sha, _ in listed}
    rest = [r for r in reversed(newest_first(receipts)) if r["receipt_sha256"] not in seen]
    listed += [(r["receipt_sha256"], _name_of(r, by_name)) for r in rest]
    rows = []
    for sha, name in listed:
        r = by_sha[sha]
        env = r["environment"]
        sig = sig_path(by_name[name])
        found = check_signature(by_name[name], allowed) if sig.exists() else None
        signer = "signed" if found is None else f"{found.signer or 'unknown'}: {found.detail}"
        link = r.get("previous_receipt_sha256", "legacy (ledger order)")
        rows.append(
            {
                "created": r["created"],
                "device": r["run"]["device"],
                "machine": _gpu(env) if env["gpu"] else _cpu(env),
                "status": r["status"],
                "link": "genesis" if link is None else link[:12] if len(link) == 64 else link,
                "sha": sha,
                "href": f"receipts/{gate}/{name}",
                "sig_href": f"receipts/{gate}/{sig.name}" if sig.exists() else "",
                "signer": signer,
            }
        )
    return rows


def _name_of(receipt: dict[str, Any], by_name: dict[str, Path]) -> str:
    for name in by_name:
        if receipt["receipt_sha256"][:12] in name:
            return name
    raise AssayError(f"receipt {receipt['receipt_sha256'][:12]}: no file found")


def build_site(receipts_dir: Path, records_dir: Path, out: Path, root: Path | None = None) -> Path:
    """Write the site into ``out`` and return the path of its ``index.html``.

    AssayError naming the file when a receipt is invalid: no page is built from a receipt
    that does not verify.
    """
    receipts_dir, records_dir, out = Path(receipts_dir), Path(records_dir), Path(out)
    root = root or project_root(records_dir)
    allowed = records_dir / "allowed_signers"
    template = _template()
    rows = []
    out.mkdir(parents=True, exist_ok=True)
    for gate in gates_in(receipts_dir):
        receipts = load_gate(receipts_dir, gate)
        head = newest_first(receipts)[0]
        stale = check_gate(root, receipts)
        rows.append(
            {
                "gate": gate,
                "href": f"{gate}.html",
                "what": what_it_gates(root, gate) or "n/a",
                "headline": headline(head),
                "status": head["status"],
                "date": head["created"],
                "device": head["run"]["device"],
                "count": len(receipts),
                "stale": _stale_text(stale),
            }
        )
        for path in receipt_paths(receipts_dir, gate):
            _copy(path, out / "receipts" / gate / path.name)
            if sig_path(path).exists():
                _copy(sig_path(path), out / "receipts" / gate / sig_path(path).name)
        ledger = ledger_path(receipts_dir, gate)
        if ledger.exists():
            _copy(ledger, out / "receipts" / gate / "LEDGER.txt")
        else:
            note = b"no LEDGER yet: run `assay render` to start this gate's ledger\n"
            write_atomic(out / "receipts" / gate / "LEDGER.txt", note, overwrite=True)
        for fig in head["figures"]:
            _copy(records_dir / fig["path"], out / fig["path"])
        banner = ""
        if stale is not None and not stale.ci_runs:
            banner = f"Stale since {stale.since}: needs a {stale.needs} run to refresh"
        marks = _Ledger(newest_first(receipts))
        page = template.render(
            page="gate",
            title=f"Gate record: {gate}",
            gate=gate,
            head=head,
            stale=banner,
            counts=_counts(head),
            cpu=_cpu(head["environment"]),
            gpu=_gpu(head["environment"]),
            commit="unknown" if head["code"]["commit"] is None else head["code"]["commit"][:12],
            claims=[
                {
                    "check": _check(c),
                    "threshold": _threshold(c),
                    "measured": _measured(c),
                    "verdict": marks.verdict(c, head),
                }
                for c in head["claims"]
            ],
            entries=_entries(receipts_dir, gate, receipts, allowed if allowed.is_file() else None),
            ledger_href=f"receipts/{gate}/LEDGER.txt",
        )
        write_atomic(out / f"{gate}.html", page.encode("utf-8"), overwrite=True)
    index = out / "index.html"
    text = template.render(page="index", title="Gate records", rows=rows)
    write_atomic(index, text.encode("utf-8"), overwrite=True)
    return index
