"""Environment probes are pluggable (pytest_gate_environment); torch is not probed unless used."""

from __future__ import annotations

from gatekit import PASSING_GATE

HOOK = """
def pytest_gate_environment(config):
    return {"numpy": "1.99", "torch": "9.9-fake", "torch_threads": 3}
"""


def test_a_project_adds_stack_fields_through_the_hook(gates):
    gates.pytester.makeconftest(HOOK)
    gates.write("env", PASSING_GATE.format(value="1e-4"))
    assert gates.run("--gate-no-render").ret == 0
    env = gates.only_receipt("env")["environment"]
    assert env["stack"] == {"numpy": "1.99"}
    assert env["torch"] == "9.9-fake" and env["cpu"]["torch_threads"] == 3


def test_a_project_that_does_not_use_torch_never_imports_it(gates):
    gates.pytester.makepyfile(
        conftest="import sys\n\ndef pytest_sessionfinish():\n"
        "    print('TORCH-LOADED' if 'torch' in sys.modules else 'TORCH-ABSENT')\n"
    )
    gates.write("notorch", PASSING_GATE.format(value="1e-4"))
    result = gates.run("--gate-no-render", "-s", subprocess=True)
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*TORCH-ABSENT*"])
    env = gates.only_receipt("notorch")["environment"]
    assert env["torch"] is None and env["gpu"] is None and "stack" not in env
