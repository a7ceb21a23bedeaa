"""The fault-point registry, and the curated-mutant table that must cover every fault point."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from assay import faultpoints
from assay.testing.mutants import MUTANTS, STATUSES, TABLE, declared_fault_points

ROOT = Path(__file__).resolve().parents[1]
DECLARED = re.compile(r"declare\(\s*\"([^\"]+)\"")


def _declared_in_source() -> dict[str, Path]:
    found = {}
    for path in (ROOT / "src" / "assay").rglob("*.py"):
        if path.name == "faultpoints.py":
            continue
        for name in DECLARED.findall(path.read_text("utf-8")):
            found[name] = path
    return found


def test_declare_returns_the_name_and_refuses_a_second_meaning():
    name = faultpoints.declare("tests.registry.example", "an example defect")
    assert name == "tests.registry.example"
    assert faultpoints.declare(name, "an example defect") == name
    with pytest.raises(ValueError, match="declared twice"):
        faultpoints.declare(name, "another defect")


def test_inject_arms_for_the_block_only_and_nests(monkeypatch):
    monkeypatch.delenv(faultpoints.ENV, raising=False)
    name = faultpoints.declare("tests.registry.nested", "nested arming")
    assert not faultpoints.armed(name)
    with faultpoints.inject(name, "outer"):
        assert faultpoints.armed(name) and faultpoints.value(name) == "outer"
        with faultpoints.inject(name, "inner"):
            assert faultpoints.value(name) == "inner"
        assert faultpoints.value(name) == "outer"
    assert not faultpoints.armed(name)
    assert faultpoints.value(name, "unset") == "unset"


def test_unknown_name_cannot_be_injected():
    refused = pytest.raises(KeyError, match=r"unknown fault point 'tests\.registry\.typo'")
    with refused, faultpoints.inject("tests.registry.typo"):
        pass


def test_environment_arms_names_and_values(monkeypatch):
    monkeypatch.setenv(faultpoints.ENV, " storage.nf4.nibble_order , tests.registry.v=3 ")
    assert faultpoints.armed("storage.nf4.nibble_order")
    assert faultpoints.value("tests.registry.v") == "3"
    assert not faultpoints.armed("storage.nf4.gather_order")


def test_every_fault_point_in_the_source_has_a_table_entry_and_back():
    declared = _declared_in_source()
    assert len(declared) >= 40
    assert sorted(set(declared) - set(TABLE)) == [], "fault points without a table entry"
    assert sorted(set(TABLE) - set(declared)) == [], "table entries without a fault point"
    assert len(TABLE) == len(MUTANTS), "a mutant listed twice"


def test_each_entry_is_declared_by_the_module_its_name_gives():
    catalog = declared_fault_points()
    assert set(TABLE) <= set(catalog)
    declared = _declared_in_source()
    for m in MUTANTS:
        assert declared[m.name] == ROOT / "src" / (m.module.replace(".", "/") + ".py"), m.name


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_entry_names_existing_killers_and_a_status(mutant):
    assert mutant.status in STATUSES
    assert mutant.status == "killed" or mutant.reason, "equivalent/cuda entries need a reason"
    assert (mutant.killers or not mutant.counted) and mutant.budget_s > 0
    for killer in mutant.killers:
        path, _, function = killer.partition("::")
        source = ROOT / path
        assert source.is_file(), killer
        if function:
            name = function.split("[", 1)[0]  # a parametrized id names its function
            assert f"def {name}(" in source.read_text("utf-8"), killer
