"""The defect catalog: every defect is a patch that applies, lives where its name says, has a
curated-mutant entry, and nothing in the product asks for a defect."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from assay_testing import defects
from assay_testing.mutants import MUTANTS, STATUSES, TABLE
from assay_testing.patching import resolve

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ROOT / "src" / "assay"
# What the old in-product mechanism looked like; none of it may come back.
IN_PRODUCT_HOOK = re.compile(r"\barmed\(|faultpoints|ASSAY_FAULTS")


def test_the_product_asks_for_no_defect():
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in PRODUCT.rglob("*.py")
        if "testing" not in path.relative_to(PRODUCT).parts
        for n, line in enumerate(path.read_text("utf-8").splitlines(), 1)
        if IN_PRODUCT_HOOK.search(line)
    ]
    assert found == []


def test_every_defect_has_a_table_entry_and_back():
    assert len(defects.CATALOG) >= 70
    assert sorted(set(defects.CATALOG) - set(TABLE)) == [], "defects without a table entry"
    assert sorted(set(TABLE) - set(defects.CATALOG)) == [], "table entries without a defect"
    assert len(TABLE) == len(MUTANTS), "a mutant listed twice"


@pytest.mark.parametrize("name", sorted(defects.CATALOG))
def test_each_defect_patches_the_module_its_name_gives_and_changes_its_code(name):
    item = defects.CATALOG[name]
    assert item.edits and item.defect
    functions = {edit.target: resolve(edit.target) for edit in item.edits}
    for target in functions:
        assert target.split(":")[0] == item.module, f"{name}: {target}"
    before = {t: f.__code__ for t, f in functions.items()}
    with defects.inject(name, "7"):
        assert all(f.__code__ is not before[t] for t, f in functions.items())
        assert all(f.__code__ != before[t] for t, f in functions.items())
    assert all(f.__code__ is before[t] for t, f in functions.items())


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


def test_unknown_names_are_refused():
    with pytest.raises(KeyError, match=r"unknown fault point 'qualify\.typo'"):
        defects.parse("qualify.judging.stale.ignore, qualify.typo")
    assert defects.parse(" qualify.judging.stale.ignore , atomic.short_write=3 ") == {
        "qualify.judging.stale.ignore": "1",
        "atomic.short_write": "3",
    }


PROBE = (
    "from assay.qualify.core.threshold import judge\n"
    "claim = {'threshold': {'op': '<=', 'value': 1}, 'measurement': {'value': 0},"
    " 'controls': [{'name': 'c', 'measured': 0}]}\n"
    "print(judge(claim)['verdict'])\n"
)


def test_a_child_started_with_child_env_runs_the_defect_and_a_bad_name_stops_it():
    def child(faults: str) -> subprocess.CompletedProcess[str]:
        env = defects.child_env(faults)
        return subprocess.run(
            [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True
        )

    assert child("").stdout.strip() == "inconclusive"  # the control passed: cannot fail
    assert child("qualify.core.threshold.controls_ignored").stdout.strip() == "pass"
    env = defects.child_env("qualify.judging.stale.ignore")
    env["ASSAY_FAULTS"] = "qualify.typo"
    stopped = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True)
    assert stopped.returncode == 3 and "unknown fault point 'qualify.typo'" in stopped.stderr
