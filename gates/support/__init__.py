"""What the gates use that is not a gate: ``gates/`` holds only ``gate_<gate>.py`` and
``conftest.py``; everything else a gate needs lives here, one folder per gate.

``support/<gate>/`` holds what gate ``<gate>`` (``gate_<gate>.py``) alone owns, so a gate
author sees a gate's whole world in its module and that folder. A folder shared by a gate family
(gate-exports uses gate-adapters' helpers, gate-quality gate-dynamics') is its first owner's,
and each module's docstring names the other users. Each module in it is named for its role:

- ``helpers``: what the gate module imports and calls in its own process (subjects, drivers,
  measurements, notes, constants);
- ``reference``: an independent implementation, written from SPEC or assay's documented
  definitions without calling the code under test, that the gate compares assay against;
- ``child``: a script the gate runs as a separate process, by path
  (``Path(__file__).parent / "support" / "<gate>" / "child.py"``); it imports nothing from
  here;
- ``cases``: the inputs the gate goes through, as data or as code that builds them.

When one module covers only one topic of its gate, or a gate has several modules of one role,
the topic comes first: ``<topic>_<role>`` (``adapters/parity_helpers``,
``faults/tamper_cases``). A module that serves any gate rather than one sits at this folder's
top and is named for what it does (``moved_claims``, ``plain_cell``, ``threshold_moves``).

Gate modules import these as ``from support.<gate>.<module> import ...``: pytest puts
``gates/`` on ``sys.path`` when it collects ``gates/conftest.py`` or a gate module (its default
``prepend`` import mode; ``gates/`` has no ``__init__.py``); code outside the gates
(tests/qualify, harness) inserts ``gates/`` itself. A claim's ``code=`` names a module here by
that dotted name (``"support.nf4.helpers"``) and a child by its path. pytest collects only
``gate_*.py`` and ``test_*.py``, so nothing here is collected as a test.
"""
