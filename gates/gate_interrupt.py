"""gate-interrupt: SIGINT or SIGTERM during ``assay train`` finishes the current optimizer step,
saves a checkpoint there, prints one line and exits 128 + the signal; resumed, the run ends
bitwise where an uninterrupted run ends. A second signal stops at once without losing the last
good checkpoint.

Every run is a real ``assay train`` process on a tiny model with NEFTune noise on (so training
draws from torch's RNG). The first claims' signals come from this process at a random moment;
the second-signal trials send theirs from inside the child (gates/support/interrupt/child.py),
just before a chosen file write of the stop's own save, so the second lands in that save on any
machine.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from assay.qualify import Threshold
from assay_testing import defects
from assay_testing.text_run import save_text_run

# the claim a reader looks at first (the index and every record lead with it)
HEADLINE = "interrupt.resume_bitwise"

CODE = (
    "assay.train.graceful",
    "assay.train.loop",
    "assay.train.checkpoint.directory",
    "assay.cli.train",
    "assay.cli",
)
STEPS = 60
SIGNALS = (signal.SIGINT, signal.SIGTERM)
COMPARED = ("trainables.safetensors", "optimizer.safetensors", "scheduler.json", "cursor.json")
LINE = re.compile(
    r"^stopped at step (\d+) \((SIGINT|SIGTERM)\); resume with: assay train (\S+) --resume (\S+)$"
)


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("interrupt")
    base = {
        **save_text_run(root, seed=3),
        "storage": "float32",
        "steps": STEPS,
        "seed": 5,
        "neftune_alpha": 5.0,
        "batch": {"micro_batch": 2},
        "adapter": {"method": "lora", "rank": 2, "alpha": 4, "targets": ["q_proj", "v_proj"]},
        "optim": {"lr": 1e-3, "schedule": "cosine", "warmup_steps": 2},
    }
    return root, base


def config(setup, name: str, save_every: int = 1000) -> Path:
    root, base = setup
    path = root / f"{name}.yaml"
    body = {**base, "output": {"dir": str(root / name), "save_every": save_every}}
    path.write_text(yaml.safe_dump(body))
    return path


def train(path: Path, *extra: str, faults: str = "") -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "assay.cli", "train", str(path), "--json", "--no-progress"]
    return subprocess.run(
        [*argv, *extra], capture_output=True, text=True, check=False, env=defects.child_env(faults)
    )


def signalled(path: Path, sig: int, after: int, faults: str = "") -> subprocess.CompletedProcess:
    """Start a run, send ``sig`` once its metrics show ``after`` steps, wait for it to end."""
    argv = [sys.executable, "-m", "assay.cli", "train", str(path), "--json", "--no-progress"]
    child = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=defects.child_env(faults),
    )
    metrics = yaml.safe_load(path.read_text())["output"]["dir"] + "/metrics.jsonl"
    deadline = time.monotonic() + 300
    while child.poll() is None and time.monotonic() < deadline:
        if Path(metrics).exists() and len(Path(metrics).read_text().splitlines()) >= after:
            child.send_signal(sig)
            break
        time.sleep(0.005)
    out, err = child.communicate(timeout=300)
    return subprocess.CompletedProcess(argv, child.returncode, out, err)


def run_dir(path: Path) -> Path:
    return Path(yaml.safe_load(path.read_text())["output"]["dir"])


def final_differences(reference: Path, other: Path) -> int:
    """Differing files of the two runs' final checkpoints, plus 1 if the loss logs differ."""
    last = f"step-{STEPS:06d}"
    files = sum(
        (reference / last / n).read_bytes() != (other / last / n).read_bytes()
        if (other / last / n).exists()
        else True
        for n in COMPARED
    )
    losses = [
        [json.loads(line)["loss"] for line in (d / "metrics.jsonl").read_text().splitlines()]
        for d in (reference, other)
    ]
    return files + int(losses[0] != losses[1])


def contract_breaks(done: subprocess.CompletedProcess, sig: int, path: Path) -> list[str]:
    """How a signalled run broke the stop contract: exit code, the one line, the checkpoint."""
    from assay.train.checkpoint.directory import load_checkpoint

    breaks = []
    if done.returncode != 128 + sig:
        breaks.append(f"exit {done.returncode}, expected {128 + sig}")
    lines = done.stderr.strip().splitlines()
    match = LINE.match(lines[-1]) if len(lines) == 1 else None
    if match is None:
        return [*breaks, f"stderr is not the one stop line: {done.stderr[-300:]!r}"]
    step = int(match.group(1))
    if match.group(3) != str(path) or match.group(4) != str(run_dir(path)):
        breaks.append(f"the resume command names {match.group(3)} / {match.group(4)}")
    try:
        saved = load_checkpoint(run_dir(path)).step
    except Exception as exc:  # no checkpoint at all is a break, not a crash of the gate
        return [*breaks, f"no loadable checkpoint ({type(exc).__name__})"]
    trained = len((run_dir(path) / "metrics.jsonl").read_text().splitlines())
    if not saved == step == trained:
        breaks.append(f"said step {step}, saved step {saved}, trained {trained} steps")
    return breaks


def test_a_signalled_run_stops_saves_and_resumes_bitwise(gate, setup):
    gate.seed(41)
    rng = random.Random(41)
    straight = config(setup, "straight")
    assert train(straight).returncode == 0
    reference = run_dir(straight)
    breaks, differing, stops = [], 0, []
    for trial, sig in enumerate(SIGNALS):
        path = config(setup, f"trial-{trial}")
        done = signalled(path, sig, after=rng.randint(3, 25))
        breaks += contract_breaks(done, sig, path)
        stops.append(f"{signal.Signals(sig).name} -> step {json.loads(done.stdout)['steps']}")
        resumed = train(path, "--resume", str(run_dir(path)))
        differing += final_differences(reference, run_dir(path)) + int(resumed.returncode != 0)
    resume = gate.claim(
        "interrupt.resume_bitwise",
        f"{len(SIGNALS)} `assay train` runs ({STEPS} steps, NEFTune on), each sent SIGINT or "
        "SIGTERM at a random step and resumed in a new process: final trainables, optimizer "
        "state, scheduler, data cursor and every logged loss equal the uninterrupted run's",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="differing items",
        code=CODE,
    )
    resume.measure(differing)
    contract = gate.claim(
        "interrupt.stop_contract",
        "each signalled run exits 128 + the signal, prints exactly one stderr line naming the "
        "step and the resume command, and its latest checkpoint is that step: no step trained "
        "after the signal's step is lost, none is skipped",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="breaks",
        code=CODE,
    )
    contract.measure(len(breaks))
    gate.note(f"signals and the steps they stopped at: {', '.join(stops)}; breaks: {breaks}")

    # controls, each a defect armed in the child process
    path = config(setup, "control-optimizer")
    shutil.copytree(run_dir(config(setup, "trial-0")), run_dir(path))
    for step in sorted(run_dir(path).glob("step-*"))[1:]:
        shutil.rmtree(step)  # back to the checkpoint the stop wrote
    (run_dir(path) / "latest").write_text(sorted(run_dir(path).glob("step-*"))[0].name + "\n")
    stopped_at = int((run_dir(path) / "latest").read_text().strip().split("-")[1])
    kept = (run_dir(path) / "metrics.jsonl").read_text().splitlines()[:stopped_at]
    (run_dir(path) / "metrics.jsonl").write_text("".join(line + "\n" for line in kept))
    train(
        path,
        "--resume",
        str(run_dir(path)),
        faults="train.checkpoint.directory.optimizer_not_restored",
    )
    resume.control(
        "the resume after the stop re-initialises the optimizer",
        final_differences(reference, run_dir(path)),
    )
    path = config(setup, "control-unsaved")
    done = signalled(path, signal.SIGINT, after=10, faults="train.loop.stop_unsaved")
    contract.control(
        "a stop that ends without saving its step", len(contract_breaks(done, signal.SIGINT, path))
    )


def test_a_second_signal_stops_at_once_and_keeps_the_last_good_checkpoint(gate, setup):
    from assay.train.checkpoint.directory import load_checkpoint

    gate.seed(43)
    rng = random.Random(43)
    reference = run_dir(config(setup, "straight"))
    if not (reference / "latest").exists():
        assert train(config(setup, "straight")).returncode == 0
    child = Path(__file__).parent / "support" / "interrupt" / "child.py"

    def twice(name: str, step: int, write: int, faults: str = "") -> list[str]:
        path = config(setup, name, save_every=5)
        done = subprocess.run(
            [sys.executable, str(child), str(step), str(write), str(path)],
            capture_output=True,
            text=True,
            check=False,
            env=defects.child_env(faults),
        )
        breaks = []
        if done.returncode != 130 or done.stderr.strip() != "assay: interrupted":
            breaks.append(f"exit {done.returncode}, stderr {done.stderr.strip()[-200:]!r}")
        try:
            load_checkpoint(run_dir(path))
        except Exception as exc:
            return [*breaks, f"last good checkpoint lost ({type(exc).__name__})"]
        train(path, "--resume", str(run_dir(path)))
        if final_differences(reference, run_dir(path)):
            breaks.append("resumed run differs from the uninterrupted one")
        return breaks

    # a save writes 8 files (7 parts and the manifest) before it points `latest` at them
    trials = [(rng.randint(6, 40), rng.randint(0, 7)) for _ in range(2)]
    breaks = [b for i, (step, write) in enumerate(trials) for b in twice(f"twice-{i}", step, write)]
    claim = gate.claim(
        "interrupt.second_signal",
        f"{len(trials)} runs (checkpoint every 5 steps) sent SIGINT after a random step and a "
        "second SIGINT just before a random one of the 8 file writes of the stop's own save: "
        "each stops at once (exit 130, one line), its latest checkpoint loads, and resumed it "
        "ends bitwise equal to the uninterrupted run",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="breaks",
        code=CODE,
    )
    claim.measure(len(breaks))
    gate.note(f"second-signal trials (step, file write of the save): {trials}; breaks: {breaks}")
    claim.control(
        "a handler that ignores the second signal",
        len(twice("twice-control", 12, 0, faults="train.graceful.second_signal_ignored")),
    )


EARLY_LINE = re.compile(
    r"^assay: stopped by (SIGINT|SIGTERM) before training started; nothing trained$"
)


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``folder``: its bytes and modification time."""
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_a_signal_before_the_first_step_ends_in_one_line_and_leaves_nothing(gate, setup):
    """Issue 52, rule 6: a stop signal while torch imported and the config loaded used to end
    the process by the signal, with no line; one while the command's modules imported printed
    a traceback, and one inside numpy's first import (made by torch's C code, which clears
    what it raised) was lost, the run trained on. The window runs from the command's imports
    to the first step: each phase gets each signal from inside it (the child chooses the
    moment, the signal is real)."""
    from support.interrupt.early_child import PHASES

    child = Path(__file__).parent / "support" / "interrupt" / "early_child.py"
    stopped = config(setup, "early-stopped")
    assert train(stopped, "--stop-at", "3").returncode == 0

    def early(phase: str, sig: signal.Signals, faults: str = "") -> list[str]:
        """How one signalled start broke the contract: exit, the one line, what it left."""
        if phase == "resume":
            path, extra = stopped, ("--resume", str(run_dir(stopped)))
            before = _snapshot(run_dir(stopped))
        else:
            path, extra = config(setup, f"early-{phase}-{sig.name}-{faults or 'product'}"), ()
        done = subprocess.run(
            [sys.executable, str(child), phase, sig.name, str(path), *extra],
            capture_output=True,
            text=True,
            check=False,
            env=defects.child_env(faults),
        )
        breaks = []
        if done.returncode != 128 + sig:
            breaks.append(f"exit {done.returncode}, expected {128 + sig}")
        match = EARLY_LINE.match(done.stderr.rstrip("\n"))
        if done.stderr.count("\n") != 1 or match is None or match.group(1) != sig.name:
            breaks.append(f"stderr {done.stderr[-200:]!r}")
        if done.stdout:
            breaks.append(f"stdout {done.stdout[:100]!r}")
        if phase == "resume" and _snapshot(run_dir(path)) != before:
            breaks.append("the resumed run's files changed")
        if phase != "resume" and run_dir(path).exists():
            breaks.append("a run folder was left")
        return [f"{phase} {sig.name}: {b}" for b in breaks]

    trials = [(phase, sig) for phase in PHASES for sig in SIGNALS]
    breaks = [b for phase, sig in trials for b in early(phase, sig)]
    claim = gate.claim(
        "interrupt.before_training",
        f"{len(trials)} `assay train` starts, each sent SIGINT or SIGTERM from inside one of "
        f"{len(PHASES)} phases before the first step ({', '.join(PHASES)}): each exits 128 + "
        "the signal with the one line 'stopped by ... before training started; nothing "
        "trained' and nothing on stdout, a new run leaves no folder, a resumed run no changed "
        "file",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="breaks",
        code=(*CODE, "assay.cli.dispatch", "assay.train.run.folder"),
    )
    claim.measure(len(breaks))
    gate.note(f"before-training trials: {len(trials)}; breaks: {breaks or 'none'}")
    unguarded = "train.graceful.stop_signals_unguarded"
    claim.control(
        f"SIGTERM in the config and model phases with the guard removed ({unguarded})",
        len(early("config", signal.SIGTERM, unguarded) + early("model", signal.SIGTERM, unguarded)),
    )
    for fault, phase in (
        ("train.graceful.deferral_ignored", "numpy_import"),
        ("cli.dispatch.early_stops_unguarded", "command_modules"),
    ):
        claim.control(
            f"SIGTERM in the {phase} phase with {fault} armed",
            len(early(phase, signal.SIGTERM, fault)),
        )
