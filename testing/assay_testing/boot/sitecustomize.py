"""Start-up hook for child processes: arm the defects named in ``ASSAY_FAULTS`` and the mutant
named in ``ASSAY_MUTANT``, and inside a gate session report the code the child ran.

Only :func:`assay_testing.defects.child_env` and :func:`assay_testing.defects.reporting_children`
put this folder on ``PYTHONPATH``; Python imports ``sitecustomize`` from it at start-up, before
the child's own code runs. A defect that cannot be armed stops the child (exit 3): Python would
otherwise report the error and run unarmed. A child whose entry point does not report its
imports itself (``python -m assay.memory.measure``) reports them from here when
``reporting_children`` asks (``ASSAY_BOOT_REPORTS``), so a gate claim that lists the code such a
child runs is checked against what it really ran.
"""

import os
import sys

_MUTANT = os.environ.get("ASSAY_MUTANT", "").strip()
_FAULTS = ",".join(
    name
    for name in os.environ.get("ASSAY_FAULTS", "").split(",")
    if name.strip() and name.strip().partition("=")[0] != _MUTANT
)
if _MUTANT or _FAULTS:
    try:
        from assay_testing import defects

        # Held for the life of the process: a collected stack would close and disarm them. The
        # mutant under measurement first; a fault naming it again is armed once.
        ARMED = defects.arm(",".join(filter(None, [_MUTANT, _FAULTS])))
    except Exception as exc:  # any failure to arm must stop the child
        print(
            f"ASSAY_FAULTS/ASSAY_MUTANT: cannot arm {_MUTANT or _FAULTS!r}: {exc}", file=sys.stderr
        )
        os._exit(3)
    if _MUTANT:
        import contextlib

        _inject = defects.inject

        @contextlib.contextmanager
        def _inject_unless_armed(name, setting="1"):
            # A gate control that arms the mutant's own defect finds it armed for the whole
            # process already: patching it twice would fail (its text is gone).
            if name == _MUTANT:
                yield
            else:
                with _inject(name, setting):
                    yield

        defects.inject = _inject_unless_armed


if os.environ.get("ASSAY_BOOT_REPORTS") and os.environ.get("ASSAY_GATE_IMPORTS"):
    from assay.qualify.plugin.child_imports import report_at_exit

    report_at_exit()
