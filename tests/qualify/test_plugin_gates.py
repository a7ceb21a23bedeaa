"""The plugin end to end: verdicts fail tests, one valid receipt per gate, records rendered."""

from __future__ import annotations

from gatekit import PASSING_GATE, TINY_PNG

from assay.qualify import read_receipt, verify_all


def test_passing_gate_writes_one_valid_receipt_and_its_record(gates):
    gates.write("alpha", PASSING_GATE.format(value="1e-5"))
    result = gates.run()
    assert result.ret == 0, result.stdout.str()
    receipt = gates.only_receipt("alpha")
    assert receipt["status"] == "pass"
    assert receipt["schema"] == "assay.qualification-receipt/1"
    assert receipt["run"]["seeds"] == [7]
    assert receipt["run"]["device"] == "cpu"
    claim = receipt["claims"][0]
    assert (claim["verdict"], claim["controls"][0]["failed"]) == ("pass", True)
    assert any(f["path"].endswith("gate_alpha.py") for f in receipt["code"]["files"])
    read_receipt(gates.receipt_files("alpha")[0])  # schema and sha256 check
    record = (gates.records / "alpha.md").read_text("utf-8")
    assert record.startswith("# Gate record: alpha\n")
    assert verify_all(gates.receipts, gates.records) == []


def test_control_that_does_not_fail_makes_the_claim_inconclusive_and_the_run_fail(gates):
    gates.write(
        "weak",
        """
        def test_weak(gate):
            c = gate.claim("diff", "outputs agree", kind="correctness",
                           threshold=Threshold("<=", 1.0))
            c.measure(0.5)
            c.control("not actually broken", 0.7)
        """,
    )
    result = gates.run()
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*claim 'diff' inconclusive*'not actually broken'*"])
    assert gates.only_receipt("weak")["status"] == "inconclusive"


def test_claim_without_control_is_inconclusive(gates):
    gates.write(
        "bare",
        """
        def test_bare(gate):
            gate.claim("x", "holds", kind="memory", threshold=Threshold("<", 2)).measure(1)
        """,
    )
    result = gates.run()
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*claim 'x' inconclusive: no control declared*"])


def test_measurement_outside_threshold_fails_the_declaring_test_only(gates):
    gates.write(
        "mixed",
        """
        def test_good(gate):
            c = gate.claim("good", "ok", kind="performance", threshold=Threshold(">=", 10))
            c.measure(samples=[11, 12, 13])
            c.control("throttled", 1)

        def test_bad(gate):
            c = gate.claim("bad", "ok", kind="performance", threshold=Threshold(">=", 10))
            c.measure(3)
            c.control("throttled", 1)
        """,
    )
    result = gates.run()
    result.assert_outcomes(passed=1, failed=1)
    receipt = gates.only_receipt("mixed")
    assert receipt["status"] == "fail"
    by_id = {c["id"]: c for c in receipt["claims"]}
    assert by_id["good"]["measurement"]["samples"] == {
        "n": 3,
        "min": 11,
        "median": 12,
        "max": 13,
        "q1": 11,
        "q3": 13,
        "iqr": 2,
        "outliers": 0,
    }
    assert (by_id["bad"]["verdict"], by_id["bad"]["margin"]) == ("fail", -7)


def test_gate_test_that_raises_makes_the_gate_fail(gates):
    gates.write(
        "crash",
        """
        def test_crash(gate):
            c = gate.claim("c", "ok", kind="correctness", threshold=Threshold("==", 0))
            c.measure(0)
            c.control("off by one", 1)
            raise RuntimeError("boom")
        """,
    )
    result = gates.run()
    assert result.ret != 0
    receipt = gates.only_receipt("crash")
    assert receipt["status"] == "fail"
    assert receipt["run"]["tests"][0]["outcome"] == "failed"


def test_gate_fixture_requires_a_gate_module_name(gates):
    gates.modules.append(gates.pytester.makepyfile(test_not_a_gate="def test_x(gate):\n    pass\n"))
    result = gates.run()
    result.stdout.fnmatch_lines(["*needs a module named gate_<name>.py*"])
    assert not gates.receipts.exists()


def test_declarations_reach_the_receipt(gates, tmp_path):
    model = tmp_path / "model.bin"
    model.write_bytes(b"weights")
    png = tmp_path / "plot.png"
    png.write_bytes(TINY_PNG)
    gates.write(
        "full",
        f"""
        def test_full(gate):
            gate.uses("assay.qualify.core.threshold")
            gate.input("model", {str(model)!r})
            gate.figure({str(png)!r}, "error by layer")
            gate.not_tested("cuda", "no GPU here")
            gate.note("measured on a quiet machine")
            c = gate.claim("c", "ok", kind="memory", threshold=Threshold("<=", 10), unit="MiB")
            c.measure(4)
            c.control("leak injected", 40)
        """,
    )
    assert gates.run().ret == 0
    r = gates.only_receipt("full")
    assert r["inputs"][0]["bytes"] == 7 and r["inputs"][0]["role"] == "model"
    assert r["not_tested"] == [{"item": "cuda", "reason": "no GPU here"}]
    assert r["notes"] == ["measured on a quiet machine"]
    assert any(f["path"].endswith("assay/qualify/core/threshold.py") for f in r["code"]["files"])
    figure = r["figures"][0]
    assert figure["path"].startswith("figures/full/plot-")
    assert (gates.records / figure["path"]).read_bytes() == TINY_PNG
    record = (gates.records / "full.md").read_text("utf-8")
    assert f"]({figure['path']})" in record
    assert "cuda: no GPU here" in record


def test_bad_declarations_fail_at_the_line_that_made_them(gates):
    gates.write(
        "typo",
        """
        def test_typo(gate):
            gate.claim("c", "ok", kind="speed", threshold=Threshold("<", 1))
        """,
    )
    result = gates.run()
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*claim 'c' kind: expected one of correctness*got 'speed'*"])


def test_no_render_writes_receipts_only(gates):
    gates.write("quiet", PASSING_GATE.format(value="0"))
    assert gates.run("--gate-no-render").ret == 0
    assert len(gates.receipt_files("quiet")) == 1
    assert not (gates.records / "quiet.md").exists()


def test_receipts_are_appended_never_overwritten(gates):
    gates.write("twice", PASSING_GATE.format(value="0"))
    assert gates.run().ret == 0
    first = gates.receipt_files("twice")
    before = first[0].read_bytes()
    assert gates.run().ret == 0
    files = gates.receipt_files("twice")
    assert len(files) == 2 and first[0].read_bytes() == before
    assert "2 receipts in the ledger" in (gates.records / "twice.md").read_text("utf-8")
