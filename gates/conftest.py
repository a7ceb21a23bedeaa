"""Gate-wide pytest setup. assay's gates run on torch: its stack goes into every receipt through
the plugin's hook, and xdist workers share the cores instead of oversubscribing them.

The gate plugin probes nothing heavy on its own (a project without torch never imports it);
assay declares here that its project under test uses torch, CUDA, bitsandbytes and
transformers, so the xdist controller that writes receipts records them too.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

import pytest

from assay_testing.cores import share_cores_among_xdist_workers


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def pytest_gate_environment(config: pytest.Config) -> dict[str, Any]:
    from assay.qualify.plugin.environment import torch_stack

    return {
        **torch_stack(),
        "bitsandbytes": _version("bitsandbytes"),
        "transformers": _version("transformers"),
    }


def pytest_configure(config: pytest.Config) -> None:
    share_cores_among_xdist_workers()
