"""Measured code: the files of the project under test that each gate test executed.

A claim's declared ``code=`` is a floor, not the whole story: a claim that trains LoRA runs
``assay/adapters/lora.py`` whether or not it lists it. Each process that collects gate tests
runs them under coverage.py (the C tracer) and records, per test, every file of the project
under test that executed; the receipt lists them per claim as ``executed_files`` and staleness
compares declared ∪ executed against the working tree.

What counts as the project under test: the top-level import package(s) of the subject, named
by the ini ``gate_project`` or ``[project] name`` of the rootdir's pyproject.toml (``my-lib``
imports as ``my_lib``; an installed distribution adds its top-level packages). Measured by
package, so an editable checkout and an installed copy are measured alike, and a third-party
library under test (examples/toy-gates) is its own package directory. ``assay/qualify`` is
never measured: it is the instrument, not the subject, and every framework edit would
otherwise stale every record. Gate helper modules and tests are not the subject either.

What counts for which claim, so that any test order or xdist split records the same sets:

- a gate test's setup (function-scoped fixtures), call and teardown up to the ``gate``
  fixture's own teardown count for the claims that test declares (context ``t:<nodeid>``);
- importing the gate module and setting up its module-, class- or session-scoped fixtures
  count for every claim of the gate (context ``g:<gate>``), merged across all of the gate's
  tests by :func:`attach` where the receipt is assembled, whichever test ran them first.
  Module-level lines of a project module another gate module imported first in the same
  process are not re-run, so they count only where they ran (a limit of measuring).

Children: while a gate test is measured, ``COVERAGE_PROCESS_START`` names a private rc file
and :data:`ENV_CONTEXT` the current context; coverage's start-up ``.pth`` then measures every
Python child (torchrun ranks, ``python -m assay.cli``, measuring children) into a private
temporary directory under that context, read back once per data file. A child killed by a
signal writes nothing.

Timing stays clean: a gate module with ``GATE_COVERAGE = False`` (read with ``ast``) runs
without the tracer and records its declared files only, labelled ``declared``; so does a test
function whose body declares a ``kind="performance"`` claim. Timings taken inside a shared
module fixture still run under the tracer: such a gate sets ``GATE_COVERAGE = False``.

Imported only once a session collects a gate module; coverage itself loads on first use.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any, cast

import pytest

from assay.qualify.core.layout import GATE_MODULE
from assay.qualify.plugin.child_imports import CONTEXT_ENV as ENV_CONTEXT

RC_ENV = "COVERAGE_PROCESS_START"
FLAG = "GATE_COVERAGE"
OFF_ENV = "ASSAY_GATE_COVERAGE"  # "0": measure nothing (harness/coverage_cost.py's baseline)
INSTRUMENT = Path(__file__).resolve().parents[1]  # assay/qualify: never measured


def measured_tests(path: Path) -> tuple[bool, set[str]]:
    """(whether gate module ``path`` runs under coverage, names of its test functions that
    declare a ``kind="performance"`` claim and so run without it). ``GATE_COVERAGE = False``
    at module level turns measuring off for the whole module. Read with ``ast``, never run."""
    try:
        tree = ast.parse(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError):
        return True, set()
    measured = True
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            named = any(isinstance(t, ast.Name) and t.id == FLAG for t in targets)
            if named and isinstance(node.value, ast.Constant) and node.value.value is False:
                measured = False
    timed = {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.name.startswith("test")
        and any(
            isinstance(k.value, ast.Constant) and k.arg == "kind" and k.value.value == "performance"
            for call in ast.walk(node)
            if isinstance(call, ast.Call)
            for k in call.keywords
        )
    }
    return measured, timed


def read_contexts(item: pytest.Item) -> tuple[str | None, str | None]:
    """(test context, gate context) reads of a gate test are noted under, traced or not."""
    match = GATE_MODULE.match(item.path.name)
    if match is None:
        return None, None
    return f"t:{item.nodeid}", f"g:{match.group(1)}"


def subject_packages(root: Path, override: str | None) -> list[str]:
    """Import names of the project under test: its normalised name, plus the top-level
    packages of its installed distribution when there is one."""
    from assay.qualify.plugin.environment import describe_subject

    name = describe_subject(root, override)["name"]
    if not name:
        return []
    names = [re.sub(r"[-.]+", "_", name), *tree_packages(root)]
    try:
        from importlib.metadata import packages_distributions

        names += sorted(p for p, dists in packages_distributions().items() if name in dists)
    except Exception:  # metadata scans fail on broken installs; the name alone still measures
        pass
    return sorted(set(names))


def tree_packages(root: Path) -> list[str]:
    """The top-level packages of a src layout (``src/<name>/__init__.py``): the project's own
    code even when its import name is not its distribution's (``scikit-learn``/``sklearn``)."""
    src = Path(root) / "src"
    if not src.is_dir():
        return []
    return sorted(p.parent.name for p in src.glob("*/__init__.py") if p.parent.name.isidentifier())


class Measure:
    """One process's tracer for gate tests (a pytest plugin object registered by
    :mod:`assay.qualify.plugin.hooks` when a gate module is collected)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._modules: dict[Path, tuple[bool, set[str]]] = {}
        self._cov: Any = None
        self._failed = os.environ.get(OFF_ENV) == "0"  # off: every claim records declared
        self._dir: Path | None = None
        self._saved: dict[str, str | None] = {}
        self._running = False
        self._current: tuple[str | None, str | None] = (None, None)  # (test ctx, gate ctx)
        self._reading: tuple[str | None, str | None] = (None, None)  # the same, traced or not
        self._child: dict[str, set[str]] = {}
        self._read: set[str] = set()
        self._sha: dict[str, str] = {}
        self._tracer: Any = None  # the trace function coverage installed for this thread
        self._active: str | None = None  # the context being traced now
        self._lost: set[str] = set()  # contexts whose code replaced or removed that tracer

    def _module(self, path: Path) -> tuple[bool, set[str]]:
        if path not in self._modules:
            self._modules[path] = measured_tests(path)
        return self._modules[path]

    def contexts(self, item: pytest.Item) -> tuple[str | None, str | None]:
        """(test context or None when the test runs untraced, gate context or None when the
        whole gate module runs untraced) of a gate test item; (None, None) for other items."""
        match = GATE_MODULE.match(item.path.name)
        if match is None or self._failed:
            return None, None
        measured, timed = self._module(item.path)
        if not measured:
            return None, None
        function = getattr(item, "originalname", None) or item.name
        test = None if function in timed else f"t:{item.nodeid}"
        return test, f"g:{match.group(1)}"

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Generator[None, Any, Any]:
        match = GATE_MODULE.match(collector.path.name) if collector.path else None
        if not isinstance(collector, pytest.Module) or match is None:
            return (yield)
        # importing the gate module counts for every claim of the gate
        gate = f"g:{match.group(1)}"
        self._enter(gate if self._module(collector.path)[0] else None, gate)
        try:
            return (yield)
        finally:
            self._enter(None, None)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, Any, Any]:
        self._current = self.contexts(item)
        self._reading = read_contexts(item)
        self._enter(self._current[0], self._reading[0])
        return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: Any, request: Any) -> Generator[None, Any, Any]:
        test, gate = self._current
        read_test, read_gate = self._reading
        if read_gate is None or fixturedef.scope == "function":
            return (yield)
        # shared fixtures count for the whole gate, whichever test set them up
        self._enter(gate, read_gate)
        try:
            return (yield)
        finally:
            self._enter(test, read_test)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, Any, Any]:
        try:
            return (yield)
        finally:
            self._current = (None, None)
            self._reading = (None, None)
            self._enter(None, None)

    def _enter(self, context: str | None, reading: str | None) -> None:
        """Trace under ``context`` from now on (children too), or pause when None; note the
        files opened under ``reading`` (:mod:`assay.qualify.plugin.reads`), traced or not, and
        let children started now report under it."""
        from assay.qualify.plugin import reads

        reads.install()
        reads.switch(None)  # what the instrument reads itself (its settings) is not the claim's
        self._check_tracer()
        if context is None and self._running:
            self._cov.stop()
            self._running = False
        if context is not None and self._start():
            if self._running and sys.gettrace() is not self._tracer:
                self._cov.stop()  # a test removed the tracer: put it back for the next one
                self._running = False
            if not self._running:
                self._cov.start()
                self._running = True
                self._tracer = sys.gettrace()
            self._cov.switch_context(context)
            # _start() returned True, so it made the folder
            self._set_env(RC_ENV, str(cast(Path, self._dir) / "child.rc"))
        else:
            self._restore_env(RC_ENV)  # children run untraced too
        self._active = context if self._running else None
        if reading is None:
            self._restore_env()
        else:
            self._set_env(ENV_CONTEXT, reading)
        reads.switch(reading)

    def _check_tracer(self) -> None:
        """Note the context being traced as unmeasured when its code replaced or removed the
        coverage tracer (``sys.settrace``): what coverage holds for it is not what ran."""
        if self._running and self._active is not None and sys.gettrace() is not self._tracer:
            self._lost.add(self._active)

    def _set_env(self, key: str, value: str) -> None:
        self._saved.setdefault(key, os.environ.get(key))
        os.environ[key] = value

    def _restore_env(self, only: str | None = None) -> None:
        """Put back the variables set since the last restore (all, or ``only`` that one)."""
        for key in [only] if only else list(self._saved):
            if key not in self._saved:
                continue
            value = self._saved.pop(key)
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    def _start(self) -> bool:
        """Create the tracer and the children's rc file once; False if coverage is missing."""
        if self._cov is not None or self._failed:
            return not self._failed
        try:
            import coverage
        except ImportError:
            self._failed = True
            return False
        packages = subject_packages(self.config.rootpath, self.config.getini("gate_project"))
        omit = [f"{INSTRUMENT}/*"]
        self._dir = Path(tempfile.mkdtemp(prefix="assay-gate-coverage-"))
        (self._dir / "child.rc").write_text(
            "[run]\n"
            f"data_file = {self._dir / 'child.cov'}\n"
            "parallel = true\n"
            f"context = ${{{ENV_CONTEXT}}}\n"
            f"source_pkgs = {', '.join(packages) or '__assay_no_subject__'}\n"
            f"omit = {omit[0]}\n"
            "disable_warnings = module-not-imported, no-data-collected, module-not-measured,"
            " couldnt-parse, no-ctracer\n",
            "utf-8",
        )
        self._cov = coverage.Coverage(
            data_file=None,
            config_file=False,
            source_pkgs=packages or ["__assay_no_subject__"],
            omit=omit,
        )
        for warning in ("module-not-imported", "no-data-collected", "module-not-measured"):
            self._cov.config.disable_warnings.append(warning)
        return True

    def report(
        self, item: pytest.Item, display: Callable[[Path], str], children: Any = None
    ) -> dict[str, Any]:
        """What ``item`` executed so far, for its fragment: ``{"source": "declared"}`` when it
        ran untraced, else ``{"source": "measured", "test": [...], "gate": [...]}``, each a
        sorted list of ``{"path", "sha256"}`` with paths shown by ``display``; and, traced or
        not, ``"read"``: the paths its test and its gate opened for reading, children's
        included (``{"test": [...], "gate": [...]}``, absolute, unfiltered); ``children`` is the
        process's :class:`assay.qualify.plugin.child_imports.ChildImports`, if any."""
        from assay.qualify.plugin import reads

        read_test, read_gate = read_contexts(item)
        opened: dict[str, Any] = {
            key: sorted(reads.read_under(c) | (children.reads(c) if children else set()))
            for key, c in (("test", read_test), ("gate", read_gate))
        }
        contexts = (("test", read_test), ("gate", read_gate))
        opened["modules"] = {key: sorted(reads.loaded_under(c)) for key, c in contexts}
        shown = {Path(m): display(Path(m)) for m in reads.read_at_import()}
        opened["at_import"] = {  # the tree's modules: each claim relying on one gets its reads
            shown[Path(m)]: sorted(paths)
            for m, paths in reads.read_at_import().items()
            if not Path(shown[Path(m)]).is_absolute()
        }
        test, gate = self.contexts(item)
        self._check_tracer()
        if test is None or gate is None or self._cov is None or {test, gate} & self._lost:
            return {"source": "declared", "read": opened}
        data = self._cov.get_data()
        self._read_children()
        found = {}
        for key, context in (("test", test), ("gate", gate)):
            data.set_query_contexts([f"^{re.escape(context)}$"])
            files = {f for f in data.measured_files() if data.lines(f)}
            files |= self._child.get(context, set())
            found[key] = self._entries(files, display)
        data.set_query_contexts(None)
        return {"source": "measured", **found, "read": opened}

    def _entries(self, files: set[str], display: Callable[[Path], str]) -> list[dict[str, str]]:
        from assay.qualify.core.source import file_sha256

        entries = {}
        for name in files:
            path = Path(name)
            if not path.is_file():
                continue
            if name not in self._sha:  # hashed once: the bytes that were loaded, not later edits
                self._sha[name] = file_sha256(path)
            entries[display(path)] = self._sha[name]
        return [{"path": p, "sha256": entries[p]} for p in sorted(entries)]

    def _read_children(self) -> None:
        """Fold each finished child's data file into the per-context sets, once per file."""
        if self._dir is None:
            return
        from coverage import CoverageData

        for path in sorted(self._dir.glob("child.cov.*")):
            if path.name in self._read:
                continue
            try:
                data = CoverageData(basename=str(path))
                data.read()
                for context in data.measured_contexts():
                    data.set_query_contexts([f"^{re.escape(context)}$"])
                    files = {f for f in data.measured_files() if data.lines(f)}
                    self._child.setdefault(context, set()).update(files)
            except Exception:  # still being written, or torn: try again at the next test
                continue
            self._read.add(path.name)

    def close(self) -> None:
        """Stop tracing, restore the environment and remove the private data directory."""
        self._enter(None, None)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
