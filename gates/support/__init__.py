"""What the gates use that is not a gate: ``gates/`` holds only ``gate_<gate>.py`` and
``conftest.py``; everything else a gate needs lives here, named ``<gate>_<role>``.

``<gate>`` is the gate that owns the module (``gate_<gate>.py``); a module shared by a gate
family (gate-exports uses gate-adapters' helpers, gate-quality gate-dynamics') keeps its first
owner's name, and its docstring names the other users. ``<role>`` is one of:

- ``helpers``: what the gate module imports and calls in its own process (subjects, drivers,
  measurements, notes, constants);
- ``reference``: an independent implementation, written from SPEC or assay's documented
  definitions without calling the code under test, that the gate compares assay against;
- ``child``: a script the gate runs as a separate process, by path
  (``Path(__file__).parent / "support" / "<gate>_child.py"``); it imports nothing from here;
- ``cases``: the inputs the gate goes through, as data or as code that builds them.

When one module covers only one topic of its gate, or a gate has several modules of one role,
a topic goes between the two: ``<gate>_<topic>_<role>`` (``adapters_parity_helpers``,
``faults_tamper_cases``). A module that serves any gate rather than one is named for what it
does (``moved_claims``).

Gate modules import these as ``from support.<module> import ...``: pytest puts ``gates/`` on
``sys.path`` when it collects ``gates/conftest.py`` or a gate module (its default ``prepend``
import mode; ``gates/`` has no ``__init__.py``); code outside the gates (tests/qualify,
harness) inserts ``gates/`` itself. A claim's ``code=`` names a module here by that dotted name
(``"support.nf4_helpers"``) and a child by its path. pytest collects only ``gate_*.py`` and
``test_*.py``, so nothing here is collected as a test.
"""
