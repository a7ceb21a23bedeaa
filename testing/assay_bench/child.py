"""Run one ``python -m assay_bench.<module>`` measurement in a fresh interpreter and read the
JSON line it prints last, so nothing another subject built, compiled or cached is counted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any


def json_child(
    module: str,
    args: list[str],
    *,
    what: str,
    timeout: float = 900,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The last stdout line of ``python -m module *args`` (``env`` added to this process's
    environment) as JSON; RuntimeError naming ``what``, with the child's stderr, otherwise."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
    )
    lines = done.stdout.strip().splitlines()
    try:
        if done.returncode == 0 and lines:
            return json.loads(lines[-1])
    except json.JSONDecodeError:
        pass
    raise RuntimeError(
        f"{what} failed (exit {done.returncode}, last stdout line "
        f"{lines[-1][:200] if lines else 'none'!r}): {done.stderr.strip()[-400:]}"
    )
