"""Fixtures for the qualify tests: a runner for throwaway gate modules (pytester is loaded by
the top-level conftest)."""

from __future__ import annotations

# the same for coverage's C tracer, which gate sessions start (assay.qualify.plugin.executed)
import coverage.tracer  # noqa: F401
import pytest

# In-process pytester runs restore sys.modules afterwards; a torch first imported inside one
# (by the environment probe) would be unloaded and fail to re-import. Load it once up front.
import torch  # noqa: F401
from gatekit import PASSING_GATE, GateRun


@pytest.fixture
def gates(pytester: pytest.Pytester) -> GateRun:
    """Run throwaway gate modules end to end in a temporary project."""
    return GateRun(pytester)


@pytest.fixture(autouse=True)
def no_user_trust(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the real ~/.config and $ASSAY_ALLOWED_SIGNERS (trusted signers) out of every test."""
    monkeypatch.delenv("ASSAY_ALLOWED_SIGNERS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / "config"))


@pytest.fixture
def published(gates: GateRun) -> GateRun:
    """One passing gate ``pub`` run, rendered and verified clean."""
    from assay.qualify import verify_all

    gates.write("pub", PASSING_GATE.format(value="2e-4"))
    assert gates.run().ret == 0
    assert verify_all(gates.receipts, gates.records) == []
    return gates
