"""Fixtures for the qualify tests: a runner for throwaway gate modules (pytester is loaded by
the top-level conftest)."""

from __future__ import annotations

import pytest

# In-process pytester runs restore sys.modules afterwards; a torch first imported inside one
# (by the environment probe) would be unloaded and fail to re-import. Load it once up front.
import torch  # noqa: F401
from gatekit import GateRun


@pytest.fixture
def gates(pytester: pytest.Pytester) -> GateRun:
    """Run throwaway gate modules end to end in a temporary project."""
    return GateRun(pytester)
