"""The defect catalog: every named defect a control or curated mutant injects, as patches.

A defect is a name (``<module under assay>.<defect>``), a one-line description and the edits
that express it in the product's source (:mod:`assay_testing.patching`). Nothing in the product
asks for a defect: ``inject(name)`` patches scratch copies of the named functions for a block,
and a child process arms the names in ``ASSAY_FAULTS`` (comma-separated, ``name=value`` for a
setting) at start-up when :func:`child_env` put the boot folder on its ``PYTHONPATH``.

Each area of the product lists its defects in a module of this package; an unknown name is
refused, so a typo cannot arm nothing and pass.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from assay_testing.patching import Edit, patched

ENV = "ASSAY_FAULTS"
# A mutant under measurement (gate-mutation): armed in a process and in every Python child it
# starts, whatever faults a gate arms or clears for its own children through ``child_env``.
MUTANT_ENV = "ASSAY_MUTANT"
BOOT = Path(__file__).resolve().parent.parent / "boot"
AREAS = (
    "storage",
    "stream",
    "adapters",
    "train",
    "train_objective",
    "model",
    "memory",
    "files",
    "testing",
    "qualify",
)


@dataclass(frozen=True)
class Defect:
    """One named defect: what it is, and the edits that put it into the product's code."""

    name: str
    defect: str
    edits: tuple[Edit, ...]

    @property
    def module(self) -> str:
        """The module the name says the defect lives in."""
        return module_of(self.name)


def module_of(name: str) -> str:
    """``storage.nf4.nibble_order`` -> ``assay.storage.nf4``; ``testing.*`` names patch this
    test machinery (``assay_testing.*``), everything else the product."""
    where = name.rsplit(".", 1)[0]
    return f"assay_{where}" if where.startswith("testing.") else f"assay.{where}"


def _load() -> dict[str, Defect]:
    found: dict[str, Defect] = {}
    for area in AREAS:
        for item in importlib.import_module(f"{__name__}.{area}").DEFECTS:
            if item.name in found:
                raise ValueError(f"defect {item.name!r} listed twice")
            found[item.name] = item
    return found


CATALOG: dict[str, Defect] = _load()


def lookup(name: str) -> Defect:
    """The defect called ``name``; ``KeyError`` naming the known ones otherwise."""
    if name not in CATALOG:
        close = [k for k in sorted(CATALOG) if k.rsplit(".", 1)[0] == name.rsplit(".", 1)[0]]
        hint = f"known in that module: {', '.join(close)}" if close else "none in that module"
        raise KeyError(f"unknown fault point {name!r} ({hint}; all: --list)")
    return CATALOG[name]


@contextlib.contextmanager
def inject(name: str, setting: str = "1") -> Iterator[None]:
    """Run the block with the defect ``name`` patched into the product (``setting`` fills
    ``$VALUE`` in its edits); the product's code is restored after."""
    with patched(lookup(name).edits, setting):
        yield


def parse(spec: str) -> dict[str, str]:
    """``"a, b=3"`` -> ``{"a": "1", "b": "3"}``; every name must be in the catalog."""
    found: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, value = item.partition("=")
        lookup(name)
        found[name] = value or "1"
    return found


def arm(spec: str) -> contextlib.ExitStack:
    """Arm every defect of ``spec`` until the returned stack is closed; hold a reference to it,
    since a collected stack closes and disarms them."""
    stack = contextlib.ExitStack()
    for name, setting in parse(spec).items():
        stack.enter_context(inject(name, setting))
    return stack


@contextlib.contextmanager
def reporting_children() -> Iterator[None]:
    """Within the block, Python children started with this process's environment load the boot
    ``sitecustomize``, which reports their imports to a running gate session."""
    before = {key: os.environ.get(key) for key in ("PYTHONPATH", "ASSAY_BOOT_REPORTS")}
    os.environ["PYTHONPATH"] = os.pathsep.join([str(BOOT), *filter(None, [before["PYTHONPATH"]])])
    os.environ["ASSAY_BOOT_REPORTS"] = "1"
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def child_env(faults: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """An environment whose Python children start with ``faults`` armed (empty: none), and
    with the mutant under measurement (``ASSAY_MUTANT``) still armed when ``base`` has one."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k != ENV}
    if faults:
        parse(faults)
        env[ENV] = faults
    if (faults or env.get(MUTANT_ENV)) and str(BOOT) not in env.get("PYTHONPATH", "").split(
        os.pathsep
    ):
        env["PYTHONPATH"] = os.pathsep.join([str(BOOT), *filter(None, [env.get("PYTHONPATH")])])
    return env
