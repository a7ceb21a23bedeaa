"""``assay status RUN_DIR [--json]``: where a run stands, read from its files alone.

Step, latest loss, tokens/s (mean of the last 20 steps), the last checkpoint, elapsed training
time, an ETA while it runs, and its state: running, finished, stopped (a signal or --stop-at)
or failed. A run left ``running`` by a process that no longer exists (killed, or the machine
went down) is reported as failed: the run's lock tells, or its pid together with that
process's start time, never a bare pid (a pid may belong to another process since). Every
file is read with a cap, and a malformed one is one line naming the file and the field. Nothing
is loaded but JSON and YAML; no model is touched.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import stat
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assay.cli.dispatch import one_line
from assay.errors import AssayError
from assay.qualify.publishing.wording import plural

RECENT = 20  # steps the tokens/s and ETA are averaged over
STATES = ("running", "finished", "stopped", "failed")
POINTER_BYTES = 4096  # ``latest`` holds one step folder's name
NUMBERS = ("loss", "seconds", "tokens", "tokens_per_s")  # a metrics line's numbers status reads
NON_NEGATIVE = ("seconds", "tokens", "tokens_per_s")
MAX_STEP = 2**53  # a step count a float still counts exactly


def _present(path: Path) -> bool:
    """False when ``path`` is absent; True for a regular file; AssayError naming it for
    anything else (a folder, a FIFO that would block the read, a dangling link), so a run file
    is never taken for missing because it is not a file."""
    if not os.path.lexists(path):
        return False
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise AssayError(
            f"{path}: cannot be read ({exc.strerror or exc}); expected a file"
        ) from None
    if not stat.S_ISREG(mode):
        raise AssayError(f"{path}: not a regular file; expected the run's {path.name}")
    return True


def _number(value: Any) -> bool:
    """A finite int or float a float can hold (a 400-digit integer is not)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


@dataclass
class Metrics:
    """What status needs of ``metrics.jsonl``: the last rows, their count and the time summed."""

    recent: deque = field(default_factory=lambda: deque(maxlen=RECENT))
    rows: int = 0
    elapsed_s: float = 0.0

    @property
    def last(self) -> dict[str, Any] | None:
        return self.recent[-1] if self.recent else None


def _checked_row(path: Path, number: int, row: Any) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise AssayError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
    step = row.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
        raise AssayError(f"{path}:{number}: step: expected a step number, got {str(step)[:40]}")
    for name in NUMBERS:
        if name in row and not _number(row[name]):
            shown = str(row[name])[:40] if not isinstance(row[name], int) else "a huge integer"
            raise AssayError(f"{path}:{number}: {name}: expected a finite number, got {shown}")
        if name in NON_NEGATIVE and name in row and row[name] < 0:
            raise AssayError(f"{path}:{number}: {name}: expected a number >= 0, got {row[name]}")
    return row


def _records(path: Path) -> Metrics:
    """The metrics rows, read line by line in constant memory (each line capped), split on
    "\\n" alone. Only the last line may fail to parse (a write torn by a crash, which resume
    drops too); an unreadable line before it, or a row with a step or number of the wrong kind
    (a string, a boolean, NaN, Infinity, a negative time), is AssayError naming file and line."""
    from assay.bounded import JSONL_BYTES, JSONL_LINE_BYTES, parse_json

    found = Metrics()
    if not _present(path):
        return found
    torn: int | None = None
    read = 0
    with path.open("rb") as handle:
        for number, line in enumerate(iter(lambda: handle.readline(JSONL_LINE_BYTES + 1), b""), 1):
            read += len(line)
            if len(line) > JSONL_LINE_BYTES or read > JSONL_BYTES:
                raise AssayError(
                    f"{path}:{number}: line over {JSONL_LINE_BYTES:,} bytes, or the "
                    f"file over {JSONL_BYTES:,}; not a metrics file"
                )
            if not line.strip():
                continue
            if torn is not None:
                raise AssayError(
                    f"{path}:{torn}: not a JSON line (only the last line may be torn by a crash)"
                )
            try:
                row = parse_json(line)
            except ValueError:
                torn = number
                continue
            row = _checked_row(path, number, row)
            if found.last is not None and row["step"] < found.last["step"]:
                raise AssayError(
                    f"{path}:{number}: step {row['step']} after step "
                    f"{found.last['step']}: steps never go back (two runs wrote "
                    "this file?)"
                )
            found.recent.append(row)
            found.rows += 1
            found.elapsed_s += row.get("seconds", 0.0)
    return found


def _state(path: Path) -> dict[str, Any]:
    """``run-state.json`` checked field by field (AssayError naming the file and field); an
    empty dict when the run predates the file."""
    from assay.bounded import read_json_file

    if not _present(path):
        return {}
    state = read_json_file(path, AssayError)
    if not isinstance(state, dict):
        raise AssayError(f"{path}: expected a JSON object, got {type(state).__name__}")
    if state.get("state") not in STATES:
        raise AssayError(
            f"{path}: state: expected one of {', '.join(STATES)}, got {state.get('state')!r}"
        )
    for name in ("reason", "updated", "started"):
        if not isinstance(state.get(name), str | None):
            raise AssayError(f"{path}: {name}: expected text, got {state[name]!r}")
    for name in ("pid", "start_ticks", "step", "steps"):  # a wrong kind would mislead
        value = state.get(name)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63
        ):
            raise AssayError(f"{path}: {name}: expected a whole number, got {value!r}")
    return state


def _checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint ``latest`` names; AssayError naming the file when it is unreadable or
    names a checkpoint folder that is not there (resume from it would fail)."""
    from assay.bounded import InputTooLarge, read_capped

    latest = run_dir / "latest"
    if not _present(latest):
        return None
    try:
        name = read_capped(latest, POINTER_BYTES, "checkpoint pointer").decode("utf-8").strip()
    except InputTooLarge as exc:
        raise AssayError(str(exc)) from None
    except UnicodeDecodeError as exc:
        raise AssayError(
            f"{latest}: not UTF-8 text (byte {exc.start}); expected a "
            "checkpoint name like step-000010"
        ) from None
    if not re.fullmatch(r"step-\d{6,}", name):
        raise AssayError(f"{latest}: {name[:80]!r} is not a checkpoint name like step-000010")
    if not (run_dir / name).is_dir():
        raise AssayError(
            f"{latest}: names {name}, which is not a folder in the run (deleted?); "
            "the run cannot resume from it"
        )
    return run_dir / name


def _liveness(run_dir: Path, state: dict[str, Any]) -> tuple[str, str | None]:
    """(state, reason) of a run whose state file says running: running while its lock is
    held or its pid is alive with the start time it recorded; a bare pid proves nothing (the
    kernel reuses pids), so a run that recorded no start time is unknown while the pid exists."""
    from assay.train.run.lock import LOCK_NAME, lock_held, same_process

    pid = state.get("pid")
    locked = _present(run_dir / LOCK_NAME) and lock_held(run_dir)
    if locked or same_process(pid, state.get("start_ticks")):
        return "running", None
    if pid is None:
        return "failed", "the run recorded no process id and does not hold its lock"
    if state.get("start_ticks") is None and _pid_exists(pid):
        return "unknown", (
            f"process {pid} exists, but the run recorded no start time to tell whether it is "
            "the run's process"
        )
    return "failed", f"process {pid} is gone (killed or crashed)"


def _pid_exists(pid: Any) -> bool:
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid < 2**31:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True


def run_status(run_dir: Path) -> dict[str, Any]:
    """The status of ``run_dir`` as a JSON-ready dict; AssayError (one line naming the file
    and the field) when it is not a run or one of its files is malformed."""
    from assay.settings.yaml_reader import read_yaml
    from assay.train.loop import METRICS, RUN_CONFIG
    from assay.train.run.state import RUN_STATE

    if not run_dir.is_dir() or not _present(run_dir / RUN_CONFIG):
        raise AssayError(f"{run_dir}: not a run directory (no {RUN_CONFIG})")
    steps = read_yaml(run_dir / RUN_CONFIG).get("steps")
    if steps is not None and (
        isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_STEP
    ):
        raise AssayError(
            f"{run_dir / RUN_CONFIG}: steps: expected a whole number of steps >= 1, "
            f"got {str(steps)[:40]}"
        )
    state = _state(run_dir / RUN_STATE)
    metrics = _records(run_dir / METRICS)
    checkpoint = _checkpoint(run_dir)
    recent = list(metrics.recent)
    last = metrics.last
    seconds = sum(r.get("seconds", 0.0) for r in recent)
    tokens_per_s = sum(r.get("tokens", 0) for r in recent) / seconds if seconds > 0 else None
    step = last["step"] if last else 0
    word, reason = state.get("state"), state.get("reason")
    if word is None:  # a run written before run-state.json existed
        done = steps is not None and step >= steps
        word, reason = ("finished", None) if done else ("unknown", f"no {RUN_STATE}")
    if word == "running":
        word, reason = _liveness(run_dir, state)
    if word == "finished" and steps is not None and step < steps:  # the files disagree
        reason = f"but {METRICS} ends at step {step} of {steps}"
    eta = None
    if word == "running" and recent and steps is not None:
        eta = max(steps - step, 0) * seconds / len(recent)
    return {
        "run": str(run_dir),
        "state": word,
        "reason": reason,
        "step": step,
        "steps": steps,
        "loss": last.get("loss") if last else None,
        "tokens_per_s": tokens_per_s,
        "checkpoint": str(checkpoint) if checkpoint else None,
        "elapsed_s": metrics.elapsed_s,
        "eta_s": eta,
        "updated": state.get("updated"),
    }


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    whole = round(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def run(args: argparse.Namespace) -> int:
    status = run_status(Path(args.run_dir))
    if args.json:
        print(json.dumps(status, indent=2))
        return 0
    why = f" ({one_line(status['reason'])})" if status["reason"] else ""
    loss = "-" if status["loss"] is None else f"{status['loss']:.4f}"
    speed = "-" if status["tokens_per_s"] is None else f"{status['tokens_per_s']:,.0f}"
    print(f"{status['run']}: {status['state']}{why} at step {status['step']} of {status['steps']}")
    window = min(RECENT, status["step"] or 0)  # a run shorter than the window averages less
    print(f"loss {loss}, {speed} tokens/s (last {plural(window, 'step')})")
    print(f"checkpoint {status['checkpoint'] or '-'}")
    print(f"elapsed {_clock(status['elapsed_s'])} training, eta {_clock(status['eta_s'])}")
    return 0


def arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``assay status``."""
    parser.description = __doc__.split("\n\n")[1]
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run's output.dir")
    parser.add_argument("--json", action="store_true", help="print the status as JSON")
