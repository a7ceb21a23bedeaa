"""``assay status RUN_DIR [--json]``: where a run stands, read from its files alone.

Step, latest loss, tokens/s (mean of the last 20 steps), the last checkpoint, elapsed training
time, an ETA while it runs, and its state: running, finished, stopped (a signal or --stop-at)
or failed. A run left ``running`` by a process that no longer exists (killed, or the machine
went down) is reported as failed. Nothing is loaded but JSON and YAML; no model is touched.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from assay.errors import AssayError

RECENT = 20  # steps the tokens/s and ETA are averaged over


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True


def _records(path: Path) -> list[dict[str, Any]]:
    """The metrics lines that parse (a line torn by a crash is skipped, as resume drops it)."""
    from assay.bounded import parse_json

    found = []
    if path.is_file():
        for line in path.read_text("utf-8", errors="replace").splitlines():
            try:
                row = parse_json(line)
            except ValueError:
                continue
            if isinstance(row, dict) and isinstance(row.get("step"), int):
                found.append(row)
    return found


def run_status(run_dir: Path) -> dict[str, Any]:
    """The status of ``run_dir`` as a JSON-ready dict; AssayError when it is not a run."""
    from assay.bounded import read_json_file
    from assay.train.config_schema import read_yaml
    from assay.train.loop import METRICS, RUN_CONFIG
    from assay.train.run_state import RUN_STATE

    if not (run_dir / RUN_CONFIG).is_file():
        raise AssayError(f"{run_dir}: not a run directory (no {RUN_CONFIG})")
    steps = read_yaml(run_dir / RUN_CONFIG).get("steps")
    state_file = run_dir / RUN_STATE
    state = read_json_file(state_file, AssayError) if state_file.is_file() else {}
    records = _records(run_dir / METRICS)
    latest = run_dir / "latest"
    checkpoint = latest.read_text("utf-8").strip() if latest.is_file() else None
    recent = records[-RECENT:]
    seconds = sum(r.get("seconds", 0.0) for r in recent)
    tokens_per_s = sum(r.get("tokens", 0) for r in recent) / seconds if seconds else None
    step = records[-1]["step"] if records else 0
    word, reason = state.get("state"), state.get("reason")
    if word is None:  # a run written before run-state.json existed
        done = isinstance(steps, int) and step >= steps
        word, reason = ("finished", None) if done else ("unknown", f"no {RUN_STATE}")
    if word == "running" and not _alive(state.get("pid")):
        word, reason = "failed", f"process {state.get('pid')} is gone (killed or crashed)"
    eta = None
    if word == "running" and recent and isinstance(steps, int):
        eta = (steps - step) * seconds / len(recent)
    return {
        "run": str(run_dir),
        "state": word,
        "reason": reason,
        "step": step,
        "steps": steps,
        "loss": records[-1].get("loss") if records else None,
        "tokens_per_s": tokens_per_s,
        "checkpoint": str(run_dir / checkpoint) if checkpoint else None,
        "elapsed_s": sum(r.get("seconds", 0.0) for r in records),
        "eta_s": eta,
        "updated": state.get("updated"),
    }


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    whole = round(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def cmd_status(args: argparse.Namespace) -> int:
    status = run_status(Path(args.run_dir))
    if args.json:
        print(json.dumps(status, indent=2))
        return 0
    why = f" ({status['reason']})" if status["reason"] else ""
    loss = "-" if status["loss"] is None else f"{status['loss']:.4f}"
    speed = "-" if status["tokens_per_s"] is None else f"{status['tokens_per_s']:,.0f}"
    print(f"{status['run']}: {status['state']}{why} at step {status['step']} of {status['steps']}")
    print(f"loss {loss}, {speed} tokens/s (last {RECENT} steps)")
    print(f"checkpoint {status['checkpoint'] or '-'}")
    print(f"elapsed {_clock(status['elapsed_s'])} training, eta {_clock(status['eta_s'])}")
    return 0


def add_status(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "status",
        help="where a run stands: step, loss, tokens/s, checkpoint, elapsed, ETA, state",
        description=__doc__.split("\n\n")[1],
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run's output.dir")
    parser.add_argument("--json", action="store_true", help="print the status as JSON")
    parser.set_defaults(func=cmd_status)
