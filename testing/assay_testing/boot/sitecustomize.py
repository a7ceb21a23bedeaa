"""Start-up hook for child processes: arm the defects named in ``ASSAY_FAULTS``, and inside a
gate session report the code the child ran.

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

if os.environ.get("ASSAY_FAULTS", "").strip():
    try:
        from assay_testing import defects

        # Held for the life of the process: a collected stack would close and disarm them.
        ARMED = defects.arm(os.environ["ASSAY_FAULTS"])
    except Exception as exc:  # any failure to arm must stop the child
        print(f"ASSAY_FAULTS: cannot arm {os.environ['ASSAY_FAULTS']!r}: {exc}", file=sys.stderr)
        os._exit(3)


if os.environ.get("ASSAY_BOOT_REPORTS") and os.environ.get("ASSAY_GATE_IMPORTS"):
    from assay.qualify.plugin.child_imports import report_at_exit

    report_at_exit()
