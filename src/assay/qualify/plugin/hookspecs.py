"""Hooks the gate plugin adds to pytest (registered through ``pytest_addhooks``)."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.hookspec
def pytest_gate_environment(config: pytest.Config) -> dict[str, Any] | None:
    """Describe the stack the project under test runs on, for every receipt of the session.

    Called once, in the process that writes receipts (the xdist controller), before the first
    receipt. Return a dict of fields, or None. ``torch``, ``cuda``, ``cudnn``,
    ``bitsandbytes``, ``transformers``, ``gpu`` (an object as
    :func:`assay.qualify.plugin.environment.torch_stack` returns) and ``torch_threads`` fill the
    receipt's standard slots; any other field is recorded, as text, under
    ``environment.stack``. Implement it in a conftest.py or plugin, for example::

        def pytest_gate_environment(config):
            import numpy
            return {"numpy": numpy.__version__}
    """
