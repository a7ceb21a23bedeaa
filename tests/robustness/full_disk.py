"""A full disk at every write-side filesystem event of a short training run, one event at a
time (issue 52, rule 6: a checkpoint save on a full disk printed ``assay: error: : No space left
on device``, naming nothing).

The run is a one-step LoRA run of a tiny model that saves its step, in this process (a second
step's save repeats the first's events); the events
are those :class:`assay_testing.faults.FailAt` counts (writes, fsyncs, renames, links, mkdirs),
failing as the OS fails them. The rule each event is held to: the run ends in exit 2 with one
stderr line that names a path under the run's folder and says the disk is full, or, where the
event was a folder's (a folder's fsync, which assay.atomic ignores since some filesystems refuse
it and the rename before it is atomic either way; ``mkdir`` of a folder that exists, which the
OS answers with EEXIST), the run finishes (exit 0).
"""

from __future__ import annotations

import contextlib
import io
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "corpus"))

from corpus_inputs import GOOD_ROWS, _jsonl, base_config
from corpus_outputs import write_config

from assay_testing.faults import FailAt


@dataclass(frozen=True)
class Trial:
    """One event failed: which, what the run answered, and why that breaks the rule (empty:
    it holds)."""

    event: int
    name: str
    code: int | str
    stderr: str
    problem: str


def _run(root: Path, model: Path, fail_at: int) -> tuple[int | str, str, FailAt]:
    from assay.cli import main

    train = root / "train.jsonl"
    if not train.exists():
        train.write_bytes(_jsonl(GOOD_ROWS))
    settings = {**base_config(model, train, root / f"run-{fail_at}"), "steps": 1}
    config = write_config(root / f"config-{fail_at}.yaml", settings)
    err, fault = io.StringIO(), FailAt(fail_at)
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), fault:
        try:
            code: int | str = main(["train", str(config), "--json", "--no-progress"])
        except BaseException as exc:
            code = f"escaped {type(exc).__name__}: {exc}"
    return code, err.getvalue().strip(), fault


def _problem(code: int | str, stderr: str, run: Path, on_folder: bool) -> str:
    if on_folder:  # a folder's fsync or mkdir: no error by design, the run goes on
        return "" if code == 0 else f"exit {code} where a folder's event failed"
    lines = stderr.splitlines()
    if code != 2:
        return f"exit {code}, expected 2"
    if len(lines) != 1:
        return f"{len(lines)} stderr lines, expected 1"
    if str(run) not in lines[0] or "No space left on device" not in lines[0]:
        return "the line names no path under the run's folder, or not the full disk"
    return ""


def sweep(root: Path, model: Path, only: tuple[str, ...] = ()) -> list[Trial]:
    """Fail each write-side event of the run in turn (a fresh run folder each), or only the
    events named in ``only``; every trial."""
    root.mkdir(parents=True, exist_ok=True)
    _code, _err, counted = _run(root, model, 0)
    trials = []
    for event, name in enumerate(counted.events, 1):
        if only and name not in only:
            continue
        code, stderr, fault = _run(root, model, event)
        problem = _problem(code, stderr, root / f"run-{event}", fault.on_folder)
        trials.append(Trial(event, name, code, stderr, problem))
    return trials
