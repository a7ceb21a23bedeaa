"""assay's gates run on torch: describe its stack in every receipt through the plugin's hook.

The gate plugin probes nothing heavy on its own (a project without torch never imports it);
assay declares here that its project under test uses torch, CUDA, bitsandbytes and
transformers, so the xdist controller that writes receipts records them too.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

import pytest


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def pytest_gate_environment(config: pytest.Config) -> dict[str, Any]:
    from assay.qualify.environment import torch_stack

    return {
        **torch_stack(),
        "bitsandbytes": _version("bitsandbytes"),
        "transformers": _version("transformers"),
    }
