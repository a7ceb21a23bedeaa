"""The records index (records/README.md), derived-figure labels, and the static HTML site:
every page and link resolves, nothing external loads, injected receipt strings stay inert."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from gatekit import TINY_PNG

from assay_testing import browser
from assay_testing.tree_listing import tree_listing

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "gates"))

from assay.cli import main  # noqa: E402
from assay.qualify.ledger.chain import write_receipt  # noqa: E402
from assay.qualify.publishing.site import build_site  # noqa: E402
from assay.qualify.publishing.verify import verify_all  # noqa: E402
from support.faults import tamper_cases  # noqa: E402

INJECTION = (
    'ok | forged cell |\n# Forged heading\n<script>alert("pwned")</script> '
    "[click](javascript:alert(1)) ![x](http://e.vil/x.png) <img src=x onerror=alert(2)> \"'>"
)


def _injected_ledger(root: Path) -> tamper_cases.Ledger:
    """Three honest receipts, then one whose strings all carry INJECTION, with a derived
    claim and a derived figure."""
    ledger = tamper_cases.Ledger(root)
    figure = ledger.records / "figures" / "demo"
    figure.mkdir(parents=True)
    sha = hashlib.sha256(TINY_PNG).hexdigest()
    (figure / f"plot-{sha[:12]}.png").write_bytes(TINY_PNG)
    receipt = tamper_cases.synthetic_receipt("2026-01-04T00:00:00Z", 0.0, "0" * 64)
    receipt["claims"][0]["statement"] = INJECTION
    receipt["claims"][0]["derived"] = True
    receipt["claims"][0]["controls"][0]["name"] = INJECTION
    receipt["notes"] = [INJECTION]
    receipt["not_tested"] = [{"item": INJECTION, "reason": INJECTION}]
    receipt["figures"] = [
        {"path": f"figures/demo/plot-{sha[:12]}.png", "caption": INJECTION, "derived": True}
    ]
    receipt["figures"][0]["sha256"] = sha
    ledger.paths.append(write_receipt(receipt, ledger.receipts))
    ledger.rerender()
    return ledger


def test_index_lists_every_gate_with_headline_status_device_count_and_staleness(tmp_path):
    ledger = tamper_cases.Ledger(tmp_path)
    index = (ledger.records / "README.md").read_text("utf-8")
    row = next(line for line in index.splitlines() if line.startswith("| [demo](demo.md)"))
    cells = [c.strip() for c in row.strip("|").split(" | ")]
    assert cells[2].startswith("diff: 0.0002 max abs (threshold &lt;= 0.001 max abs) pass")
    assert cells[3:7] == ["pass", "2026-01-03T00:00:00Z", "cpu", "3"]
    assert "current" in cells[7]
    assert verify_all(ledger.receipts, ledger.records) == []
    (ledger.records / "README.md").write_text(index.replace("| 3 |", "| 4 |"), "utf-8")
    assert any("index out of sync" in p for p in verify_all(ledger.receipts, ledger.records))


def test_index_says_what_each_published_gate_gates():
    index = (ROOT / "records" / "README.md").read_text("utf-8")
    gates = sorted(p.name for p in (ROOT / "records" / "receipts").iterdir() if p.is_dir())
    for gate in gates:
        row = next(line for line in index.splitlines() if line.startswith(f"| [{gate}]"))
        assert "<!--tree-->n/a<!--/tree-->" not in row and "<!--tree-->" in row, row


def test_derived_values_are_labelled_arithmetic_and_injection_stays_inert_in_markdown(
    tmp_path,
):
    ledger = _injected_ledger(tmp_path)
    record = (ledger.records / "demo.md").read_text("utf-8")
    assert "0 max abs (derived: arithmetic on measured values, not itself a measurement)" in record
    assert "(derived: arithmetic on measured values, not itself a measurement)*" in record
    assert "<script>" not in record and "<img" not in record
    index = (ledger.records / "README.md").read_text("utf-8")
    assert "(derived: arithmetic)" in index and "<script>" not in index


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text("utf-8"))
    return page


def _check_site(site: Path) -> list[Path]:
    """Every href/src of every page resolves to a file in the site; return the pages seen."""
    pages = sorted(site.glob("*.html"))
    for page in pages:
        parsed = _parse(page)
        for tag, attrs in parsed.tags:
            assert tag != "script", page
            assert not any(name.startswith("on") for name in attrs), (page, tag, attrs)
            for name in ("href", "src"):
                link = attrs.get(name)
                if link is None:
                    continue
                assert ":" not in link and not link.startswith("/"), (page, link)
                target = (site / link).resolve()
                assert target.is_file() and site.resolve() in target.parents, (page, link)
    return pages


def test_site_pages_link_locally_and_injection_stays_inert(tmp_path):
    ledger = _injected_ledger(tmp_path)
    site = tmp_path / "site"
    assert main(["publish", "--receipts", str(ledger.receipts), "--html", str(site)]) == 0
    pages = _check_site(site)
    assert [p.name for p in pages] == ["demo.html", "index.html"]
    demo = _parse(site / "demo.html")
    shown = "".join(demo.text)
    assert '<script>alert("pwned")</script>' in shown  # present, as text
    assert shown.count("(derived: arithmetic on measured values, not itself a measurement)") == 2
    hrefs = [a.get("href") for t, a in demo.tags if t == "a"]
    assert "receipts/demo/LEDGER.txt" in hrefs
    assert sum(1 for h in hrefs if h and h.endswith(".json")) == 4
    copied = json.loads((site / "receipts/demo" / ledger.paths[3].name).read_text("utf-8"))
    assert copied["notes"] == [INJECTION]


def test_site_in_headless_chromium(tmp_path):
    chromium = browser.chromium()
    ledger = _injected_ledger(tmp_path)
    site = tmp_path / "site"
    index = build_site(ledger.receipts, ledger.records, site)
    _check_site(site)
    shot = tmp_path / "index.png"
    done = browser.headless(
        chromium, f"--screenshot={shot}", "--window-size=1280,800", index.as_uri()
    )
    assert shot.is_file() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", done.stderr
    assert shot.stat().st_size > 2000  # a rendered page, not an empty canvas
    dom = browser.headless(chromium, "--dump-dom", (site / "demo.html").as_uri()).stdout
    assert "Gate record: demo" in dom
    # the browser's DOM holds the injected markup only as text: no element was created
    assert "&lt;script&gt;alert" in dom and "<script" not in dom.lower()
    assert "onerror" not in dom.replace("onerror=alert(2)&gt;", "")
    assert '<img src="x"' not in dom and 'href="javascript' not in dom


def test_a_site_folder_keeps_a_users_page_of_a_gates_name(tmp_path):
    """Issue 52, rule 1 (adversary case F7): an earlier site's folder with a user's page where
    a gate's page goes is refused whole; the earlier site alone is replaced (the control)."""
    from assay.errors import AssayError

    receipts = tmp_path / "records" / "receipts"
    write_receipt(tamper_cases.synthetic_receipt("2026-01-01T00:00:00Z", 1e-4, "0" * 64), receipts)
    site = tmp_path / "site"
    build_site(receipts, receipts.parent, site, root=tmp_path)
    build_site(receipts, receipts.parent, site, root=tmp_path)  # an earlier site: replaced
    (site / "demo.html").write_text("my own page\n")
    with pytest.raises(AssayError, match=r"demo\.html: exists and was not written"):
        build_site(receipts, receipts.parent, site, root=tmp_path)
    assert (site / "demo.html").read_text() == "my own page\n"


@pytest.mark.parametrize("how", ["edited", "link", "folder", "none"])
def test_publishing_again_replaces_only_files_the_last_publish_wrote_unchanged(tmp_path, how):
    """Issue 52, rule 1 (second adversary, case 1s): every file of an earlier site (a copied
    receipt, its LEDGER.txt, a page) that was edited, or swapped for a link or a folder, since
    publish wrote it is kept, and the whole publish is refused naming it; the control ("none")
    publishes the grown ledger over the untouched site."""
    from assay.errors import AssayError
    from assay.qualify.publishing.site import SITE_MANIFEST

    receipts = tmp_path / "records" / "receipts"
    write_receipt(tamper_cases.synthetic_receipt("2026-01-01T00:00:00Z", 1e-4, "0" * 64), receipts)
    site = tmp_path / "site"
    build_site(receipts, receipts.parent, site, root=tmp_path)
    written = json.loads((site / SITE_MANIFEST).read_text())["files"]
    assert "receipts/demo/LEDGER.txt" in written and "index.html" in written
    write_receipt(tamper_cases.synthetic_receipt("2026-01-02T00:00:00Z", 2e-4, "0" * 64), receipts)
    for rel in sorted(written):
        scratch = tmp_path / "runs" / rel.replace("/", "_")
        shutil.copytree(site, scratch)
        target = scratch / rel
        if how == "edited":
            target.write_bytes(target.read_bytes() + b"\nmy note\n")
        elif how == "link":
            (tmp_path / "mine.txt").write_bytes(b"mine\n")
            target.unlink()
            target.symlink_to(tmp_path / "mine.txt")
        elif how == "folder":
            target.unlink()
            target.mkdir()
            (target / "mine.txt").write_bytes(b"mine\n")
        before = tree_listing(scratch)
        if how == "none":
            build_site(receipts, receipts.parent, scratch, root=tmp_path)
            assert len(list((scratch / "receipts" / "demo").glob("*.json"))) == 2
            continue
        # a swapped index.html makes the folder no earlier site: refused as a whole
        named = scratch if rel == "index.html" and how != "edited" else target
        with pytest.raises(AssayError, match=rf"{re.escape(str(named))}: .*nothing was changed"):
            build_site(receipts, receipts.parent, scratch, root=tmp_path)
        assert tree_listing(scratch) == before, rel


def test_a_file_an_earlier_publish_left_in_place_stays_replaceable(tmp_path):
    """Found by the on-disk ledger model: a publish that no longer writes a file an earlier one
    wrote (the history figure of a gate whose receipts were all erased) leaves it in place and
    keeps it in its manifest, so a later publish that draws it again may replace it."""
    from assay.qualify.publishing.site import SITE_MANIFEST

    receipts = tmp_path / "records" / "receipts"
    write_receipt(tamper_cases.synthetic_receipt("2026-01-01T00:00:00Z", 1e-4, "0" * 64), receipts)
    site = tmp_path / "site"
    build_site(receipts, receipts.parent, site, root=tmp_path)
    written = json.loads((site / SITE_MANIFEST).read_text())["files"]
    kept = site / "kept-by-an-earlier-publish.txt"
    kept.write_bytes(b"old\n")
    manifest = json.loads((site / SITE_MANIFEST).read_text())
    manifest["files"][kept.name] = hashlib.sha256(b"old\n").hexdigest()
    (site / SITE_MANIFEST).write_text(json.dumps(manifest))
    build_site(receipts, receipts.parent, site, root=tmp_path)
    after = json.loads((site / SITE_MANIFEST).read_text())["files"]
    assert after[kept.name] == hashlib.sha256(b"old\n").hexdigest()
    assert set(written) <= set(after)
    kept.write_bytes(b"edited by the user\n")  # no longer what a publish wrote: dropped
    build_site(receipts, receipts.parent, site, root=tmp_path)
    assert kept.name not in json.loads((site / SITE_MANIFEST).read_text())["files"]


@pytest.mark.parametrize("how", ["linked_folder", "forged_manifest"])
def test_publish_never_writes_through_a_linked_folder_or_over_an_untagged_page(tmp_path, how):
    """Third adversary, rule 1: publish wrote figures through a symlinked figures/ folder into
    the folder it named, and a hand-written .assay-site.json listing a user's page (no
    generator tag) let publish replace it. Folders of the site must be real, and a page is
    replaced only when it carries the generator tag: refused, nothing here or there changes."""
    from assay.errors import AssayError
    from assay.qualify.publishing.site import SITE_MANIFEST

    receipts = tmp_path / "records" / "receipts"
    write_receipt(tamper_cases.synthetic_receipt("2026-01-01T00:00:00Z", 1e-4, "0" * 64), receipts)
    site, elsewhere = tmp_path / "site", tmp_path / "elsewhere"
    build_site(receipts, receipts.parent, site, root=tmp_path)
    elsewhere.mkdir()
    (elsewhere / "mine.txt").write_bytes(b"mine\n")
    if how == "linked_folder":
        shutil.rmtree(site / "receipts")
        (site / "receipts").symlink_to(elsewhere)
    else:
        page = b"<html>my own page of this gate's name</html>\n"
        (site / "demo.html").write_bytes(page)
        manifest = json.loads((site / SITE_MANIFEST).read_text())
        manifest["files"]["demo.html"] = hashlib.sha256(page).hexdigest()
        (site / SITE_MANIFEST).write_text(json.dumps(manifest))
    before, outside = tree_listing(site), tree_listing(elsewhere)
    with pytest.raises(AssayError, match="nothing was changed"):
        build_site(receipts, receipts.parent, site, root=tmp_path)
    assert tree_listing(site) == before and tree_listing(elsewhere) == outside
