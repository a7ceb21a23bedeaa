"""Regression against a baseline receipt: pass->fail and a worse metric fail the run."""

from __future__ import annotations

GATE = """
def test_speed(gate):
    c = gate.claim("speed", "fast enough", kind="performance",
                   threshold=Threshold(">=", 100, tolerance=0.1), unit="tok/s")
    c.measure({value})
    c.control("sleep injected", 1)
"""


def _baseline(gates, value: str):
    base = gates.pytester.path / "baseline"
    gates.write("perf", GATE.format(value=value))
    assert gates.run("--gate-no-render", receipts=base).ret == 0
    return base


def test_claim_that_passed_in_the_baseline_and_fails_now_fails_the_run(gates):
    base = _baseline(gates, "200")
    gates.write("perf", GATE.format(value="50"))
    result = gates.run(f"--gate-baseline={base}")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*gate 'perf' claim 'speed' regressed: passed in the baseline*"])
    receipt = gates.only_receipt("perf")
    assert receipt["baseline"]["comparisons"][0]["regressed"] is True


def test_metric_worse_than_tolerance_fails_even_when_threshold_still_met(gates):
    base = _baseline(gates, "200")
    gates.write("perf", GATE.format(value="150"))
    result = gates.run(f"--gate-baseline={base}")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*claim 'speed' regressed: 150 is worse than the baseline 200*"])
    comparison = gates.only_receipt("perf")["baseline"]["comparisons"][0]
    assert comparison["change"] == -0.25


def test_metric_within_tolerance_passes_and_is_recorded(gates):
    base = _baseline(gates, "200")
    gates.write("perf", GATE.format(value="185"))
    result = gates.run(f"--gate-baseline={base}")
    assert result.ret == 0, result.stdout.str()
    receipt = gates.only_receipt("perf")
    assert (
        receipt["baseline"]["receipt_sha256"] == gates.only_receipt("perf", base)["receipt_sha256"]
    )
    assert receipt["baseline"]["regressions"] == []
    assert "## Baseline comparison" in (gates.records / "perf.md").read_text("utf-8")


def test_a_claim_whose_unit_changed_regresses_rather_than_compare_numbers(gates):
    base = _baseline(gates, "200")
    gates.write("perf", GATE.format(value="0.2").replace('unit="tok/s"', 'unit="tok/ms"'))
    result = gates.run(f"--gate-baseline={base}")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*claim 'speed' regressed: its unit changed from 'tok/s'*"])
