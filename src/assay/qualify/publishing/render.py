"""Records: jinja2 renders ``records/<gate>.md`` from the gate's standing.

Output depends only on the receipts, the ledger and, inside marked spans, the working tree
(no clock, no machine state), so re-rendering in memory and comparing is how ``verify_all``
detects a record out of sync or edited by hand.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import jinja2

from assay.atomic import check_generated, replace_generated
from assay.errors import AssayError
from assay.qualify.core.layout import GATE_NAME
from assay.qualify.judging.standing import Standing, gate_standing, standing_of
from assay.qualify.ledger.chain import LEDGER
from assay.qualify.ledger.corrections import CORRECTIONS
from assay.qualify.ledger.receipt import read_receipt, receipt_paths
from assay.qualify.publishing.view import gate_view

_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_MD = set("\\`*_[]|~#!")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


_CODE_SPAN = re.compile(r"(`+)([^`]+?)\1")


def _escape(line: str) -> str:
    line = _CONTROL.sub(" ", line.replace("\t", " "))
    return "".join(_HTML.get(ch) or (f"\\{ch}" if ch in _MD else ch) for ch in line)


def _code_span(content: str, table: bool) -> str:
    # a code span shows its content literally; only a table's cell pipe needs its escape
    content = _CONTROL.sub(" ", content.replace("\t", " ")).strip()
    return "`" + (content.replace("|", "\\|") if table else content) + "`"


def inline(value: Any, *, table: bool = False) -> str:
    """``value`` as inert inline Markdown: HTML and Markdown punctuation escaped, newlines
    turned into ``<br>``, so no string from a gate can add markup, links, images or cells.
    Backtick-quoted spans (```x``` or ``` ``x`` ```) stay code spans, shown literally."""
    lines = str(value).replace("\r\n", "\n").replace("\r", "\n").split("\n")
    escaped = []
    for line in lines:
        out, pos = [], 0
        for match in _CODE_SPAN.finditer(line):
            out.append(_escape(line[pos : match.start()]))
            out.append(_code_span(match.group(2), table))
            pos = match.end()
        out.append(_escape(line[pos:]))
        escaped.append("".join(out))
    return "<br>".join(escaped).strip()


def plain_text(value: Any) -> str:
    """``value`` as inert terminal text: one line, control characters (escape sequences that
    would drive the terminal) shown as spaces."""
    return _CONTROL.sub(" ", re.sub(r"[\r\n\t]+", " ", str(value))).strip()


def cell(value: Any) -> str:
    """Inert text for one Markdown table cell (pipes escaped, no line breaks)."""
    return inline(value, table=True)


def text(value: Any) -> str:
    """Inert text for a list item or paragraph: also defuses leading block markers."""
    out = inline(value)
    out = re.sub(r"^([-+=])", r"\\\1", out)
    return re.sub(r"^(\d+)([.)])", r"\1\\\2", out)


def code(value: Any) -> str:
    """``value`` as an inline code span: shown literally, so nothing is backslash-escaped;
    backticks and line breaks, which would end or split the span, become ' and spaces."""
    flat = _CONTROL.sub(" ", str(value).replace("\r", " ").replace("\n", " ").replace("\t", " "))
    return "`" + flat.replace("`", "'").strip() + "`"


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(Path(__file__).parent / "templates")),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(cell=cell, text=text, code=code)
    return env


_ERASED_RECORD = """# Gate record: {{ s.gate | text }}

{{ banner }}**Status: {{ s.status | upper }}** · {{ s.summary() | cell }} · 0 in the ledger

Every receipt of this gate has been erased from its ledger. What they held still counts: the
status above weighs the erased receipts that `receipts/{{ s.gate | text }}/CORRECTIONS` keeps.
{% if s.problems %}

**The ledger does not verify: {{ s.problems | length }} problem(s).**

{% for p in s.problems %}
- {{ p | text }}
{% endfor %}
{% endif %}
"""


def render_standing(standing: Standing, banner: str = "") -> str:
    """The Markdown record of one gate from its standing (see :mod:`assay.qualify.publishing.view`).

    Deterministic given the standing; ``banner`` (a tree-derived span from
    :func:`assay.qualify.judging.stale.banner`) is placed above the status line.
    """
    if not standing.receipts:  # every receipt erased: the failures they held still stand
        return _environment().from_string(_ERASED_RECORD).render(s=standing, banner=banner)
    template = _environment().get_template("record.md.j2")
    return template.render(v=gate_view(standing), banner=banner)


def render_text(gate: str, receipts: list[dict[str, Any]], banner: str = "") -> str:
    """The record for ``gate`` from valid receipts given oldest first (ledger order), with no
    ledger problems and no staleness: for callers that hold receipts rather than a folder."""
    return render_standing(standing_of(gate, receipts), banner)


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
    """Gate names that have a receipts folder holding a receipt, or a LEDGER or CORRECTIONS
    file (every receipt of a gate erased, acknowledged or not, still leaves a gate to judge),
    sorted."""
    root = Path(receipts_dir)
    if not root.is_dir():
        return []
    return sorted(
        d.name
        for d in root.iterdir()
        if d.is_dir()
        and GATE_NAME.match(d.name)
        and (receipt_paths(root, d.name) or (d / LEDGER).exists() or (d / CORRECTIONS).exists())
    )


def record_path(records_dir: Path, gate: str) -> Path:
    """Where the record of ``gate`` lives: ``<records>/<gate>.md``."""
    return Path(records_dir) / f"{gate}.md"


def project_root(records_dir: Path) -> Path:
    """The tree staleness is judged against by default: the parent of the records folder."""
    return Path(records_dir).resolve().parent


def gate_files(
    gate: str, receipts_dir: Path, records_dir: Path, root: Path | None = None
) -> dict[Path, bytes]:
    """Path -> bytes of what rendering ``gate`` writes: ``<records>/<gate>.md`` (a gate CI
    cannot re-run whose implementation files changed in ``root``, default the records
    folder's parent, gets a "stale since <commit>" banner) and its history figures."""
    root = root or project_root(records_dir)
    return standing_files(gate_standing(receipts_dir, gate, records_dir, root), records_dir)


def standing_files(standing: Standing, records_dir: Path) -> dict[Path, bytes]:
    """Path -> bytes of what rendering the gate of ``standing`` writes (see
    :func:`gate_files`)."""
    from assay.qualify.publishing.history import history_files

    path = record_path(records_dir, standing.gate)
    record = {path: record_with_banner(standing).encode("utf-8")}
    return {**record, **history_files(standing, records_dir)}


def write_generated(files: dict[Path, bytes]) -> None:
    """Write ``files`` only after checking every one: none is written when any destination
    holds a file this renderer did not write (so a refusal changes nothing). Unchanged files
    are left as they are."""
    for path, data in files.items():
        check_generated(path, data)
    for path, data in files.items():
        if not (path.is_file() and path.read_bytes() == data):
            replace_generated(path, data)


def render_gate(gate: str, receipts_dir: Path, records_dir: Path, root: Path | None = None) -> Path:
    """Rebuild ``<records>/<gate>.md`` and its history figures (:func:`gate_files`); return the
    record's path."""
    write_generated(gate_files(gate, receipts_dir, records_dir, root))
    return record_path(records_dir, gate)


def record_with_banner(standing: Standing) -> str:
    """The record text including its tree-derived stale banner (what ``render`` writes and
    ``verify`` re-derives)."""
    from assay.qualify.judging.stale import banner

    return render_standing(standing, banner(standing_stale(standing)))


def standing_stale(standing: Standing) -> Any:
    """The first stale device head of ``standing`` (CPU before CUDA by name), or None."""
    return next((d.stale for d in standing.devices if d.stale is not None), None)
