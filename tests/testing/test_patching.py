"""Patches on scratch copies of a function's source: applied to every caller, stacked, undone."""

from __future__ import annotations

import sys
import textwrap

import pytest

from assay_testing.patching import Edit, patched

SUBJECT = """
import functools

FACTOR = 3


def scale(x):
    return x * FACTOR


def outer(k):
    def inner(x):
        return x + k
    return inner


class Base:
    def value(self):
        return 1


class Child(Base):
    def value(self):
        return super().value() + 10

    @staticmethod
    def twice(x):
        y = x * 2
        return y

    @property
    def name(self):
        return "child"


def closure_user(x):
    offset = 5

    def add(y):
        return y + offset

    return add(x)


@functools.lru_cache(maxsize=None)
def cached(x):
    return x + 1
"""


@pytest.fixture()
def subject(tmp_path, monkeypatch):
    (tmp_path / "patch_subject.py").write_text(textwrap.dedent(SUBJECT))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("patch_subject", None)
    import patch_subject

    yield patch_subject
    sys.modules.pop("patch_subject", None)


def test_a_patch_reaches_every_reference_and_is_undone(subject):
    held = subject.scale
    with patched([Edit("patch_subject:scale", "x * FACTOR", "x * FACTOR + 1")]):
        assert held(2) == 7 and subject.scale(2) == 7
    assert held(2) == 6


def test_methods_super_static_property_and_closures(subject):
    child = subject.Child()
    edits = [
        Edit("patch_subject:Child.value", "+ 10", "+ 20"),
        Edit("patch_subject:Child.twice", "x * 2", "x * 3"),
        Edit("patch_subject:Child.name", '"child"', '"mutant"'),
        Edit("patch_subject:closure_user", "y + offset", "y - offset"),
    ]
    with patched(edits):
        assert (child.value(), child.twice(2), child.name) == (21, 6, "mutant")
        assert subject.closure_user(1) == -4
    assert (child.value(), child.twice(2), child.name, subject.closure_user(1)) == (
        11,
        4,
        "child",
        6,
    )


def test_patches_on_one_function_stack_and_unwind(subject):
    first = Edit("patch_subject:scale", "x * FACTOR", "(x + 1) * FACTOR")
    second = Edit("patch_subject:scale", "return", "return 100 +")
    with patched([first]):
        with patched([second]):
            assert subject.scale(1) == 106
        assert subject.scale(1) == 6
    assert subject.scale(1) == 3


def test_a_setting_is_substituted_into_the_new_text(subject):
    with patched([Edit("patch_subject:scale", "FACTOR", "$VALUE")], "10"):
        assert subject.scale(2) == 20


def test_text_not_found_once_refuses_and_changes_nothing(subject):
    refused = pytest.raises(ValueError, match=r"patch_subject:scale: the text to patch is found 0")
    with refused, patched([Edit("patch_subject:scale", "x / FACTOR", "x")]):
        pass
    assert subject.scale(2) == 6


def test_a_wrapped_function_is_patched_underneath(subject):
    with patched([Edit("patch_subject:cached", "x + 1", "x + 2")]):
        assert subject.cached.__wrapped__(1) == 3
    assert subject.cached.__wrapped__(1) == 2
