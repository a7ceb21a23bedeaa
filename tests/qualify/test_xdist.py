"""Under pytest-xdist, workers' declarations reach the controller: one receipt per gate."""

from __future__ import annotations

CLAIMS = """
def test_{n}(gate):
    c = gate.claim("claim_{n}", "holds {n}", kind="correctness", threshold=Threshold("<=", 1))
    c.measure(0)
    c.control("broken {n}", 2)
"""


def test_two_workers_write_exactly_one_receipt_per_gate_with_all_claims(gates):
    gates.write("left", "\n".join(CLAIMS.format(n=f"l{i}") for i in range(4)))
    gates.write("right", "\n".join(CLAIMS.format(n=f"r{i}") for i in range(3)))
    result = gates.run("-n", "2", subprocess=True)
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=7)
    left, right = gates.only_receipt("left"), gates.only_receipt("right")
    assert [c["id"] for c in left["claims"]] == [f"claim_l{i}" for i in range(4)]
    assert [c["id"] for c in right["claims"]] == [f"claim_r{i}" for i in range(3)]
    assert left["status"] == right["status"] == "pass"
    assert (gates.records / "left.md").is_file() and (gates.records / "right.md").is_file()


def test_loadgroup_suffixes_do_not_reach_receipts(gates):
    grouped = "import pytest\n\n" + "\n".join(
        "@pytest.mark.xdist_group('shared')\n" + CLAIMS.format(n=f"g{i}").lstrip() for i in range(3)
    )
    gates.write("grouped", grouped)
    result = gates.run("-n", "2", "--dist", "loadgroup", subprocess=True)
    assert result.ret == 0, result.stdout.str()
    receipt = gates.only_receipt("grouped")
    tests = [c["test"] for c in receipt["claims"]] + [t["nodeid"] for t in receipt["run"]["tests"]]
    assert len(tests) == 6 and not any("@" in t for t in tests), tests
    assert receipt["status"] == "pass"
