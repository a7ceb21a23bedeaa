"""I5, labels come from what ran, and I6, status is derived: one gate name is one gate file; no
CUDA device seen means no cuda receipt, whatever an option says; a receipt's status is computed
from its claims by every writer and every reader."""

from __future__ import annotations

import json
import sys

import pytest
from gatekit import PASSING_GATE

from assay.errors import AssayError
from assay.qualify import verify_all, write_receipt
from assay.qualify.ledger.receipt import dump_receipt, receipt_filename, seal

PARSE = """
from assay.qualify import Threshold

def test_parse(gate):
    c = gate.claim("{claim}", "parses", kind="correctness", threshold=Threshold("<=", 1))
    c.measure(0)
    c.control("broken", 2)
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]])
def test_two_files_claiming_one_gate_name_are_refused(pytester, workers):
    pytester.makeini("[pytest]\npython_files = gate_*.py\n")
    pytester.makepyfile(**{"gates/gate_parse": PARSE.format(claim="a")})
    pytester.makepyfile(**{"gates/extra/gate_parse": PARSE.format(claim="b")})
    receipts = pytester.path / "records" / "receipts"
    result = pytester.runpytest_subprocess(
        "gates",
        "--import-mode=importlib",
        "--gate-device=cpu",
        f"--gate-receipts={receipts}",
        *workers,
    )
    assert result.ret != 0
    result.stdout.fnmatch_lines(
        ["*gate 'parse' is claimed by 2 files (gates/extra/gate_parse.py, gates/gate_parse.py)*"]
    )
    assert not list(receipts.glob("parse/*.json"))


def test_a_receipt_names_its_gate_file_and_a_change_of_file_shows(gates):
    gates.write("moved", PASSING_GATE.format(value="0"))
    assert gates.run().ret == 0
    assert gates.only_receipt("moved")["gate_file"] == "gate_moved.py"
    elsewhere = gates.pytester.path / "other"
    elsewhere.mkdir()
    moved = elsewhere / "gate_moved.py"
    moved.write_text(gates.modules[0].read_text())
    gates.modules[0].unlink()
    gates.modules[0] = moved
    assert gates.run().ret == 0
    record = (gates.records / "moved.md").read_text("utf-8")
    assert "gate file changed: gate\\_moved.py -&gt; other/gate\\_moved.py" in record


def test_asking_for_cuda_without_one_gives_a_cpu_receipt(gates):
    gates.write("dev", PASSING_GATE.format(value="0"))
    assert gates.run("--gate-device=cuda").ret == 0
    receipt = gates.only_receipt("dev")
    assert receipt["run"]["device"] == "cpu"
    assert any("saw no CUDA device" in n for n in receipt["notes"])


def test_a_cuda_label_without_a_cuda_device_is_refused(gates):
    gates.write(
        "dev",
        """
def test_diff(gate):
    c = gate.claim("diff", "agrees", kind="correctness", threshold=Threshold("<=", 1))
    c.measure(0)
    c.ran_on("cuda:0")
    c.control("broken", 2)
""",
    )
    result = gates.run("--gate-device=cuda")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*ran_on: 'cuda', but this process's torch sees no such device*"])
    assert gates.only_receipt("dev")["run"]["device"] == "cpu"


def _receipt_with_a_failing_claim(gates) -> dict:
    gates.write("derived", PASSING_GATE.format(value="0.5"))  # 0.5 > 1e-3: the claim fails
    gates.run()
    receipt = gates.only_receipt("derived")
    assert receipt["status"] == "fail"
    return receipt


def test_write_receipt_refuses_a_status_its_claims_do_not_give(gates, tmp_path):
    receipt = _receipt_with_a_failing_claim(gates)
    forged = {k: v for k, v in receipt.items() if k not in ("receipt_sha256",)}
    forged["status"] = "pass"
    forged.pop("previous_receipt_sha256")
    with pytest.raises(AssayError, match="status: 'pass' but its claims and tests give 'fail'"):
        write_receipt(forged, tmp_path / "receipts")
    assert not (tmp_path / "receipts" / "derived").exists() or not list(
        (tmp_path / "receipts" / "derived").glob("*.json")
    )


def test_verify_recomputes_the_status_of_every_receipt(gates):
    receipt = _receipt_with_a_failing_claim(gates)
    path = gates.receipt_files("derived")[0]
    forged = seal({**receipt, "status": "pass"})  # re-sealed: only the derivation can tell
    path.unlink()
    new = path.with_name(receipt_filename(forged))
    new.write_bytes(dump_receipt(forged))
    problems = verify_all(gates.receipts, gates.records)
    assert any("status: 'pass' but its claims and tests give 'fail'" in p for p in problems)
    json.loads(new.read_text())


@pytest.mark.parametrize("label", ["gpu", "tpu", "mps"])
def test_a_device_label_this_process_could_not_have_used_is_refused(gates, label):
    gates.write(
        "dev",
        f"""
def test_diff(gate):
    c = gate.claim("diff", "agrees", kind="correctness", threshold=Threshold("<=", 1))
    c.measure(0)
    c.ran_on({label!r})
    c.control("broken", 2)
""",
    )
    assert gates.run().ret != 0
    assert "device" not in gates.only_receipt("dev")["claims"][0]


def test_a_version_no_distribution_vouches_for_is_not_shown_as_what_ran(gates):
    """The ini names toylib 2.0.0, pyproject says 0.1.0, and the gates import a plain folder
    that no installed distribution provides: the record says which version ran is unknown."""
    root = gates.pytester.path
    (root / "pyproject.toml").write_text('[project]\nname = "toylib"\nversion = "0.1.0"\n')
    (root / "toylib").mkdir()
    (root / "toylib" / "__init__.py").write_text("VALUE = 1\n")
    gates.pytester.makeini("[pytest]\ngate_project = toylib==2.0.0\n")
    gates.pytester.syspathinsert()
    gates.write("subj", "import toylib\n" + PASSING_GATE.format(value="0"))
    assert gates.run().ret == 0
    subject = gates.only_receipt("subj")["subject"]
    assert subject["version"] is None and subject["declared"] == "2.0.0"
    assert "pyproject.toml declares 0.1.0" in subject["source"]
    record = (gates.records / "subj.md").read_text("utf-8")
    assert "the version the gates imported is unknown" in record
    assert "not an installed distribution" in record


def test_a_gate_file_named_after_the_index_is_not_a_gate(gates):
    gates.write("README", "def test_x(gate):\n    pass\n")
    result = gates.run()
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*not gate_README.py: README is the records index*"])
    assert not (gates.records / "README.md").exists()


def test_a_stubbed_torch_is_described_as_far_as_it_can_be(gates):
    gates.pytester.makeconftest(
        "import sys\nfrom unittest.mock import MagicMock\n"
        "stub = MagicMock()\nstub.__version__ = '2.3.0'\nsys.modules['torch'] = stub\n"
    )
    gates.write(
        "stub",
        "def test_x(gate):\n"
        "    c = gate.claim('x', 'ok', kind='correctness', threshold=Threshold('==', 0))\n"
        "    c.measure(0)\n    c.control('broken', 1)\n",
    )
    try:
        result = gates.run()
    finally:
        import torch

        sys.modules["torch"] = torch
    assert result.ret == 0 and "INTERNALERROR" not in result.stdout.str()
    environment = gates.only_receipt("stub")["environment"]
    assert environment["torch"] == "2.3.0" and environment["cuda"] is None
