"""Every harness script's and bench module's --help opens with whole sentences: argparse's
description is its docstring's first paragraph, and that paragraph ends a sentence (a first
line cut at the wrap read "...against transformers+PEFT and transformers+bitsandbytes,")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
SCRIPTS = sorted(
    p
    for p in [*ROOT.glob("harness/*.py"), *ROOT.glob("testing/*/*.py")]
    if "ArgumentParser(" in p.read_text()
)


def test_there_are_scripts_to_check():
    assert len(SCRIPTS) >= 5


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_description_is_the_first_paragraph_and_ends_a_sentence(script):
    source = script.read_text()
    doc = ast.get_docstring(ast.parse(source), clean=False) or ""
    described = [
        kw.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "ArgumentParser"
        for kw in node.keywords
        if kw.arg == "description"
    ]
    assert described, f"{script.name}: ArgumentParser without a description"
    for value in described:
        text = ast.unparse(value)
        if text.startswith("__doc__"):  # the module's docstring (not a function's)
            assert text == "__doc__.split('\\n\\n')[0]", f"{script.name}: description={text}"
    first = doc.split("\n\n")[0].rstrip()
    assert first.endswith((".", ":", ")")), f"{script.name}: first paragraph ends {first[-30:]!r}"
