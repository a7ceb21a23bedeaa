"""``assay publish --html DIR``: a static site of the index, records, figures and ledgers.

Pages are rendered straight from the receipts with an autoescaping template, so every string
a gate wrote is inert text; a Content-Security-Policy forbids scripts and any outside asset.
Layout: ``index.html``, ``<gate>.html``, ``figures/<gate>/*.png`` and
``receipts/<gate>/{*.json, *.json.sig, LEDGER.txt}``; every link is relative.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from pathlib import Path
from typing import Any

import jinja2

from assay.atomic import atomic_write_bytes, json_bytes
from assay.bounded import JSON_BYTES, parse_json, read_capped
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


def _stale_text(found: Any) -> str:
    """The index's stale cell (one wording for Markdown and HTML), without its tree markers."""
    return stale_cell(found).removeprefix(STALE_OPEN).removesuffix(STALE_CLOSE)


def _evidence(standing: Standing, receipts_dir: Path, records_dir: Path) -> dict[str, bytes]:
    """The gate's receipts, signatures, LEDGER and the shown receipt's figures, by their path
    in the site."""
    gate = standing.gate
    files: dict[str, bytes] = {}
    for receipt in standing.receipts:
        path = receipts_dir / gate / receipt_filename(receipt)
        files[f"receipts/{gate}/{path.name}"] = path.read_bytes()
        if sig_path(path).exists():
            files[f"receipts/{gate}/{sig_path(path).name}"] = sig_path(path).read_bytes()
    ledger = ledger_path(receipts_dir, gate)
    files[f"receipts/{gate}/LEDGER.txt"] = (
        ledger.read_bytes()
        if ledger.exists()
        else b"no LEDGER yet: run `assay render` to start this gate's ledger\n"
    )
    for fig in standing.head["figures"] if standing.head else []:
        if (records_dir / fig["path"]).is_file():
            files[fig["path"]] = (records_dir / fig["path"]).read_bytes()
    from assay.qualify.publishing.history import history_figures

    for rel, text in history_figures(standing).items():  # drawn afresh: the same bytes
        files[rel] = text.encode("utf-8")
    return files


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
        "summary": standing.brief(),
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
SITE_MANIFEST = ".assay-site.json"  # what the last publish wrote here: path -> sha256
SITE_FORMAT = "assay.site/1"  # an on-disk format id: never renamed


def _written_before(out: Path) -> dict[str, str]:
    """The files an earlier publish recorded writing into ``out`` (none when it kept no
    readable manifest)."""
    path = out / SITE_MANIFEST
    with contextlib.suppress(OSError, ValueError, AssayError):
        if path.is_file() and not path.is_symlink():
            body = parse_json(read_capped(path, JSON_BYTES, "site manifest"))
            if isinstance(body, dict) and body.get("format") == SITE_FORMAT:
                files = body.get("files")
                if isinstance(files, dict):
                    return {k: v for k, v in files.items() if isinstance(v, str)}
    return {}


def _holds(target: Path, sha: str) -> bool:
    """True when ``target`` is a regular file (not a link) whose bytes have sha256 ``sha``."""
    with contextlib.suppress(OSError):
        if target.is_file() and not target.is_symlink():
            return hashlib.sha256(target.read_bytes()).hexdigest() == sha
    return False


def _real_folders(out: Path, rel: str) -> bool:
    """True when every folder between ``out`` and ``out / rel`` is a real folder or absent:
    publish writes into the site's own folders, never through a link to a folder elsewhere."""
    folder = out
    for part in Path(rel).parts[:-1]:
        folder = folder / part
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            return False
    return True


def _ours(out: Path, rel: str, new: bytes, before: dict[str, str]) -> bool:
    """True when publish may write ``out / rel`` (its folders real, not links): absent, or a
    regular file holding what an earlier publish wrote there (its manifest's sha256), or
    already ``new``. A page must also carry :data:`GENERATOR`, so a manifest written by hand
    never makes a user's page replaceable; a page of a site from before the manifest needs
    only the tag."""
    if not _real_folders(out, rel):
        return False
    target = out / rel
    if not (target.exists() or target.is_symlink()):
        return True
    if target.is_symlink() or not target.is_file():
        return False
    try:
        data = target.read_bytes()
    except OSError:
        return False
    if rel.endswith(".html") and GENERATOR not in data[:4096]:
        return data == new
    if data == new or before.get(rel) == hashlib.sha256(data).hexdigest():
        return True
    return rel.endswith(".html") and rel not in before


def _refuse_what_is_not_ours(out: Path, planned: dict[str, bytes]) -> None:
    """Every file the site would replace is one an earlier publish wrote and nobody changed
    since: else AssayError naming the first such file, before anything is written."""
    before = _written_before(out)
    for rel, data in planned.items():
        if not _ours(out, rel, data, before):
            raise AssayError(
                f"{out / rel}: exists and was not written by assay publish, or was edited since; "
                "nothing was changed; move it away or choose another --html folder"
            )


def check_site_destination(out: Path) -> None:
    """AssayError unless ``out`` is absent, an empty folder, or an earlier site (its
    ``index.html`` carries :data:`GENERATOR`): the site replaces only pages it wrote."""
    if not (out.exists() or out.is_symlink()):
        return
    if out.is_dir() and not out.is_symlink():
        if not any(out.iterdir()):
            return
        index = out / "index.html"
        with contextlib.suppress(OSError):
            if (
                index.is_file()
                and not index.is_symlink()
                and GENERATOR in index.read_bytes()[:4096]
            ):
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
    found: list[Standing] | None = None,
) -> Path:
    """Write the site into ``out`` and return the path of its ``index.html``.

    Every page shows what the gate's standing says, as the Markdown record does. The caller
    (``assay publish``) refuses a tree that does not verify unless told to go on; then
    ``problems`` are shown in a banner on every page. ``found`` are the standings the caller
    already judged (verify's), else they are judged here.
    """
    receipts_dir, records_dir, out = Path(receipts_dir), Path(records_dir), Path(out)
    root = root or project_root(records_dir)
    banner = list(problems or [])
    rows = []
    check_site_destination(out)
    planned: dict[str, bytes] = {}
    for standing in found if found is not None else standings(receipts_dir, records_dir, root):
        rows.append(index_entry(standing, root))
        if standing.head is None:  # every receipt erased: its page still says what stands
            page = _erased_page(standing, banner)
        else:
            planned.update(_evidence(standing, receipts_dir, records_dir))
            page = gate_page(standing, banner, receipts_dir)
        planned[f"{standing.gate}.html"] = page.encode("utf-8")
    planned["index.html"] = index_page(rows, banner).encode("utf-8")
    _refuse_what_is_not_ours(out, planned)  # an earlier site's folder may hold a user's file
    # what earlier publishes wrote and this one leaves as it is (a figure of a run since erased)
    # stays theirs, so a later publish may still replace it
    written = {
        rel: sha
        for rel, sha in _written_before(out).items()
        if rel not in planned and _holds(out / rel, sha)
    }
    for rel, data in planned.items():
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(target, data)
        written[rel] = hashlib.sha256(data).hexdigest()
    manifest = {"format": SITE_FORMAT, "files": dict(sorted(written.items()))}
    atomic_write_bytes(out / SITE_MANIFEST, json_bytes(manifest))
    return out / "index.html"
