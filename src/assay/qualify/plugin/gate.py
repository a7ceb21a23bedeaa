"""The ``gate`` fixture object: what one gate test declares, kept as JSON-ready data.

Everything here is plain data so that it can travel from pytest-xdist workers to the
controller. Bad declarations raise :class:`AssayError` at the line that made them.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from assay.errors import AssayError
from assay.qualify.core.identifier import id_problem
from assay.qualify.core.source import file_sha256
from assay.qualify.core.threshold import KINDS, Threshold
from assay.qualify.plugin.claim import Claim, nonempty_text
from assay.qualify.plugin.paths import display_path, package_files
from assay.qualify.plugin.reachable import reach

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _is_path(item: str | Path) -> bool:
    return isinstance(item, Path) or "/" in item or item.endswith(".py")


def blank_fragment(gate: str, nodeid: str) -> dict[str, Any]:
    """What one test declares about ``gate``, before it declares anything."""
    return {
        "gate": gate,
        "nodeid": nodeid,
        "claims": [],
        "not_tested": [],
        "inputs": [],
        "figures": [],
        "notes": [],
        "seeds": [],
        "files": [],
        "corrects": [],
    }


class Gate:
    """What one test of gate ``name`` declares; created per test by the ``gate`` fixture."""

    def __init__(self, name: str, device: str, nodeid: str, rootdir: Path) -> None:
        self.name = name
        self.device = device
        self.nodeid = nodeid
        self._root = rootdir
        self._module_path: Path | None = None
        # (claim id, or "" for gate.uses; dotted module): each must be reached (stale_code)
        self._declared: list[tuple[str, str]] = []
        self._child_imports: set[str] = set()
        self._claims: list[Claim] = []
        self._data: dict[str, Any] = {"device": device, **blank_fragment(name, nodeid)}
        self._closed = False

    def check_open(self, where: str) -> None:
        """AssayError once the test's declarations have been taken (after the ``gate`` fixture's
        teardown): a later declaration would reach no receipt, so it is refused, loudly."""
        if self._closed:
            raise AssayError(
                f"{where}: gate {self.name!r} of {self.nodeid} is closed: its test has finished "
                "and its declarations are taken; declare claims in the test, its fixtures or "
                "its finalizers"
            )

    def close(self) -> None:
        """Refuse every declaration from now on (see :meth:`check_open`)."""
        self._closed = True

    def claim(
        self,
        claim_id: str,
        statement: str,
        *,
        kind: str,
        threshold: Threshold,
        unit: str = "",
        code: Iterable[str | Path] = (),
        derived: bool = False,
    ) -> Claim:
        """Declare a claim and return it, to be measured and controlled by the test.

        ``code`` names the implementation this claim exercises (dotted modules or paths; a
        package stands for every ``.py`` file under it); the receipt records them, with the
        gate module itself, as the claim's ``code_files``. They are a floor: what the test
        executed is measured on top (:mod:`assay.qualify.plugin.executed`). A
        dotted module that nothing the gate module imports imports (read from source), and that
        no child process of the test reported importing (see
        :mod:`assay.qualify.plugin.child_imports`), is a stale declaration and errors the test
        (see :meth:`stale_code`). ``derived=True`` marks a
        value computed by arithmetic from other measurements; the record labels it as such.
        """
        self.check_open("gate.claim")
        claim_id = nonempty_text(claim_id, "gate.claim id")
        where = f"claim {claim_id!r}"
        why = id_problem(claim_id)
        if why is not None:
            raise AssayError(f"gate.claim id {claim_id!r} {why}; declare it as one plain string")
        statement = nonempty_text(statement, f"{where} statement")
        if kind not in KINDS:
            raise AssayError(f"{where} kind: expected one of {', '.join(KINDS)}, got {kind!r}")
        if not isinstance(threshold, Threshold):
            raise AssayError(f"{where} threshold: expected assay.qualify.Threshold")
        if not isinstance(unit, str):
            raise AssayError(f"{where} unit: expected a string, got {unit!r}")
        if any(c.id == claim_id for c in self._claims):
            raise AssayError(f"{where}: declared twice in gate {self.name!r}")
        if isinstance(code, (str, Path)):
            code = [code]
        code_files = [self._file_entry(self._module_path)] if self._module_path else []
        for item in code:
            if isinstance(item, str) and not _is_path(item):
                self._declared.append((claim_id, item))
            for path in self._resolve_module(item):
                entry = self._file_entry(path)
                if entry not in code_files:
                    code_files.append(entry)
        for entry in code_files:
            if entry not in self._data["files"]:
                self._data["files"].append(entry)
        data: dict[str, Any] = {
            "id": claim_id,
            "statement": statement,
            "kind": kind,
            "unit": unit,
            "threshold": threshold.to_dict(kind),
            "measurement": None,
            "controls": [],
            "code_files": code_files,
        }
        if derived:
            data["derived"] = True
        self._data["claims"].append(data)
        claim = Claim(data, threshold, self)
        self._claims.append(claim)
        return claim

    def uses(self, *modules_or_paths: str | Path) -> None:
        """Record implementation files exercised (dotted module names or paths) by sha256, for
        the whole gate, import-checked like ``code=``. Prefer ``gate.claim(..., code=[...])``,
        which records them per claim."""
        self.check_open("gate.uses")
        for item in modules_or_paths:
            if isinstance(item, str) and not _is_path(item):
                self._declared.append(("", item))
            for path in self._resolve_module(item):
                entry = self._file_entry(path)
                if entry not in self._data["files"]:
                    self._data["files"].append(entry)

    def module(self, path: Path) -> None:
        """Set the gate module's own file; it heads every claim's ``code_files``."""
        self._module_path = path
        self.uses(path)

    def child_imports(self, modules: Iterable[str]) -> None:
        """Count ``modules`` as imported: what this process's child processes reported."""
        self._child_imports.update(modules)

    def stale_code(self) -> list[str]:
        """One line per declared module its gate cannot reach and no reporting child imported:
        a claim may list only code its test runs, so a renamed, removed or unrelated module
        cannot stay listed. Reach is read from the gate module's source and what it imports
        (:mod:`assay.qualify.plugin.reachable`), never from what this process happens to have
        imported, so a gate run alone, with others, in any order or on any worker gets the
        same verdict."""
        if not self._declared:
            return []
        packages = frozenset(name.partition(".")[0] for _cid, name in self._declared)
        reached: frozenset[str] = frozenset()
        if self._module_path is not None:
            reached = reach(Path(self._root), packages).modules(self._module_path)
        return [
            f"{f'claim {cid!r} code' if cid else 'gate.uses'}: module {name!r} is imported by "
            "nothing its gate module imports (read from source) nor by a child that reported; "
            "list only code the claim runs"
            for cid, name in self._declared
            if name not in reached and name not in self._child_imports
        ]

    def _file_entry(self, path: Path) -> dict[str, str]:
        return {"path": self._display(path), "sha256": file_sha256(path)}

    def input(self, role: str, path: str | Path) -> None:
        """Record an input file by role, size in bytes and sha256."""
        self.check_open("gate.input")
        role = nonempty_text(role, "gate.input role")
        p = Path(path)
        if not p.is_file():
            raise AssayError(f"gate.input {role!r}: {p} is not a file")
        entry = {
            "role": role,
            "path": self._display(p),
            "bytes": p.stat().st_size,
            "sha256": file_sha256(p),
        }
        if entry not in self._data["inputs"]:
            self._data["inputs"].append(entry)

    def seed(self, *seeds: int) -> None:
        """Record the random seeds this test used."""
        self.check_open("gate.seed")
        for s in seeds:
            if isinstance(s, bool) or not isinstance(s, int):
                raise AssayError(f"gate.seed: expected an integer, got {s!r}")
            if s not in self._data["seeds"]:
                self._data["seeds"].append(s)

    def not_tested(self, item: str, reason: str) -> None:
        """Write down something this gate does not test, and why."""
        self.check_open("gate.not_tested")
        entry = {
            "item": nonempty_text(item, "gate.not_tested item"),
            "reason": nonempty_text(reason, "reason"),
        }
        if entry not in self._data["not_tested"]:
            self._data["not_tested"].append(entry)

    def note(self, text: str) -> None:
        """Add a free-text note to the record."""
        self.check_open("gate.note")
        text = nonempty_text(text, "gate.note")
        if text not in self._data["notes"]:
            self._data["notes"].append(text)

    def figure(self, path: str | Path, caption: str, *, derived: bool = False) -> None:
        """Attach a PNG with a caption; copied under ``records/figures/<gate>/`` at session end.

        ``derived=True`` marks a figure plotted from arithmetic rather than measurements."""
        self.check_open("gate.figure")
        p = Path(path)
        caption = nonempty_text(caption, "gate.figure caption")
        if not p.is_file():
            raise AssayError(f"gate.figure: {p} is not a file")
        with p.open("rb") as handle:
            if handle.read(len(PNG_MAGIC)) != PNG_MAGIC:
                raise AssayError(f"gate.figure: {p} is not a PNG file")
        entry: dict[str, Any] = {"source": str(p.resolve()), "caption": caption}
        if derived:
            entry["derived"] = True
        self._data["figures"].append(entry)

    def correct(self, receipt_sha256: str, claim_id: str, reason: str) -> None:
        """Declare that this receipt corrects claim ``claim_id`` of an earlier receipt.

        The earlier receipt is never rewritten; the record shows this correction, dated,
        beside the original row. The referenced receipt must exist in this gate's receipts.
        """
        self.check_open("gate.correct")
        sha = nonempty_text(receipt_sha256, "gate.correct receipt_sha256").lower()
        if len(sha) != 64 or any(ch not in "0123456789abcdef" for ch in sha):
            raise AssayError(f"gate.correct receipt_sha256: expected 64 hex digits, got {sha!r}")
        entry = {
            "receipt_sha256": sha,
            "claim_id": nonempty_text(claim_id, "gate.correct claim_id"),
            "reason": nonempty_text(reason, "gate.correct reason"),
        }
        if entry not in self._data["corrects"]:
            self._data["corrects"].append(entry)

    def fragment(self) -> dict[str, Any]:
        """This test's declarations as JSON-serialisable data (a deep copy)."""
        import copy

        return copy.deepcopy(self._data)

    def _resolve_module(self, item: str | Path) -> list[Path]:
        """The files ``item`` names: a path's file; a module's source file; every ``.py`` file
        of a package, recursively (``__init__.py`` first), so an edit to ``pkg/_core.py``
        stales a claim that lists ``pkg``."""
        if isinstance(item, Path) or _is_path(item):
            path = Path(item)
            if not path.is_file():
                raise AssayError(f"gate.uses: {path} is not a file")
            return [path]
        try:
            spec = importlib.util.find_spec(item)
        except (ImportError, ValueError) as err:
            raise AssayError(f"gate.uses: cannot find module {item!r}: {err}") from err
        if spec is not None and spec.submodule_search_locations:
            files = package_files(spec.origin, spec.submodule_search_locations)
            if files:
                return files
        if spec is None or not spec.origin or not Path(spec.origin).is_file():
            raise AssayError(f"gate.uses: module {item!r} has no source file")
        return [Path(spec.origin)]

    def _display(self, path: Path) -> str:
        return display_path(self._root, path)
