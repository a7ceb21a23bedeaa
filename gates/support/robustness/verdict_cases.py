"""Issue 52, rule 5 (not a gate module): a gate's verdict does not depend on what else ran in
its process. A throwaway project of four gates is run by real pytest processes, each gate
alone and all of them together in several orders, on one worker and on two, and every test's
outcome is compared across the runs.

The gates are built so that a process-wide measure would leak between them:

- ``gate_a`` declares module ``shared`` that only ``gate_b`` imports (stale everywhere);
- ``gate_b`` imports ``shared`` and starts a child that imports ``childonly`` and reports;
- ``gate_c`` declares ``childonly`` but starts no child (stale everywhere);
- ``gate_d`` declares ``childonly`` and starts its own reporting child (passes everywhere).

Under a check that reads the process's imports, ``gate_a`` and ``gate_c`` pass when
``gate_b`` ran before them in the same process and error when run alone.

``gate_b`` and ``gate_d`` both import ``toylib.core`` (the project under test, ini
``gate_project``) and ``helpers.core`` (a package beside the gate modules, not the subject)
inside their test: each package's ``__init__`` runs under whichever test imports it first and is
found loaded by the other, so a claim's recorded ``import_files`` that followed what ran or
loaded under it would differ by order.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

GATES = ("a", "b", "c", "d")
_HEADER = "from assay.qualify import Threshold\nimport subprocess, sys\n\n"
_CLAIM = """
    c = gate.claim("{gate}.x", "holds", kind="correctness", threshold=Threshold("<=", 1),
                   code={code})
    c.measure(0)
    c.control("broken", 2)
"""
_CHILD = (
    '    subprocess.run([sys.executable, "-c", "from assay.qualify import report_at_exit; '
    'report_at_exit(); import childonly"], check=True)\n'
)
_TOYLIB = "    import toylib.core\n    import helpers.core\n"
_BODIES = {
    "a": ("", '["shared"]'),
    "b": ("    import shared\n" + _TOYLIB + _CHILD, '["shared"]'),
    "c": ("", '["childonly"]'),
    "d": (_TOYLIB + _CHILD, '["childonly"]'),
}
# the gates importing both packages, and the package files each claim's import_files must list
IMPORTERS = ("b", "d")
PACKAGE_INITS = ("helpers/__init__.py", "toylib/__init__.py")
# the controls of the import lists, each injected into a pair of runs (in order, reversed)
IMPORT_CONTROLS = {
    "qualify.plugin.imports.loaded_first_left_out": "a module whose top level ran under the "
    "test left out of its import_files",
    "qualify.plugin.imports.beside_scripts_unresolved": "the imports a gate module makes from "
    "its own folder left unresolved",
}
# each test of every run, in a seeded order when ASSAY_VERDICT_ORDER is set (xdist workers
# collect alike, so every worker agrees on the order)
_ORDER = """
import os, random

def pytest_collection_modifyitems(config, items):
    seed = os.environ.get("ASSAY_VERDICT_ORDER")
    if seed:
        random.Random(int(seed)).shuffle(items)
"""
BOOT = Path(__file__).resolve().parents[3] / "testing" / "assay_testing" / "boot"
# the controls, each injected from outside into every run of a pair that shows it: the
# declared modules checked against the process's imports (gate_a passes after gate_b), and
# every child's report counted for every gate (gate_c passes after gate_b's child)
CONTROLS = {
    "qualify.plugin.gate.reach_from_process": ("a alone", "all reversed, -n 1"),
    "qualify.plugin.child_imports.reports_for_every_gate": ("c alone", "all, -n 1"),
}


def fault_env(fault: str) -> dict[str, str]:
    """The environment that arms ``fault`` in each run (assay_testing's start-up hook)."""
    return {"ASSAY_FAULTS": fault, "PYTHONPATH": str(BOOT)}


_OUTCOME = re.compile(r"^(PASSED|FAILED|ERROR) (gate_[a-d]\.py::test_[a-d])", re.MULTILINE)


def write_project(root: Path) -> Path:
    """The throwaway project of four gates under ``root``; returns it."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "shared.py").write_text("VALUE = 1\n")
    (root / "childonly.py").write_text("VALUE = 1\n")
    for package in ("toylib", "helpers"):
        (root / package).mkdir(exist_ok=True)
        (root / package / "__init__.py").write_text("LIMIT = 3\n")
        (root / package / "core.py").write_text(f"from {package} import LIMIT\n\nVALUE = LIMIT\n")
    (root / "conftest.py").write_text(_ORDER)
    (root / "pytest.ini").write_text("[pytest]\ngate_project = toylib\n")
    for gate, (body, code) in _BODIES.items():
        test = f"def test_{gate}(gate):\n{body}" + _CLAIM.format(gate=gate, code=code)
        (root / f"gate_{gate}.py").write_text(_HEADER + textwrap.dedent(test))
    return root


def _receipts(root: Path, label: str) -> Path:
    """The receipts folder of the run called ``label``: one per run, so each run's receipts
    can be read apart."""
    return root / "receipts" / re.sub(r"[^a-z0-9]+", "-", label)


def _outcomes(
    root: Path, label: str, gates: tuple[str, ...], workers: int, seed: int | None, env: dict
) -> dict:
    """test -> 'passed' or 'errored' for one real pytest run of ``gates`` in that order."""
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "-q"]
    argv += ["-p", "no:randomly", "--gate-device=cpu", f"--gate-receipts={_receipts(root, label)}"]
    argv += ["-p", "no:xdist"] if workers == 1 else ["-n", str(workers)]
    argv += [f"gate_{g}.py" for g in gates]
    inherited = _path(os.environ.get("PYTHONPATH", ""))  # a fault injected into this process
    search = [str(root), *_path(env.get("PYTHONPATH", "")), *inherited]
    run_env = {**os.environ, **env, "PYTHONPATH": os.pathsep.join(search)}
    run_env.pop("ASSAY_VERDICT_ORDER", None)
    run_env.pop("COVERAGE_PROCESS_START", None)  # the run starts its own measuring
    run_env.pop("ASSAY_GATE_COVERAGE", None)  # ... even under a regression run that skips it
    if seed is not None:
        run_env["ASSAY_VERDICT_ORDER"] = str(seed)
    done = subprocess.run(argv, cwd=root, env=run_env, capture_output=True, text=True, timeout=300)
    found: dict[str, str] = {}
    for word, test in _OUTCOME.findall(done.stdout):
        # a test that passed its call and errored at teardown prints both: the error decides
        if found.get(test) != "errored":
            found[test] = "passed" if word == "PASSED" else "errored"
    return found


def _path(value: str) -> list[str]:
    """The entries of a PYTHONPATH value, absolute: the runs start in the project folder."""
    return [os.path.abspath(p) for p in value.split(os.pathsep) if p]


def runs(seeds: tuple[int, ...]) -> list[tuple[str, tuple[str, ...], int, int | None]]:
    """(label, gates in order, workers, shuffle seed): every gate alone, all together in order
    and reversed on one worker, in order on two, and shuffled by each seed on two."""
    planned = [(f"{g} alone", (g,), 1, None) for g in GATES]
    planned.append(("all, -n 1", GATES, 1, None))
    planned.append(("all reversed, -n 1", GATES[::-1], 1, None))
    planned.append(("all, -n 2", GATES, 2, None))
    planned += [(f"all shuffled ({seed}), -n 2", GATES, 2, seed) for seed in seeds]
    return planned


def outcomes(root: Path, planned: list, env: dict | None = None) -> dict[str, dict[str, str]]:
    """test -> run label -> outcome ('passed', 'errored', or 'missing' when the run printed
    none), over every run of ``planned`` on a fresh project under ``root``; ``env`` is added
    to each run's environment (a fault injected from outside, for the control)."""
    project = write_project(root)
    table: dict[str, dict[str, str]] = {f"gate_{g}.py::test_{g}": {} for g in GATES}
    for label, gates, workers, seed in planned:
        found = _outcomes(project, label, gates, workers, seed, env or {})
        for gate in gates:
            test = f"gate_{gate}.py::test_{gate}"
            table[test][label] = found.get(test, "missing")
    return table


def differing(table: dict[str, dict[str, str]]) -> list[str]:
    """Tests whose outcome is not the same in every run, each with its outcome per run."""
    return [
        f"{test}: " + ", ".join(f"{label}={outcome}" for label, outcome in by_run.items())
        for test, by_run in table.items()
        if len(set(by_run.values())) > 1
    ]


# what each gate's declarations call for: a stale declaration errors its test
EXPECTED = {"a": "errored", "b": "passed", "c": "errored", "d": "passed"}


def unexpected(table: dict[str, dict[str, str]]) -> list[str]:
    """Runs in which a test's outcome is not :data:`EXPECTED`."""
    return [
        f"{test} in {label}: {outcome}, expected {EXPECTED[test[5]]}"
        for test, by_run in table.items()
        for label, outcome in by_run.items()
        if outcome != EXPECTED[test[5]]
    ]


def import_lists(root: Path, planned: list) -> dict[str, dict[str, tuple[str, ...] | None]]:
    """gate -> run label -> the ``import_files`` its claim recorded in that run (None when the
    run left no receipt of it), for the :data:`IMPORTERS` over the runs :func:`outcomes` made
    under ``root``."""
    table: dict[str, dict[str, tuple[str, ...] | None]] = {g: {} for g in IMPORTERS}
    for label, gates, _workers, _seed in planned:
        for gate in set(gates) & set(IMPORTERS):
            files = sorted((_receipts(root, label) / gate).glob("*.json"))
            claims = [c for f in files for c in json.loads(f.read_text("utf-8"))["claims"]]
            lists = {tuple(e["path"] for e in c.get("import_files", [])) for c in claims}
            table[gate][label] = lists.pop() if len(lists) == 1 else None
    return table


def imports_differing(table: dict[str, dict[str, tuple[str, ...] | None]]) -> list[str]:
    """Gates whose recorded ``import_files`` are not the same in every run, or miss a package
    every one of them imported (:data:`PACKAGE_INITS`)."""
    wrong = []
    for gate, by_run in table.items():
        if len(set(by_run.values())) > 1 or any(
            lists is None or not set(PACKAGE_INITS) <= set(lists) for lists in by_run.values()
        ):
            listed = {
                k: None if v is None else sorted(set(PACKAGE_INITS) & {*v})
                for k, v in by_run.items()
            }
            shown = ", ".join(f"{label}={found}" for label, found in listed.items())
            wrong.append(f"gate_{gate} lists of {PACKAGE_INITS} per run: {shown}")
    return wrong
