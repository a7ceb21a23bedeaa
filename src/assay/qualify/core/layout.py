"""Where a project keeps what the framework reads and writes: its gate modules
(``gates/gate_<name>.py``) and its receipts (``records/receipts/<gate>/``), and what a gate's
name may be. Standard library only: the pytest plugin reads these at start-up."""

from __future__ import annotations

import re

# the default receipts folder, relative to the project root (POSIX)
RECEIPTS_FOLDER = "records/receipts"
# a gate's name, which is also its folder under the receipts folder
GATE_NAME = re.compile(r"^[A-Za-z0-9_]+$")
# a gate module's file name, the gate's name its group; ``gate_README.py`` is the gates' index
GATE_MODULE = re.compile(r"^gate_(?!(?i:readme)\.py$)([A-Za-z0-9_]+)\.py$")


def gate_file(gate: str) -> str:
    """The gate's module relative to the project root (POSIX): ``gates/gate_<gate>.py``."""
    return f"gates/gate_{gate}.py"


def gate_of(nodeid: str) -> str | None:
    """The gate a test node id (or a module's path) belongs to, from its ``gate_<name>.py``
    module; None for any other file."""
    match = GATE_MODULE.match(nodeid.split("::", 1)[0].rsplit("/", 1)[-1])
    return match.group(1) if match else None
