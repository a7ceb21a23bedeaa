"""Run one bad-input case through ``assay.cli.main`` and judge how it failed.

A case passes when the CLI exits 2 with exactly one stderr line that names the file and the
field, row or offset, no exception escapes (no traceback), nothing is printed to stdout and
the case's directory is left exactly as it was (no partial output). A case of legal input
(``accept``) passes when the CLI exits 0 and reports no error.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HANG_SECONDS = 20.0


@dataclass(frozen=True)
class Case:
    """One malformed input: the CLI arguments that read it, the file and locator to name."""

    name: str
    kind: str
    argv: tuple[str, ...]
    file: Path
    where: str
    watch: Path
    env: tuple[tuple[str, str | None], ...] = ()  # set (None: unset) for the run
    accept: bool = False  # legal input: must succeed (exit 0, no error line), not be refused
    # a picklable callable returning a context manager entered around the run (a lock held by
    # "another writer", a fault armed); the snapshot of ``watch`` is taken inside it
    around: Any = None
    expect: str = ""  # legal input: text stdout must hold (the answer, not just exit 0)


@dataclass
class Outcome:
    """What running a case did, and which checks it failed (empty ``problems``: clean)."""

    case: Case
    code: int | None
    stderr: str
    crashed: bool = False
    hung: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.problems


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` with its size and mtime, to spot partial output."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            stat = os.stat(path)
            out[path] = (stat.st_size, stat.st_mtime_ns)
    return out


class _Hang(BaseException):
    """Raised by the alarm; a BaseException so product code cannot swallow it."""


@contextlib.contextmanager
def hang_guard(seconds: float) -> Iterator[None]:
    """Interrupt the block after ``seconds`` of wall time (main thread, POSIX only), and again
    every second after that: a run that swallows the first interruption (a broad ``except`` in
    the code under test) is interrupted again rather than left to run for hours."""

    def fire(_signum: int, _frame: object) -> None:
        raise _Hang

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def judge_accepted(code: int | None, stderr: str) -> list[str]:
    """The checks on legal input: it ran (exit 0) and reported no error."""
    problems = [] if code == 0 else [f"exit code {code}, expected 0 (legal input refused)"]
    if "Traceback" in stderr or "error:" in stderr:
        problems.append(f"an error was reported: {stderr.strip()[-200:]!r}")
    return problems


@contextlib.contextmanager
def environment(changes: tuple[tuple[str, str | None], ...]) -> Iterator[None]:
    """``os.environ`` with ``changes`` applied for the block, then put back exactly."""
    saved = {name: os.environ.get(name) for name, _ in changes}
    try:
        for name, value in changes:
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def judge_message(case: Case, code: int | None, stderr: str) -> list[str]:
    """The checks on an error report; also used by the gate's 'names the file' control."""
    if case.accept:
        return judge_accepted(code, stderr)
    problems = []
    if code != 2:
        problems.append(f"exit code {code}, expected 2")
    lines = stderr.strip().splitlines()
    if len(lines) != 1:
        problems.append(f"{len(lines)} stderr lines, expected 1")
    if "Traceback" in stderr:
        problems.append("traceback printed")
    if str(case.file) not in stderr:
        problems.append(f"message does not name {case.file}")
    if case.where not in stderr:
        problems.append(f"message does not name {case.where!r}")
    return problems


def load_adapter_main(argv: list[str]) -> int:
    """``load-adapter MODEL FOLDER``: the Python API ``load_adapter`` on a fresh model, with
    the CLI's contract (an AssayError is one stderr line and exit 2)."""
    from assay import load
    from assay.adapters import load_adapter
    from assay.errors import AssayError

    try:
        load_adapter(load(argv[0]), argv[1])
    except AssayError as err:
        print(f"assay: error: {err}", file=sys.stderr)
        return 2
    return 0


def corpus_main(argv: list[str]) -> int:
    """``assay.cli.main``, or :func:`load_adapter_main` for ``load-adapter`` cases."""
    if argv and argv[0] == "load-adapter":
        return load_adapter_main(argv[1:])
    from assay.cli import main

    return main(argv)


def run_case(case: Case, main: Callable[[list[str]], int] | None = None) -> Outcome:
    """Run ``case`` in this process through ``main`` (default :func:`corpus_main`)."""
    if main is None:
        main = corpus_main
    err, out = io.StringIO(), io.StringIO()
    code: int | None = None
    crashed = hung = False
    with case.around() if case.around is not None else contextlib.nullcontext():
        before = snapshot(case.watch)
        try:
            with (
                contextlib.redirect_stderr(err),
                contextlib.redirect_stdout(out),
                environment(case.env),
                hang_guard(HANG_SECONDS),
            ):
                code = main(list(case.argv))
        except _Hang:
            hung = True
        except SystemExit as exc:  # argparse: a usage error, not a clean input error
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException as exc:
            crashed = True
            err.write(f"Traceback (escaped): {type(exc).__name__}: {exc}\n")
        after = snapshot(case.watch)
    outcome = Outcome(case, code, err.getvalue(), crashed=crashed, hung=hung)
    outcome.problems = judge_message(case, code, outcome.stderr)
    if hung:
        outcome.problems.append(f"no answer within {HANG_SECONDS} s")
    if case.accept:  # legal input may print and write what a run prints and writes
        if case.expect and case.expect not in out.getvalue():
            outcome.problems.append(f"stdout does not say {case.expect!r}")
        return outcome
    if out.getvalue().strip():
        outcome.problems.append("printed output on stdout")
    if after != before:
        outcome.problems.append(f"files under {case.watch} changed (partial output)")
    return outcome


def run_case_subprocess(case: Case) -> Outcome:
    """Run ``case`` as a real ``python -m assay.cli`` process (end-to-end exit code)."""
    before = snapshot(case.watch)
    done = subprocess.run(
        [sys.executable, "-m", "assay.cli", *case.argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    outcome = Outcome(case, done.returncode, done.stderr)
    outcome.problems = judge_message(case, done.returncode, done.stderr)
    if done.stdout.strip():
        outcome.problems.append("printed output on stdout")
    if snapshot(case.watch) != before:
        outcome.problems.append(f"files under {case.watch} changed (partial output)")
    return outcome
