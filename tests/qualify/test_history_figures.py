"""Claim history figures and the index sparkline: drawn from the ledger alone, the same bytes
for the same ledger (so ``verify`` re-draws and compares them), failing runs red, partial runs
hollow, claim text inert."""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "gates"))

from assay.qualify.judging.standing import gate_standing  # noqa: E402
from assay.qualify.ledger.chain import write_receipt  # noqa: E402
from assay.qualify.publishing.history import (  # noqa: E402
    FAIL_COLOUR,
    figure_path,
    history_figures,
    sparkline,
)
from assay.qualify.publishing.index import render_all  # noqa: E402
from assay.qualify.publishing.verify import verify_all  # noqa: E402
from support.faults import tamper_cases  # noqa: E402
from support.robustness.history_cases import unmarked, write_ledger  # noqa: E402

ODD_ID = 'diff<script>alert("x")</script>'


def _ledger(tmp_path: Path, values: list[float], partial_at: int | None = None) -> Path:
    receipts = tmp_path / "records" / "receipts"
    for i, value in enumerate(values):
        receipt = tamper_cases.synthetic_receipt(f"2026-01-01T00:00:{i:02d}Z", value, "0" * 64)
        claim = receipt["claims"][0]
        claim["verdict"] = "pass" if value <= 1e-3 else "fail"
        claim["margin"] = 1e-3 - value
        receipt["status"] = claim["verdict"]
        if i == partial_at:
            receipt["run"].update(partial=True, partial_reason="stopped early")
        write_receipt(receipt, receipts)
    return receipts


def test_the_same_ledger_draws_the_same_bytes_and_verify_checks_them(tmp_path):
    receipts = _ledger(tmp_path, [1e-4, 2e-4, 3e-4])
    records = receipts.parent
    render_all(receipts, records, tmp_path)
    figure = records / figure_path("demo", "diff")
    first = figure.read_bytes()
    render_all(receipts, records, tmp_path)
    assert figure.read_bytes() == first
    assert f"![history of diff]({figure_path('demo', 'diff')})" in (records / "demo.md").read_text()
    assert verify_all(receipts, records, tmp_path) == []
    figure.write_bytes(first.replace(b"#1f6feb", b"#000000"))  # a hand edit is caught
    assert any("history figure out of sync" in p for p in verify_all(receipts, records, tmp_path))
    figure.unlink()
    assert any("history figure missing" in p for p in verify_all(receipts, records, tmp_path))


def test_a_failing_run_is_red_and_a_partial_run_hollow(tmp_path):
    receipts = _ledger(tmp_path, [1e-4, 5e-3, 2e-4], partial_at=2)
    standing = gate_standing(receipts, "demo")
    (svg,) = history_figures(standing).values()
    circles = [line for line in svg.splitlines() if line.startswith("<circle")]
    assert len(circles) == 3
    assert f'stroke="{FAIL_COLOUR}"' in circles[1] and "not pass" in circles[1]
    assert 'fill="#ffffff"' in circles[2] and "partial run" in circles[2]
    assert f'stroke="{FAIL_COLOUR}"' not in circles[0] and 'fill="#ffffff"' not in circles[0]
    assert 'stroke-dasharray="4 3"' in svg  # the bound


def test_the_sparkline_follows_the_values_and_marks_failures(tmp_path):
    receipts = _ledger(tmp_path, [1e-4, 5e-4, 9e-4, 5e-3])
    # eight levels over 1e-4..5e-3; the failing run is an x
    assert sparkline(gate_standing(receipts, "demo"), "diff") == "▁▂▂x"
    assert sparkline(gate_standing(receipts, "demo"), "absent") == ""


def test_claim_text_is_inert_in_the_figure(tmp_path):
    receipts = tmp_path / "receipts"
    receipt = tamper_cases.synthetic_receipt("2026-01-01T00:00:00Z", 1e-4, "0" * 64)
    receipt["claims"][0]["id"] = ODD_ID
    write_receipt(receipt, receipts)
    ((path, svg),) = history_figures(gate_standing(receipts, "demo")).items()
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    assert "/" not in Path(path).name and Path(path).parent.name == "demo"


@settings(max_examples=25, deadline=None)
@given(
    runs=st.lists(
        st.one_of(st.floats(1e-5, 1e-2), st.sampled_from(["null", "absent"])),
        min_size=1,
        max_size=8,
    )
)
def test_every_run_after_the_first_measurement_has_a_mark(tmp_path_factory, runs):
    """Issue 52, rule 4: a run whose value is null (a NaN is written as null) or that lacks
    the claim used to drop out of the figure and the sparkline, so both ended on the run
    before it. Each such run is a red cross and an ``x``, at its place (the oracle is
    gate-robustness' history.every_run_marked's, on Hypothesis' ledgers)."""
    receipts = tmp_path_factory.mktemp("ledger") / "records" / "receipts"
    write_ledger(receipts, runs)
    assert unmarked(receipts, runs) == []


def test_render_checks_every_destination_before_writing_any(tmp_path):
    """Issue 52, rule 1 (adversary cases F5, F6): a user's file where a figure or the index
    goes is never overwritten, and a refusal writes nothing at all, figures included."""
    import pytest

    from assay.errors import AssayError

    receipts = _ledger(tmp_path, [1e-4, 2e-4])
    records = receipts.parent
    render_all(receipts, records, tmp_path)
    figure = records / figure_path("demo", "diff")
    figure.write_text("my drawing\n")
    with pytest.raises(AssayError, match="was not written by this command"):
        render_all(receipts, records, tmp_path)
    assert figure.read_text() == "my drawing\n"
    figure.unlink()
    render_all(receipts, records, tmp_path)  # the control: its own figure is redrawn
    (records / "README.md").write_text("my readme\n")
    figure.write_bytes(figure.read_bytes().replace(b"#1f6feb", b"#000000"))  # stale, ours
    stale = figure.read_bytes()
    with pytest.raises(AssayError, match=r"README\.md: exists and was not written"):
        render_all(receipts, records, tmp_path)
    assert figure.read_bytes() == stale  # nothing written before the refusal
