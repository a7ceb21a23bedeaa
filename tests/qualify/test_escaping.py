"""Strings from gates cannot inject Markdown or HTML into a record, nor break its tables."""

from __future__ import annotations

import re

from assay.qualify.publishing.render import cell, text

INJECTION = (
    "x | y\n<script>alert(1)</script> ![img](http://e.vil/a.png) [link](javascript:1) `code` **b**"
)


def test_cell_escapes_pipes_newlines_html_and_link_syntax():
    out = cell(INJECTION)
    assert "\n" not in out
    assert re.search(r"(?<!\\)\|", out) is None  # every pipe is escaped
    assert "<script>" not in out and "&lt;script&gt;" in out
    assert "](" not in out.replace("\\](", "")  # no live link or image
    assert "**" not in out


def test_backtick_spans_stay_literal_code_spans():
    out = cell("run ``nox -s x|y`` or `a_b <i>` now_")
    assert out == "run `nox -s x\\|y` or `a_b <i>` now\\_"  # no backslash inside the span
    assert text("`x`") == "`x`"
    assert cell("`unclosed *x*") == "\\`unclosed \\*x\\*"


def test_text_defuses_leading_block_markers():
    assert text("# title") == "\\# title"
    assert text("- item") == "\\- item"
    assert text("1. first") == "1\\. first"
    assert text("> quote") == "&gt; quote"


def test_injected_statement_renders_inert_in_the_record(gates):
    gates.write(
        "inject",
        f"""
        def test_inject(gate):
            c = gate.claim("a|b", {INJECTION!r}, kind="correctness", threshold=Threshold("<", 1))
            c.measure(0)
            c.control({INJECTION!r}, 5)
            gate.note({INJECTION!r})
            gate.not_tested("# not a heading", {INJECTION!r})
        """,
    )
    assert gates.run().ret == 0
    record = (gates.records / "inject.md").read_text("utf-8")
    assert "<script>" not in record
    assert "![img]" not in record and "[link]" not in record
    rows = [line for line in record.splitlines() if line.startswith("| 1 |")]
    assert rows, record
    for line in rows:  # the table keeps its column count: injected pipes are escaped
        assert len(re.findall(r"(?<!\\)\|", line)) == 6
    assert "\n# not a heading" not in record and "\\# not a heading" in record
