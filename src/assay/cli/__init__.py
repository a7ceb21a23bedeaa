"""The ``assay`` command line: the command table (:mod:`assay.cli.commands`), its parsing and
dispatch (:mod:`assay.cli.dispatch`), and one module per command."""

import os

if os.environ.get("ASSAY_GATE_IMPORTS"):  # a gate test's child: report the code it ran
    from assay.qualify.plugin.child_imports import report_at_exit

    report_at_exit()

from assay.cli.dispatch import main

__all__ = ["main"]
