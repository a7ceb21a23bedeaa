"""What one gate test declared, taken when it ends: its claims and the rest of its fragment,
with the code it executed, the modules it relied on, the files it read and how it ended.

Taken when the ``gate`` fixture finishes, the fragment rides on the test's teardown report (so
it crosses from xdist workers). A test interrupted in its own code (``KeyboardInterrupt``,
``pytest.exit``) never reaches that teardown with a report, so its fragment is handed to the
session at once, with the interrupt as a failure: a claim it had already measured is never
dropped.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

TAKEN = pytest.StashKey[bool]()  # the fragment of this test has been taken
STARTED = pytest.StashKey[float]()


def take(item: pytest.Item, gate: Any, outcome: str, children: Any, measure: Any) -> dict[str, Any]:
    """The fragment of ``item``'s ``gate`` declarations; closes the gate (later declarations
    are refused, loudly) and notes what the test executed, relied on and read."""
    from assay.qualify.plugin import reads
    from assay.qualify.plugin.paths import display_path

    reads.switch(None)  # the test's code is done: what the framework reads now is not its
    if children is not None:  # what this test's (and its gate's) children imported
        from assay.qualify.plugin.executed import read_contexts

        gate.child_imports(children.names(read_contexts(item)))
    fragment: dict[str, Any] = gate.fragment()
    gate.close()
    item.stash[TAKEN] = True
    root = item.config.rootpath
    if measure is not None:  # the files of the project under test this test executed
        fragment["executed"] = measure.report(item, lambda path: display_path(root, path), children)
    fragment["outcome"] = outcome
    fragment["duration_s"] = time.perf_counter() - item.stash.get(STARTED, time.perf_counter())
    # collection order is the same in every xdist worker, so it orders claims stably
    items = item.session.items
    fragment["order"] = items.index(item) if item in items else len(items)
    return fragment


def keep_interrupted(
    item: pytest.Item, gate: Any, error: BaseException, state: Any, children: Any, measure: Any
) -> None:
    """Hand the fragment of a test interrupted in its own code straight to the session that
    writes receipts (``state``; None in an xdist worker, whose controller sees it crash)."""
    if state is None or item.stash.get(TAKEN, False):
        return
    from assay.qualify.core.layout import gate_of
    from assay.qualify.plugin.session import plain_nodeid

    fragment = take(item, gate, "failed", children, measure)
    name = gate_of(item.nodeid)
    state.fragments.setdefault(name, []).append(fragment)
    message = f"interrupted: {type(error).__name__}: {error}".strip()[:500]
    failure = {"nodeid": plain_nodeid(item.nodeid), "when": "call", "message": message}
    state.failures.setdefault(name, []).append({**failure, "verdict": False})
