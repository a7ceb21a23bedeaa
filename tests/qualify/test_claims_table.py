"""The claims table at the end of a gate session: what the receipts say, failures first, cut
with a count; shortened by -q; shown by --gate-no-write too; and absent from sessions that ran
no gate."""

from __future__ import annotations

from gatekit import PASSING_GATE

from assay.qualify.plugin.claims_table import claims_table

FAILING_GATE = """
def test_bad(gate):
    claim = gate.claim("bad", "too far", kind="correctness",
                       threshold=Threshold("<=", 1e-3), unit="max abs")
    claim.measure(0.25)
    claim.control("broken subject", 0.5)
"""


def _table(stdout: str) -> list[str]:
    lines = stdout.split("assay gates", 1)[1].splitlines()[1:]
    skip = ("receipt (", "not written", "=", "NOT PASSED")
    return [line for line in lines if line and not line.startswith(skip) and " in " not in line]


def test_the_table_shows_each_claim_failures_first(gates):
    gates.write("alpha", PASSING_GATE.format(value="1e-5"))
    gates.write("beta", FAILING_GATE)
    result = gates.run()
    assert result.ret != 0
    table = _table(result.stdout.str())
    assert table[0].split() == [
        "gate",
        "claim",
        "measured",
        "bound",
        "margin",
        "verdict",
        "controls",
    ]
    assert table[2].split()[:2] == ["beta", "bad"] and " fail " in table[2]
    assert table[3].split()[:2] == ["alpha", "diff"] and " pass " in table[3]
    assert "0.25 max abs" in table[2] and "<= 0.001" in table[2] and "1/1 caught" in table[2]
    assert "1e-05 max abs" in table[3]


def test_no_write_shows_the_same_table_and_quiet_drops_it(gates):
    gates.write("alpha", PASSING_GATE.format(value="1e-5"))
    written = _table(gates.run().stdout.str())
    previewed = _table(gates.run("--gate-no-write").stdout.str())
    assert previewed == written and len(written) == 3
    quiet = gates.run("-q").stdout.str()
    assert "assay gates" in quiet and _table(quiet) == []


def test_a_session_without_gates_prints_nothing_new(pytester):
    pytester.makepyfile(test_plain="def test_ok():\n    assert True\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == 0 and "assay gates" not in result.stdout.str()


def _claim(cid: str, verdict: str) -> dict:
    return {
        "id": cid,
        "verdict": verdict,
        "margin": 1.0,
        "measurement": {"value": 1.0, "unit": ""},
        "threshold": {"op": "<=", "value": 2.0},
        "controls": [],
    }


def test_a_long_table_is_cut_with_a_count_that_names_failures():
    receipts = [{"gate": "g", "claims": [_claim(f"c{i:02d}", "pass") for i in range(40)]}]
    receipts[0]["claims"].append(_claim("zz", "fail"))
    lines = claims_table(receipts, rows=10)
    assert len(lines) == 2 + 10 + 1
    assert lines[2][0].split()[1] == "zz" and lines[2][1]  # the failure is shown, in red
    assert lines[-1] == ("... and 31 more claims (0 not passing); the records list them all", False)
    assert claims_table([{"gate": "g", "claims": []}]) == []
