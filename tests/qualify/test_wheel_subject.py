"""Wheel qualification: with $ASSAY_SUBJECT_WHEEL a gate imports assay from the installed
wheel, not the checkout, and its receipt and record name the wheel and its sha256."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PIP_WHEEL = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
MARK = 'WHEEL_MARK = "patched in the wheel"\n'

GATE = """
import assay
from assay import errors
from assay.qualify import Threshold


def test_marker(gate):
    gate.uses("assay.errors")
    gate.note(f"assay imported from {assay.__file__}")
    claim = gate.claim("wheel.patched", "the gate ran the wheel's code", kind="correctness",
                       threshold=Threshold("==", 1), unit="patched modules seen")
    claim.measure(int(getattr(errors, "WHEEL_MARK", "") == "patched in the wheel"))
    claim.control("a module without the patch", 0)
"""


def _patched_wheel(tmp_path: Path) -> Path:
    """Build the wheel of this checkout, then append MARK to assay/errors.py inside it
    (RECORD updated), so only code imported from the wheel can see the mark."""
    dist = tmp_path / "dist"
    subprocess.run(
        [*PIP_WHEEL, "-w", str(dist), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = dist.glob("assay_qualify-*.whl")
    patched = tmp_path / built.name
    with zipfile.ZipFile(built) as src, zipfile.ZipFile(patched, "w") as out:
        record_name = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
        data = src.read("assay/errors.py") + MARK.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        for item in src.infolist():
            if item.filename == "assay/errors.py":
                out.writestr(item, data)
            elif item.filename == record_name:
                lines = src.read(record_name).decode().splitlines()
                lines = [
                    f"assay/errors.py,sha256={digest},{len(data)}"
                    if line.startswith("assay/errors.py,")
                    else line
                    for line in lines
                ]
                out.writestr(item, "\n".join(lines) + "\n")
            else:
                out.writestr(item, src.read(item.filename))
    return patched


@pytest.mark.slow
def test_gate_runs_against_the_installed_wheel_and_names_it(tmp_path):
    wheel = _patched_wheel(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--ignore-installed",
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    project = tmp_path / "project"
    project.mkdir()
    (project / "gate_wheel.py").write_text(textwrap.dedent(GATE), "utf-8")
    (project / "pytest.ini").write_text("[pytest]\ngate_project = assay-qualify\n", "utf-8")
    pytest_argv = [str(python), "-m", "pytest", "-p", "no:cacheprovider", "gate_wheel.py"]
    pytest_argv += ["--gate-device", "cpu"]
    plugin = (ROOT / "src/assay/qualify/plugin/hooks.py").read_text("utf-8")
    receipts_opt = "--gate-receipts" if '"--gate-receipts"' in plugin else "--receipts"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(ASSAY_SUBJECT_WHEEL=str(wheel), PYTHONSAFEPATH="1", OMP_NUM_THREADS="1")
    done = subprocess.run(
        [*pytest_argv, receipts_opt, "receipts"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = (project / "receipts" / "wheel").glob("*.json")
    receipt = json.loads(path.read_text("utf-8"))
    assert receipt["claims"][0]["measurement"]["value"] == 1  # the patched file ran
    assert receipt["wheel"] == {
        "filename": wheel.name,
        "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
    }
    # the note names the installed copy, written portably (no path of this machine)
    assert "<site-packages>/assay/__init__.py" in receipt["notes"][0]
    assert str(tmp_path) not in json.dumps(receipt)
    # the wheel's file is recorded under its checkout path, so --stale can compare it
    assert "src/assay/errors.py" in [f["path"] for f in receipt["code"]["files"]]
    record = (project / "wheel.md").read_text("utf-8")
    assert f"the installed wheel {wheel.name.replace('_', chr(92) + '_')}" in record

    # control: the same gate against the checkout sees no mark, and the wheel claim is refused
    env["PYTHONPATH"] = str(ROOT / "src")
    checkout = subprocess.run(
        [*pytest_argv, receipts_opt, "checkout/receipts"],  # records beside it, not over ours
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert checkout.returncode != 0
    assert "not an installed wheel" in checkout.stdout


def test_a_wheel_of_another_project_or_a_checkout_import_is_never_the_subject(
    tmp_path, monkeypatch
):
    from assay.errors import AssayError
    from assay.qualify.plugin.publish import WHEEL_ENV, wheel_subject

    other = tmp_path / "toylib-9.9.9-py3-none-any.whl"
    other.write_bytes(b"PK")
    monkeypatch.setenv(WHEEL_ENV, str(other))
    with pytest.raises(AssayError, match="is not a wheel of the project under test"):
        wheel_subject("assay-qualify", ROOT)
    ours = tmp_path / "assay_qualify-0.1.0-py3-none-any.whl"
    ours.write_bytes(b"PK")
    monkeypatch.setenv(WHEEL_ENV, str(ours))
    with pytest.raises(AssayError, match="not an installed wheel"):  # this run's assay: src/
        wheel_subject("assay-qualify", ROOT)
