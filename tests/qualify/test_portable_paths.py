"""Receipts and records carry no path of the machine that published them: a path under the
project is relative to it, under an install root ``<site-packages>/...``, under the temporary
folder ``<tmp>/...``, under the home folder ``~/...``. The same gates published from two folders
give the same receipts and records, up to the run's own identity (time, id, hashes)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from assay.qualify.core import portable as mod
from assay.qualify.core.portable import local_path, portable, portable_path, portable_text

ROOT = Path(__file__).resolve().parents[2]


def _machine(monkeypatch, tmp_path):
    """A machine whose home, temporary folder, install root and project nest as they often
    do (the project and a virtualenv inside the home folder)."""
    home = tmp_path / "home" / "u"
    project = home / "proj"
    venv_site = project / ".venv" / "lib" / "python3.11" / "site-packages"
    temp = tmp_path / "t"
    for folder in (venv_site, temp):
        folder.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(mod.tempfile, "gettempdir", lambda: str(temp))
    monkeypatch.setattr(mod, "_install_roots", lambda: (str(venv_site),))
    return home, project, venv_site, temp


def test_each_machine_root_is_written_by_name(monkeypatch, tmp_path):
    home, project, venv_site, temp = _machine(monkeypatch, tmp_path)
    assert portable_path(project / "src" / "a.py", project) == "src/a.py"
    assert portable_path(venv_site / "pkg" / "m.py", project) == "<site-packages>/pkg/m.py"
    assert portable_path(temp / "pytest-1" / "d.json", project) == "<tmp>/pytest-1/d.json"
    assert portable_path(home / ".cache" / "m.gguf", project) == "~/.cache/m.gguf"
    assert portable_path("/dev/zero", project) == "/dev/zero"  # the same on every machine
    for written in ("src/a.py", "<site-packages>/pkg/m.py", "<tmp>/x", "~/.cache/m.gguf"):
        back = local_path(written, project)
        assert portable_path(back, project) == written  # written paths map back onto here


@settings(max_examples=200, deadline=None)
@given(
    where=st.sampled_from(["project", "site", "temp", "home"]),
    rest=st.lists(st.from_regex(r"[A-Za-z0-9_.-]{1,8}", fullmatch=True), min_size=1, max_size=3),
    before=st.sampled_from(["", "at ", "'", "(", "file="]),
    after=st.sampled_from(["", ": bad", "'", ")", " and more"]),
)
def test_no_machine_root_survives_in_text(tmp_path_factory, where, rest, before, after):
    import pytest

    monkeypatch = pytest.MonkeyPatch()
    try:
        home, project, venv_site, temp = _machine(monkeypatch, tmp_path_factory.mktemp("m"))
        base = {"project": project, "site": venv_site, "temp": temp, "home": home}[where]
        text = before + str(base.joinpath(*rest)) + after
        written = portable_text(text, project)
        for machine_root in (str(project), str(venv_site), str(temp), str(home)):
            assert machine_root not in written, (text, written)
        assert written.startswith(before) and written.endswith(after)
    finally:
        monkeypatch.undo()


def test_a_longer_name_is_not_a_root(monkeypatch, tmp_path):
    _home, project, _site, _temp = _machine(monkeypatch, tmp_path)
    other = f"{project}2/x and /opt{project}/y"
    assert portable_text(other, project) == other.replace(str(tmp_path / "home" / "u"), "~", 1)
    assert portable({"k": [f"{project}/a", 3]}, project) == {"k": ["a", 3]}


VOLATILE = (
    "created",
    "receipt_id",
    "receipt_sha256",
    "previous_receipt_sha256",
    "duration_s",
    "load_per_thread",  # how busy the machine was as the session started
)


def _masked(value):
    if isinstance(value, dict):
        return {k: "*" if k in VOLATILE else _masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v) for v in value]
    return value


def _publish(folder: Path) -> tuple[dict, str]:
    """The receipts (by gate) and records one run of the toy gates writes in ``folder``."""
    toy = ROOT / "examples" / "toy-gates"
    shutil.copytree(toy, folder, ignore=shutil.ignore_patterns("records"))
    done = subprocess.run(  # the exactness gate alone: its measurements are deterministic
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "gates/gate_exactness.py"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    receipts, records = {}, ""
    for path in sorted((folder / "records" / "receipts").glob("*/*.json")):
        receipts[path.parent.name] = json.loads(path.read_text("utf-8"))
        records += (folder / "records" / f"{path.parent.name}.md").read_text("utf-8")
    assert receipts
    return receipts, records


def test_the_same_gates_published_from_two_folders_give_the_same_receipt_and_record(tmp_path):
    one = tmp_path / "one" / "toy-gates"
    two = tmp_path / "two" / "deeper" / "toy-gates"
    first, first_record = _publish(one)
    second, second_record = _publish(two)
    for folder, receipt, record in ((one, first, first_record), (two, second, second_record)):
        text = json.dumps(receipt) + record
        assert str(folder) not in text and str(tmp_path) not in text
    assert _masked(first) == _masked(second)
    identity = [
        value
        for receipts in (first, second)
        for r in receipts.values()
        for value in (r["receipt_sha256"], f"{r['run']['duration_s']:g}")
    ]

    def plain(record: str) -> str:
        record = re.sub(r"\d{4}-\d\d-\d\d([ T]\d\d:\d\d(:\d\d)?Z?)?", "*", record)
        # seconds, as the record rounds them: two runs of one gate take different times
        record = re.sub(r"\b\d+(\.\d+)? s\b", "* s", record)
        for value in identity:
            record = record.replace(str(value), "*").replace(str(value)[:12], "*")
        return record

    assert plain(first_record) == plain(second_record)
