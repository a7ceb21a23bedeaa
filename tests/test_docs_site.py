"""The documentation site builds without a warning, its links resolve, and every page loads in
a browser.

The site is built as ``nox -s docs`` builds it (Sphinx, MyST, furo; warnings are errors, so a
broken link or reference fails). Each page is then loaded in headless Chromium (Debian's
``chromium`` package): it must render its title and body, and the README's quickstart must
render every one of its shell blocks. A screenshot of the home page is written to
``build/docs-home.png`` and named in the log. Without Chromium the browser checks skip
(``assay_testing.browser``), unless CI's ``ASSAY_REQUIRE_CHROMIUM=1`` makes that a failure.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from assay_testing.browser import chromium, headless

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


# nox -s docs' build: warnings (a broken link or reference) are errors
SPHINX = ("-m", "sphinx", "-E", "-W", "--keep-going", "-q", "-b", "html")


def build_site(source: Path, out: Path) -> subprocess.CompletedProcess:
    """``nox -s docs``' build command on ``source`` with the project's conf.py."""
    return subprocess.run(
        [sys.executable, *SPHINX, "-c", str(ROOT / "docs"), str(source), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    built = build_site(ROOT, out)
    assert built.returncode == 0, f"the site did not build cleanly:\n{built.stderr[-4000:]}"
    return out


def pages(site: Path) -> list[Path]:
    """Every HTML page of the site but Sphinx's own (search, index of terms)."""
    own = {"search.html", "genindex.html"}
    return sorted(p for p in site.rglob("*.html") if p.name not in own and "_static" not in p.parts)


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.targets: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("href", "src") and value:
                self.targets.append(value)


def broken_links(site: Path) -> list[str]:
    """'page: target' for every local link or resource that names no file of the site."""
    broken = []
    for page in pages(site):
        parser = _Links()
        parser.feed(page.read_text("utf-8"))
        for target in parser.targets:
            parts = urlsplit(target)
            if parts.scheme or parts.netloc or not parts.path:
                continue  # another site, or an anchor on this page
            if not (page.parent / unquote(parts.path)).resolve().exists():
                broken.append(f"{page.relative_to(site)}: {target}")
    return broken


def test_the_site_builds_without_a_warning(site):
    assert (site / "docs" / "index.html").is_file()
    for page in ("README", "docs/architecture", "docs/cli", "docs/settings", "records/README"):
        assert (site / f"{page}.html").is_file(), page


def test_a_broken_link_fails_the_build(tmp_path):
    """Control: the same build on a copy whose README links to a page that does not exist."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Home\n\n```{toctree}\n../README\n```\n")
    (tmp_path / "README.md").write_text("# Readme\n\nSee [the guide](docs/no-such-guide.md).\n")
    built = build_site(tmp_path, tmp_path / "out")
    assert built.returncode != 0
    assert "no-such-guide" in built.stderr


def test_every_local_link_of_the_site_resolves(site):
    assert broken_links(site) == []


def test_a_link_to_a_missing_file_is_found(site, tmp_path):
    """Control: one page whose link is made to point at nothing."""
    copy = tmp_path / "site"
    shutil.copytree(site, copy)
    page = copy / "docs" / "training.html"
    page.write_text(page.read_text("utf-8").replace('href="memory.html"', 'href="memry.html"'))
    assert any("memry.html" in line for line in broken_links(copy))


def cli_reference_lists_every_command(site: Path) -> list[str]:
    from assay.cli.commands import COMMANDS

    text = re.sub(r"<[^>]+>", "", (site / "docs" / "cli.html").read_text("utf-8"))
    return [c.name for c in COMMANDS if f"usage: assay {c.name}" not in text]


def test_the_cli_reference_has_every_command(site):
    assert cli_reference_lists_every_command(site) == []


# --- in a browser ----------------------------------------------------------------------------


def rendered(browser: str, page: Path) -> str:
    """The page's DOM after Chromium loaded and ran it."""
    return headless(browser, "--dump-dom", page.as_uri()).stdout


def _title(html: str) -> str:
    found = re.search(r"<title>(.*?)</title>", html, re.S)
    return found.group(1).strip() if found else ""


def page_problem(html_source: str, dom: str) -> str | None:
    """Why a loaded page is not the page that was built, or None: its title must be the
    built one and its article must hold the body (furo puts the content in ``<article>``)."""
    if not _title(html_source) or _title(dom) != _title(html_source):
        return f"title {_title(dom)!r}, built {_title(html_source)!r}"
    body = re.search(r"<article[^>]*>(.*?)</article>", dom, re.S)
    if body is None or "<h1" not in body.group(1):
        return "no article with a heading"
    return None


def test_every_page_loads_in_chromium(site):
    browser = chromium()
    found = pages(site)
    with ThreadPoolExecutor(max_workers=2) as pool:
        doms = list(pool.map(lambda page: rendered(browser, page), found))
    problems = []
    for page, dom in zip(found, doms, strict=True):
        problem = page_problem(page.read_text("utf-8"), dom)
        if problem:
            problems.append(f"{page.relative_to(site)}: {problem}")
    assert len(found) > 40
    assert problems == []


def test_a_page_that_does_not_render_is_caught(site, tmp_path):
    """Control: a page whose article a script empties once loaded, and a missing page."""
    browser = chromium()
    page = tmp_path / "broken.html"
    source = (site / "docs" / "training.html").read_text("utf-8")
    page.write_text(
        source.replace(
            "</body>", "<script>document.querySelector('article').innerHTML=''</script></body>"
        )
    )
    assert page_problem(source, rendered(browser, page)) == "no article with a heading"
    assert page_problem(source, rendered(browser, tmp_path / "absent.html")) is not None


def test_the_quickstart_renders_its_code_blocks(site):
    browser = chromium()
    readme = (ROOT / "README.md").read_text("utf-8")
    blocks = readme.count("```bash")
    dom = rendered(browser, site / "README.html")
    shown = re.findall(r'<div class="highlight-bash notranslate">', dom)
    assert blocks >= 4
    assert len(shown) == blocks
    for command in ("assay train examples/smollm2-hf-lora.yaml", "PeftModel.from_pretrained"):
        assert command in re.sub(r"<[^>]+>", "", dom), command


def test_a_screenshot_of_the_home_page(site):
    browser = chromium()
    shot = ROOT / "build" / "docs-home.png"
    shot.parent.mkdir(exist_ok=True)
    shot.unlink(missing_ok=True)
    headless(
        browser,
        f"--screenshot={shot}",
        "--window-size=1280,900",
        (site / "docs/index.html").as_uri(),
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 20_000  # a blank page compresses to a few KB
    print(f"screenshot of the documentation's home page: {shot}")
