"""Sphinx configuration of assay's documentation site (``nox -s docs``).

The source folder is the repository root, so the guides in ``docs/``, the README, the gate API
shipped in the package and the published records are pages of one site, and a link between
them is checked like any other reference. Only the files below are read.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

project = "assay"
author = "the assay developers"
extensions = ["myst_parser", "assay_cli"]
root_doc = "docs/index"
include_patterns = [
    "README.md",
    "docs/*.md",
    "records/*.md",
    "src/assay/qualify/gate-api.md",
    "examples/toy-gates/README.md",
]
exclude_patterns = ["docs/_build/**", "docs/gate-api.md"]
source_suffix = {".md": "markdown"}
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]
html_theme = "furo"
html_title = "assay"
