"""Issue 52, rule 6: a ledger file (LEDGER, CORRECTIONS, a receipt) that is a device or links
out of its folder is bad input: `assay verify`, `render` and `publish` refuse it in one line
naming it, with exit 2, instead of listing a problem per receipt (28 lines, exit 1, for a
LEDGER linked to /dev/zero). The cases are gate-robustness' corpus class ``ledger_files``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "corpus"))

from corpus_harness import run_case
from corpus_round5 import ledger_file_cases


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    return ledger_file_cases(tmp_path_factory.mktemp("ledgers"))


def test_a_swapped_ledger_file_is_refused_in_one_line(cases):
    assert len(cases) == 4
    dirty = [(o.case.name, o.problems) for o in map(run_case, cases) if not o.clean]
    assert dirty == []
