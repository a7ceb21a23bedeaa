"""The framework installs and imports without torch; the trainer sits behind one extra."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "bitsandbytes", "gguf", "tokenizers", "safetensors", "numpy")
# `assay` on PyPI is another project (docs/install.md); ours is this distribution.
DIST = "assay-qualify"
PACKAGED_DOC = ROOT / "src" / "assay" / "qualify" / "gate-api.md"
INSTALL_DOCS = (
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    PACKAGED_DOC,
    ROOT / "examples" / "toy-gates" / "README.md",
)
# The targets of one `pip install ...` (up to the end of a code span, a comment or the line).
PIP_INSTALL = re.compile(r"pip install((?:\s+[^\s`#]+)+)")


def test_base_dependencies_are_the_framework_and_train_carries_the_trainer():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    names = [d.split(">")[0].split("=")[0].split("[")[0].strip() for d in project["dependencies"]]
    assert sorted(names) == ["coverage", "jinja2", "jsonschema", "pytest"]
    train = " ".join(project["optional-dependencies"]["train"])
    assert all(dist in train for dist in ("torch", "bitsandbytes", "gguf", "tokenizers"))


def test_the_framework_api_never_imports_the_trainer_stack():
    code = (
        "import json, sys, assay, assay.qualify as q\n"
        "names = [q.Threshold, q.Tolerance, q.Gate, q.measure_time, q.headline, q.render_all,"
        " q.verify_all, q.read_receipt]\n"
        "import assay.qualify.plugin.hooks, assay.qualify.plugin.session\n"
        "import assay.qualify.plugin.environment\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_a_trainer_name_without_its_dependencies_says_which_extra(monkeypatch):
    code = (
        "import sys\n"
        "sys.modules['torch'] = None  # as if torch were not installed\n"
        "import assay\n"
        "try:\n    assay.Trainer\nexcept Exception as err:\n    print(type(err).__name__, err)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("AssayError ") and f'pip install "{DIST}[train]"' in out.stdout


def _project() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    return tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]


def test_the_distribution_is_ours_and_the_import_name_stays_assay():
    project = _project()
    assert project["name"] == DIST
    assert project["scripts"]["assay"] == "assay.cli:main"
    import assay

    assert assay.DISTRIBUTION == DIST


def install_targets(text: str) -> list[str]:
    """Every package a `pip install` in ``text`` names (options dropped, quotes stripped)."""
    targets = []
    for match in PIP_INSTALL.finditer(text):
        words = [w.strip("'\"") for w in match.group(1).split()]
        targets += [w for w in words if w and not w.startswith("-")]
    return targets


def test_every_install_line_names_the_distribution():
    named = {}
    for path in INSTALL_DOCS:
        targets = install_targets(path.read_text("utf-8"))
        wrong = [t for t in targets if re.fullmatch(r"assay(\[.*\])?", t)]
        assert not wrong, f"{path.relative_to(ROOT)}: installs {wrong}; the distribution is {DIST}"
        named[path.name] = [t for t in targets if t.startswith(DIST)]
    assert named["README.md"] and named["install.md"] and named["gate-api.md"]


def test_install_targets_reads_the_lines_it_checks():
    text = '`pip install assay` and `pip install -q "assay[train]"  # x`, pip install .'
    assert install_targets(text) == ["assay", "assay[train]", "."]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel of this checkout (no deps, the installed setuptools: offline)."""
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(dist),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = dist.glob("*.whl")
    return built


def test_the_wheel_is_named_for_the_distribution(wheel):
    assert wheel.name.startswith("assay_qualify-")
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        assert f"Name: {DIST}" in archive.read(metadata).decode().splitlines()


def test_the_wheel_ships_the_gate_api_reference(wheel):
    with zipfile.ZipFile(wheel) as archive:
        shipped = archive.read("assay/qualify/gate-api.md").decode("utf-8")
    assert shipped == PACKAGED_DOC.read_text("utf-8")
    assert "measure_control" in shipped  # the page, not an empty stand-in
    pointer = (ROOT / "docs" / "gate-api.md").read_text("utf-8")
    assert "src/assay/qualify/gate-api.md" in pointer and len(pointer.splitlines()) <= 3


def test_the_wheel_holds_the_product_not_its_test_machinery(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    packages = {n.split("/")[0] for n in names if ".dist-info/" not in n}
    assert packages == {"assay"}, "only the product ships: tests' helpers live in testing/"
    machinery = [n for n in names if n.startswith(("assay/testing/", "assay/bench/"))]
    assert machinery == [] and not any("sitecustomize" in n for n in names)
    assert {"assay/qualify/plugin/hooks.py", "assay/train/loop.py", "assay/cli/__init__.py"} <= set(
        names
    )
