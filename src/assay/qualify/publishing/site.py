"""``assay publish --html DIR``: a static site of the index, records, figures and ledgers.

Pages are rendered straight from the receipts with an autoescaping template, so every string
a gate wrote is inert text; a Content-Security-Policy forbids scripts and any outside asset.
Layout: ``index.html``, ``<gate>.html``, ``figures/<gate>/*.png`` and
``receipts/<gate>/{*.json, *.json.sig, LEDGER.txt}``; every link is relative.
"""

from __future__ import annotations

import contextlib
import functools
import shutil
from pathlib import Path
from typing import Any

import jinja2

from assay.atomic import atomic_write_bytes
from assay.errors import AssayError
from assay.qualify.judging.stale import STALE_CLOSE, STALE_OPEN
from assay.qualify.judging.stale import cell as stale_cell
from assay.qualify.judging.standing import Standing
from assay.qualify.ledger.chain import ledger_path
from assay.qualify.ledger.receipt import receipt_filename
from assay.qualify.ledger.sign import sig_path
from assay.qualify.publishing.index import standings, what_it_gates
from assay.qualify.publishing.render import project_root, standing_stale
from assay.qualify.publishing.view import gate_view
from assay.qualify.publishing.wording import headline_text


@functools.lru_cache(maxsize=1)
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
    """The index's stale cell (one wording for Markdown and HTML), without its tree markers."""
    return stale_cell(found).removeprefix(STALE_OPEN).removesuffix(STALE_CLOSE)


def _copy_evidence(standing: Standing, receipts_dir: Path, records_dir: Path, out: Path) -> None:
    """The gate's receipts, signatures, LEDGER and the shown receipt's figures."""
    gate = standing.gate
    for receipt in standing.receipts:
        path = receipts_dir / gate / receipt_filename(receipt)
        _copy(path, out / "receipts" / gate / path.name)
        if sig_path(path).exists():
            _copy(sig_path(path), out / "receipts" / gate / sig_path(path).name)
    ledger = ledger_path(receipts_dir, gate)
    if ledger.exists():
        _copy(ledger, out / "receipts" / gate / "LEDGER.txt")
    else:
        note = b"no LEDGER yet: run `assay render` to start this gate's ledger\n"
        atomic_write_bytes(out / "receipts" / gate / "LEDGER.txt", note)
    for fig in standing.head["figures"] if standing.head else []:
        if (records_dir / fig["path"]).is_file():
            _copy(records_dir / fig["path"], out / fig["path"])
    from assay.qualify.publishing.history import history_figures

    for rel, text in history_figures(standing).items():  # drawn afresh: the same bytes
        atomic_write_bytes(out / rel, text.encode("utf-8"))


def _signed(receipts_dir: Path, gate: str, entries: list[dict[str, Any]]) -> None:
    for e in entries:
        sig = sig_path(receipts_dir / gate / f"{e['file']}")
        e["sig_href"] = f"receipts/{gate}/{sig.name}" if sig.exists() else ""


def index_entry(standing: Standing, root: Path) -> dict[str, Any]:
    """One index row of the site: what the Markdown index shows, as fields."""
    head = standing.head or {}
    return {
        "gate": standing.gate,
        "href": f"{standing.gate}.html",
        "what": what_it_gates(root, standing.gate) or "n/a",
        "headline": headline_text(standing.head),
        "status": standing.status,
        "summary": standing.summary(),
        "date": head.get("created", "none"),
        "devices": ", ".join(d.device for d in standing.devices),
        "count": len(standing.receipts),
        "stale": _stale_text(standing_stale(standing)),
    }


def _erased_page(standing: Standing, banner: list[str]) -> str:
    """The page of a gate whose every receipt was erased: its status and why, escaped."""
    from html import escape

    warnings = "".join(f"<p><strong>{escape(line)}</strong></p>" for line in banner)
    return (
        f"<!doctype html><meta charset=utf-8>{GENERATOR.decode()}"
        f"<title>Gate {escape(standing.gate)}</title>"
        f"{warnings}<h1>Gate {escape(standing.gate)}</h1>"
        f"<p><strong>Status: {escape(standing.status.upper())}</strong> · "
        f"{escape(standing.summary())} · 0 in the ledger</p><p>Every receipt of this gate has "
        "been erased from its ledger; the status weighs the erased receipts its CORRECTIONS "
        "file keeps.</p>\n"
    )


def gate_page(
    standing: Standing, banner: list[str] | None = None, receipts_dir: Path | None = None
) -> str:
    """The site page of one gate: what its Markdown record shows, autoescaped."""
    gate = standing.gate
    stale = standing_stale(standing)
    view = gate_view(standing)
    for entry, receipt in zip(view["ledger"], reversed(standing.receipts), strict=True):
        entry["file"] = receipt_filename(receipt)
        entry["href"] = f"receipts/{gate}/{entry['file']}"
    if receipts_dir is not None:
        _signed(receipts_dir, gate, view["ledger"])
    else:
        for entry in view["ledger"]:
            entry["sig_href"] = ""
    stale_banner = ""
    if stale is not None and not stale.ci_runs:
        stale_banner = f"Stale since {stale.since}: needs a {stale.needs} run to refresh"
    return _template().render(
        page="gate",
        title=f"Gate record: {gate}",
        v=view,
        broken=list(banner or []),
        stale=stale_banner,
        ledger_href=f"receipts/{gate}/LEDGER.txt",
    )


def index_page(rows: list[dict[str, Any]], banner: list[str] | None = None) -> str:
    """The site's index page from :func:`index_entry` rows."""
    return _template().render(page="index", title="Gate records", rows=rows, broken=banner or [])


GENERATOR = b'<meta name="generator" content="assay publish">'


def _ours(page: Path) -> bool:
    with contextlib.suppress(OSError):
        return page.is_file() and not page.is_symlink() and GENERATOR in page.read_bytes()[:4096]
    return False


def _refuse_foreign_page(page: Path) -> None:
    if (page.exists() or page.is_symlink()) and not _ours(page):
        raise AssayError(
            f"{page}: exists and was not written by assay publish (no generator tag); nothing "
            "was changed; move it away or choose another --html folder"
        )


def check_site_destination(out: Path) -> None:
    """AssayError unless ``out`` is absent, an empty folder, or an earlier site (its
    ``index.html`` carries :data:`GENERATOR`): the site replaces only pages it wrote."""
    if not (out.exists() or out.is_symlink()):
        return
    if out.is_dir() and not out.is_symlink():
        if not any(out.iterdir()):
            return
        if _ours(out / "index.html"):
            return
    raise AssayError(
        f"{out}: --html is not an empty folder and holds no earlier assay site (no index.html "
        "written by assay publish); nothing was changed; choose an empty or new folder"
    )


def build_site(
    receipts_dir: Path,
    records_dir: Path,
    out: Path,
    root: Path | None = None,
    problems: list[str] | None = None,
) -> Path:
    """Write the site into ``out`` and return the path of its ``index.html``.

    Every page shows what the gate's standing says, as the Markdown record does. The caller
    (``assay publish``) refuses a tree that does not verify unless told to go on; then
    ``problems`` are shown in a banner on every page.
    """
    receipts_dir, records_dir, out = Path(receipts_dir), Path(records_dir), Path(out)
    root = root or project_root(records_dir)
    banner = list(problems or [])
    rows = []
    check_site_destination(out)
    found = list(standings(receipts_dir, records_dir, root))
    for page in [out / "index.html", *(out / f"{s.gate}.html" for s in found)]:
        _refuse_foreign_page(page)  # an earlier site's folder may hold a user's page too
    out.mkdir(parents=True, exist_ok=True)
    for standing in found:
        rows.append(index_entry(standing, root))
        if standing.head is None:  # every receipt erased: its page still says what stands
            page = _erased_page(standing, banner)
        else:
            _copy_evidence(standing, receipts_dir, records_dir, out)
            page = gate_page(standing, banner, receipts_dir)
        atomic_write_bytes(out / f"{standing.gate}.html", page.encode("utf-8"))
    index = out / "index.html"
    atomic_write_bytes(index, index_page(rows, banner).encode("utf-8"))
    return index
