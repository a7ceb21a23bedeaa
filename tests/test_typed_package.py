"""assay ships its type annotations (PEP 561), and they are checked: a user's type checker reads
them only when the package carries a ``py.typed`` marker and the wheel includes it, and mypy (as
``[tool.mypy]`` in pyproject.toml configures it: strict over ``assay.qualify``, as far as
torch's stubs allow elsewhere) finds no error in ``src/assay``."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_package_carries_the_marker_and_the_wheel_lists_it():
    assert resources.files("assay").joinpath("py.typed").is_file()
    # tomllib is 3.11+, and assay supports 3.10: the package-data line read as text
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    listed = re.search(r"^\[tool\.setuptools\.package-data\]\nassay = \[(.*)\]$", text, re.M)
    assert listed and '"py.typed"' in listed.group(1)


def _mypy(cache: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "mypy", "--cache-dir", str(cache), *extra]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1200)


# two slips: a str where the annotation promises an int (any mypy sees it), and a function
# left unannotated (only the strict checks over assay.qualify see it)
SLIPS = (
    "\n\ndef _slip(count: int) -> int:\n    return str(count)\n"
    "\n\ndef _unannotated(count):\n    return count\n"
)


@pytest.mark.slow
def test_the_type_checker_passes_and_sees_a_slip(tmp_path):
    """Every annotation in src/assay holds as configured. The control runs the same check with
    one strict module (``assay.qualify.core.threshold``) read from a copy with two slips added:
    both must be reported, so a passing check is neither silent nor merely lenient."""
    clean = _mypy(tmp_path / "cache")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    module = ROOT / "src" / "assay" / "qualify" / "core" / "threshold.py"
    slipped = tmp_path / "threshold.py"
    slipped.write_text(module.read_text("utf-8") + SLIPS, "utf-8")
    control = _mypy(tmp_path / "cache", "--shadow-file", str(module), str(slipped))
    assert control.returncode == 1
    found = set(re.findall(r"threshold\.py:\d+: error: .*\[([a-z-]+)\]$", control.stdout, re.M))
    assert found == {"return-value", "no-untyped-def"}, control.stdout
