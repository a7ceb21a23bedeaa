"""Start-up hook for child processes: arm the defects named in ``ASSAY_FAULTS``.

Only :func:`assay_testing.defects.child_env` puts this folder on ``PYTHONPATH``; Python imports
``sitecustomize`` from it at start-up, before the child's own code runs. A defect that cannot be
armed stops the child (exit 3): Python would otherwise report the error and run unarmed.
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
