"""``python -m assay_testing.defects NAME[,NAME=VALUE...] -- COMMAND...``: run COMMAND (and every
Python process it starts) with the named defects armed; ``--list`` prints the catalog.

Exit status is COMMAND's; an unknown defect name exits 2 before anything runs.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from assay_testing import defects


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    command: list[str] = []
    if "--" in args:
        cut = args.index("--")
        args, command = args[:cut], args[cut + 1 :]
    parser = argparse.ArgumentParser(prog="python -m assay_testing.defects", description=__doc__)
    parser.add_argument("faults", nargs="?", default="", help="NAME[=VALUE],... to arm")
    parser.add_argument("--list", action="store_true", help="print every defect and exit")
    options = parser.parse_args(args)
    if options.list:
        for name, item in sorted(defects.CATALOG.items()):
            print(f"{name}\t{item.defect}")
        return 0
    if not options.faults or not command:
        parser.error("give the defects to arm and a command after --")
    try:
        env = defects.child_env(options.faults)
    except KeyError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 2
    return subprocess.run(command, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
