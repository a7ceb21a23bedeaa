"""Complete means complete: a gate run stands for its gate only when every test its file
defines ran to a verdict.

Whether a run is partial is decided from what pytest did, never from the command line:

* **defined**: the test functions and methods the gate file's source defines (read with
  ``ast``; names matching ``test*`` or the ini ``python_functions``, in classes matching
  ``Test*`` or ``python_classes``). One that no collected item comes from was never collected:
  an ini pattern, a conftest ``pytest_pycollect_makeitem`` or a plugin left it out;
* **collected**: the items in the gate module's own collect reports, as the module produced
  them (read innermost, before ``--lf`` or a plugin filters the report);
* **selected**: the items left after ``pytest_collection_modifyitems`` (``-k``, ``-m`` from any
  source, ``--deselect``, ``--lf``, ``--sw``, a conftest or a plugin);
* **ran to a verdict**: a call phase was reported, or setup reported a skip or a failure.

Anything defined but not collected, collected but not selected, or selected but without a
verdict (an early stop, an interrupt, a crash, ``--setup-only``) makes the run partial, and the
reason names what was lost.
"""

from __future__ import annotations

import ast
import fnmatch
from collections.abc import Iterable
from pathlib import Path
from typing import cast

import pytest


def _matches(name: str, patterns: Iterable[str], default: str) -> bool:
    """pytest's rule for ``python_functions`` / ``python_classes``: a prefix, or a glob."""
    for pattern in [default, *patterns]:
        has_glob = any(ch in pattern for ch in "*?[")
        if (fnmatch.fnmatch(name, pattern)) if has_glob else name.startswith(pattern):
            return True
    return False


def defined_tests(path: Path, config: pytest.Config | None = None) -> set[str]:
    """``Class::function`` (or ``function``) for every test the gate file defines; empty
    when the file cannot be parsed (its collection error is reported on its own).

    A test pytest cannot collect is still defined, so it shows as never collected: a method of
    a test class with a constructor, and a test shadowed by a later one of the same name
    (listed as ``name (defined again below)``, a key no collected item has)."""
    functions = list(config.getini("python_functions")) if config is not None else []
    classes = list(config.getini("python_classes")) if config is not None else []
    try:
        tree = ast.parse(Path(path).read_text("utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return set()
    found: set[str] = set()

    def define(key: str) -> None:
        found.add(f"{key} (defined again below)" if key in found else key)

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if _matches(node.name, functions, "test"):
                define(node.name)
        elif isinstance(node, ast.ClassDef) and _matches(node.name, classes, "Test"):
            for inner in node.body:
                is_function = isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef))
                # mypy does not narrow through is_function; .name is read only after it holds
                function = cast("ast.FunctionDef | ast.AsyncFunctionDef", inner)
                if is_function and _matches(function.name, functions, "test"):
                    define(f"{node.name}::{function.name}")
    return found


def definition_key(nodeid: str) -> str:
    """The defining ``Class::function`` of a node id: path and parameters dropped."""
    parts = nodeid.split("::")[1:]
    if not parts:
        return ""
    parts[-1] = parts[-1].split("[", 1)[0]
    return "::".join(parts)


def module_file(nodeid: str) -> str:
    """The module part of a node id."""
    return nodeid.split("::", 1)[0]


def never_collected(root: Path, nodeids: Iterable[str], config: pytest.Config) -> list[str]:
    """Tests a gate's files define that no item in ``nodeids`` (collected or lost) comes from,
    as ``file::name``, sorted."""
    nodeids = list(nodeids)
    keys = {definition_key(n) for n in nodeids}
    missing = []
    for file in sorted({module_file(n) for n in nodeids}):
        for name in sorted(defined_tests(Path(root) / file, config) - keys):
            missing.append(f"{file}::{name}")
    return missing


def partial_reasons(
    *,
    selected: set[str],
    lost: set[str],
    never: list[str],
    without_verdict: set[str],
    options: str,
) -> list[str]:
    """The reasons a gate's run does not stand for the gate (empty: it is complete).

    ``selected``: the gate's items that were to run; ``lost``: collected items left out of
    the run; ``never``: defined tests never collected; ``without_verdict``: selected items
    that reached no verdict; ``options``: the selection options pytest was given, shown
    beside the count (they do not decide anything)."""
    reasons = []
    if lost:
        total = len(lost) + len(selected)
        shown = f" ({options})" if options else ""
        reasons.append(f"{len(lost)} of its {total} collected tests were left out{shown}")
    if never:
        names = ", ".join(n.rsplit("/", 1)[-1] for n in never[:3])
        more = f" and {len(never) - 3} more" if len(never) > 3 else ""
        reasons.append(f"{len(never)} defined tests were never collected: {names}{more}")
    if without_verdict:
        reasons.append(
            f"stopped early: {len(without_verdict)} of its {len(selected)} tests did not run "
            "to a verdict"
        )
    return reasons
