"""I2 and I3 for tests that never reached their claims: a gate test skipped before its body
ran (a skip mark, a fixture that skips, the ``--runslow`` conftest recipe, ``xfail(run=False)``,
an empty parametrize), one pytest cannot collect (shadowed by a later test of the same name, a
test class with a constructor), and one whose fixture raised under an ``xfail`` mark. None of
them leaves the gate at plain pass: skipped is inconclusive, never collected is partial, and
raised is a failure, wherever it happened."""

from __future__ import annotations

import pytest

from assay.qualify.judging.standing import gate_standing

GOOD = """
import pytest


def test_good(gate):
    c = gate.claim("good", "agrees", kind="correctness", threshold=Threshold("<=", 1e-3))
    c.measure(0.0)
    c.control("broken", 1.0)


def _bad(gate):
    c = gate.claim("bad", "would fail", kind="correctness", threshold=Threshold("<=", 1e-3))
    c.measure(0.5)
    c.control("broken", 1.0)
"""

# how the failing test is kept from its verdict -> (gate source added, conftest, the standing)
NEVER_RAN = {
    "skipif mark": (
        '@pytest.mark.skipif(True, reason="flaky")\ndef test_bad(gate):\n    _bad(gate)\n',
        "",
        "inconclusive",
    ),
    "fixture skips": (
        "@pytest.fixture\ndef needs_gpu():\n    pytest.skip('no GPU')\n\n\n"
        "def test_bad(needs_gpu, gate):\n    _bad(gate)\n",
        "",
        "inconclusive",
    ),
    "runslow recipe": (
        "@pytest.mark.slow\ndef test_bad(gate):\n    _bad(gate)\n",
        "import pytest\n\ndef pytest_collection_modifyitems(config, items):\n"
        "    for item in items:\n        if 'slow' in item.keywords:\n"
        "            item.add_marker(pytest.mark.skip(reason='need --runslow'))\n",
        "inconclusive",
    ),
    "xfail run=False": (
        '@pytest.mark.xfail(run=False, reason="later")\ndef test_bad(gate):\n    _bad(gate)\n',
        "",
        "inconclusive",
    ),
    "empty parametrize": (
        '@pytest.mark.parametrize("n", [])\ndef test_bad(gate, n):\n    _bad(gate)\n',
        "",
        "inconclusive",
    ),
    "xfail, fixture raised": (
        "@pytest.fixture\ndef data():\n    raise RuntimeError('corrupt')\n"
        "\n\n@pytest.mark.xfail(reason='tracked')\n"
        "def test_bad(data, gate):\n    _bad(gate)\n",
        "",
        "fail",
    ),
    "shadowed by a later test": (
        "def test_good(gate):\n    _bad(gate)\n\n\ndef test_good(gate):\n    pass\n",
        "",
        "no complete run",
    ),
    "class with a constructor": (
        "class TestMore:\n    def __init__(self):\n        pass\n\n"
        "    def test_bad(self, gate):\n        _bad(gate)\n",
        "",
        "no complete run",
    ),
}


@pytest.mark.parametrize("how", sorted(NEVER_RAN))
def test_a_test_that_never_reached_its_verdict_leaves_no_plain_pass(gates, how):
    added, conftest, expected = NEVER_RAN[how]
    gates.write("demo", GOOD + "\n\n" + added)
    if conftest:
        gates.pytester.makeconftest(conftest)
    gates.pytester.makeini("[pytest]\nmarkers = slow: a marker\n")
    result = gates.run()
    standing = gate_standing(gates.receipts, "demo", gates.records)
    assert standing.status == expected, standing.summary()
    record = (gates.records / "demo.md").read_text("utf-8")
    assert f"**Status:** {expected.upper()}" in record or expected in record.split("\n")[2]
    if expected == "fail":
        assert result.ret != 0  # pytest agrees: it raised


def test_a_skip_in_the_body_and_one_before_it_read_the_same(gates):
    gates.write(
        "demo",
        GOOD
        + "\n\n@pytest.mark.skip(reason='later')\ndef test_marked(gate):\n    _bad(gate)\n"
        + "\n\ndef test_in_body(gate):\n    pytest.skip('later')\n",
    )
    gates.run()
    (device,) = gate_standing(gates.receipts, "demo").devices
    assert device.status == "inconclusive"
    assert [n.rsplit("::", 1)[-1] for n in device.skipped] == ["test_in_body", "test_marked"]
