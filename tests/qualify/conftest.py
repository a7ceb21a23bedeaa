"""Fixtures for the qualify tests: pytester, and a runner for throwaway gate modules."""

from __future__ import annotations

import pytest
from gatekit import GateRun


def pytest_configure(config: pytest.Config) -> None:
    # pytest refuses `pytest_plugins` in a non-top-level conftest when run as `pytest tests`,
    # so load pytester here unless the top-level conftest or -p already did.
    if not config.pluginmanager.has_plugin("pytester"):
        config.pluginmanager.import_plugin("pytester")


@pytest.fixture
def gates(pytester: pytest.Pytester) -> GateRun:
    """Run throwaway gate modules end to end in a temporary project."""
    return GateRun(pytester)
