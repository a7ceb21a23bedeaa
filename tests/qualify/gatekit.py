"""Helpers for the qualify tests: run throwaway gate modules through the plugin."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

# a 1x1 PNG, built byte for byte so no imaging library is needed
TINY_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
)

# a throwaway committer, and no commit signing whatever the machine's git config says
GIT_IDENTITY = ("user.name=t", "user.email=t@example.invalid", "commit.gpgsign=false")


def git(root: Path, *args: str) -> str:
    """Run git in ``root`` as the throwaway committer; its stdout, stripped. The test fails on
    a non-zero exit, showing git's stderr."""
    config = [part for setting in GIT_IDENTITY for part in ("-c", setting)]
    done = subprocess.run(
        ["git", *config, *args], cwd=root, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


class GateRun:
    """Writes ``gate_<name>.py`` modules into a pytester dir and runs them with the plugin."""

    def __init__(self, pytester: pytest.Pytester) -> None:
        self.pytester = pytester
        # the project layout: records/ under the rootdir, so verify's default tree is the
        # rootdir the session rendered against
        self.records = pytester.path / "records"
        self.receipts = self.records / "receipts"
        self.modules: list[Path] = []

    def write(self, name: str, source: str) -> Path:
        header = "from assay.qualify import Threshold\n\n"
        path = self.pytester.makepyfile(**{f"gate_{name}": header + textwrap.dedent(source)})
        if path not in self.modules:
            self.modules.append(path)
        return path

    def run(
        self, *args: str, receipts: Path | None = None, subprocess: bool = False
    ) -> pytest.RunResult:
        """Run every written gate module, as ``pytest gate_<name>.py --gate-receipts=X`` would."""
        target = receipts or self.receipts
        argv = ["-p", "no:cacheprovider", f"--gate-receipts={target}", "--gate-device=cpu"]
        argv += [*args, *(str(m) for m in self.modules)]
        if subprocess:
            return self.pytester.runpytest_subprocess(*argv)
        return self.pytester.runpytest(*argv)

    def receipt_files(self, gate: str, receipts: Path | None = None) -> list[Path]:
        """The gate's receipt files, oldest first: in LEDGER order where a ledger exists,
        since file names written in the same second sort by hash, not by time."""
        folder = (receipts or self.receipts) / gate
        files = sorted(folder.glob("*.json"))
        ledger = folder / "LEDGER"
        if not ledger.is_file():
            return files
        order = [
            line.split()[1]
            for line in ledger.read_text("utf-8").splitlines()
            if line and not line.startswith("#")
        ]
        return sorted(files, key=lambda f: order.index(f.name) if f.name in order else len(order))

    def only_receipt(self, gate: str, receipts: Path | None = None) -> dict[str, Any]:
        files = self.receipt_files(gate, receipts)
        assert len(files) == 1, files
        return json.loads(files[0].read_text("utf-8"))


# A conftest for a project whose runs must look like a GPU box's: this process's torch is
# made to report one CUDA device for the session (labels come from what the run saw).
SEES_CUDA = """
import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _sees_cuda():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.cuda, "is_available", lambda: True)
        patch.setattr(torch.cuda, "device_count", lambda: 1)
        yield
"""


PASSING_GATE = """
def test_diff(gate):
    gate.seed(7)
    claim = gate.claim("diff", "outputs agree", kind="correctness",
                       threshold=Threshold("<=", 1e-3, tolerance=0.1), unit="max abs")
    claim.measure({value})
    claim.control("broken subject", 0.5)
"""
