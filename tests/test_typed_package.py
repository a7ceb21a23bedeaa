"""assay ships its type annotations (PEP 561): a user's type checker reads them only when the
package carries a ``py.typed`` marker, and the wheel includes it."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_package_carries_the_marker_and_the_wheel_lists_it():
    assert resources.files("assay").joinpath("py.typed").is_file()
    # tomllib is 3.11+, and assay supports 3.10: the package-data line read as text
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    listed = re.search(r"^\[tool\.setuptools\.package-data\]\nassay = \[(.*)\]$", text, re.M)
    assert listed and '"py.typed"' in listed.group(1)
