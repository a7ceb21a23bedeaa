"""Writing an import into the records all or nothing: stage every file, then commit by renames.

An import adds, per gate, figures under ``records/figures/<gate>/``, receipts under
``receipts/<gate>/`` and the gate's new LEDGER. :func:`commit` first writes each of them to a
hidden temporary name beside its destination (``.<name>.import-<token>``, fsynced); a failure
there (a full disk) removes every temporary and leaves the records as they were. Then, gate
by gate, it links the figures and receipts into place and replaces the LEDGER last, in one
rename: the LEDGER is each gate's commit point.

Order is what makes an interruption (ENOSPC, kill -9) safe at any write:

- before a gate's LEDGER is replaced, its new receipts may already be on disk but are in no
  ledger; the importer recognises them on the next run (same name, same bytes as the
  archive's) and lists them, so running the same command again completes the import;
- a failure during the commit that the process survives unlinks what it placed for the
  gates not yet committed, so the records are as before for those gates;
- temporaries left by a killed import are hidden (no reader lists them) and removed by the
  next import of the same gates, under the same locks.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from assay.atomic import fsync_dir, write_synced
from assay.qualify.ledger.chain import HEADER, LEDGER

TEMP_MARK = ".import-"


@dataclass
class GatePlan:
    """What an import adds to one gate, all of it checked: ``receipts`` (file name, bytes,
    seal) oldest first, of which ``on_disk`` were placed by an earlier, interrupted run;
    ``figures`` (path under the records folder -> bytes) not yet at home; ``entries`` the
    gate's ledger as it stands."""

    gate: str
    receipts: list[tuple[str, bytes, str]] = field(default_factory=list)
    on_disk: set[str] = field(default_factory=set)
    figures: dict[str, bytes] = field(default_factory=dict)
    entries: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class _Staged:
    temp: Path
    home: Path


def _temp_for(home: Path, token: str) -> Path:
    return home.with_name(f".{home.name}{TEMP_MARK}{token}")


def _write_new(path: Path, data: bytes) -> None:
    """Create ``path`` holding ``data``, fsynced; on any failure it is removed again."""
    try:
        write_synced(path, data)
    except BaseException:
        with contextlib.suppress(OSError):
            path.unlink()
        raise


def same_bytes(path: Path, data: bytes) -> bool:
    """Whether ``path`` is a regular file holding exactly ``data``; reads at most
    ``len(data)`` bytes of it (a FIFO or a huge file is simply not the same)."""
    if not path.is_file() or path.stat().st_size != len(data):
        return False
    with open(path, "rb") as handle:
        return handle.read(len(data) + 1) == data


def _ledger_bytes(entries: list[tuple[str, str]]) -> bytes:
    return (HEADER + "".join(f"{sha} {name}\n" for sha, name in entries)).encode("utf-8")


def remove_stale_temporaries(folders: list[Path]) -> None:
    """Delete temporaries an earlier, killed import left in ``folders`` (call under the
    gates' locks only)."""
    for folder in folders:
        if folder.is_dir():
            for entry in folder.iterdir():
                if entry.name.startswith(".") and TEMP_MARK in entry.name and entry.is_file():
                    entry.unlink(missing_ok=True)


class _Commit:
    def __init__(self, plans: list[GatePlan], receipts_dir: Path, records_dir: Path) -> None:
        self.plans, self.receipts_dir, self.records_dir = plans, receipts_dir, records_dir
        self.token = secrets.token_hex(6)
        self.staged: dict[str, list[_Staged]] = {p.gate: [] for p in plans}
        self.ledgers: dict[str, _Staged] = {}
        self.made_dirs: list[Path] = []

    def _mkdirs(self, folder: Path) -> None:
        missing = []
        for candidate in (folder, *folder.parents):
            if candidate.exists():
                break
            missing.append(candidate)
        folder.mkdir(parents=True, exist_ok=True)
        self.made_dirs.extend(missing)  # deepest first

    def _stage(self, gate: str, home: Path, data: bytes) -> _Staged:
        self._mkdirs(home.parent)
        staged = _Staged(_temp_for(home, self.token), home)
        _write_new(staged.temp, data)
        return staged

    def stage(self) -> None:
        for plan in self.plans:
            gate_dir = self.receipts_dir / plan.gate
            for path, data in sorted(plan.figures.items()):
                self.staged[plan.gate].append(self._stage(plan.gate, self.records_dir / path, data))
            for name, data, _ in plan.receipts:
                if name not in plan.on_disk:
                    self.staged[plan.gate].append(self._stage(plan.gate, gate_dir / name, data))
            entries = [*plan.entries, *((sha, name) for name, _, sha in plan.receipts)]
            self.ledgers[plan.gate] = self._stage(
                plan.gate, gate_dir / LEDGER, _ledger_bytes(entries)
            )
        for folder in {s.temp.parent for group in self.staged.values() for s in group}:
            fsync_dir(folder)

    def discard(self) -> None:
        """Remove every temporary still staged and the folders made for them (if empty)."""
        for group in [*self.staged.values(), list(self.ledgers.values())]:
            for staged in group:
                with contextlib.suppress(OSError):
                    staged.temp.unlink(missing_ok=True)
        for folder in self.made_dirs:
            with contextlib.suppress(OSError):
                folder.rmdir()

    def commit_gate(self, plan: GatePlan) -> list[Path]:
        """Link the gate's files into place, then replace its LEDGER (the commit point).
        Returns the homes placed; on a failure the ones placed are unlinked again."""
        placed: list[Path] = []
        try:
            for staged in self.staged[plan.gate]:
                try:
                    os.link(staged.temp, staged.home)
                except FileExistsError:
                    if not same_bytes(staged.home, staged.temp.read_bytes()):
                        raise
                else:
                    placed.append(staged.home)
                staged.temp.unlink()
            for folder in {s.home.parent for s in self.staged[plan.gate]}:
                fsync_dir(folder)
            ledger = self.ledgers[plan.gate]
            os.replace(ledger.temp, ledger.home)
            del self.ledgers[plan.gate]  # committed: no temporary left to discard
            fsync_dir(ledger.home.parent)
        except BaseException:
            for home in placed:
                with contextlib.suppress(OSError):
                    home.unlink()
            raise
        return placed


def commit(plans: list[GatePlan], receipts_dir: Path, records_dir: Path) -> list[str]:
    """Stage every file of ``plans``, then commit gate by gate; returns the gates committed.

    An exception while staging leaves the records untouched (temporaries removed). An
    exception while committing leaves the gates already committed imported and the others
    untouched (or, if the process dies instead, completable by importing again), and is
    re-raised with the committed gates in its ``committed`` attribute.
    """
    work = _Commit(plans, Path(receipts_dir), Path(records_dir))
    done: list[str] = []
    try:
        work.stage()
        for plan in plans:
            work.commit_gate(plan)
            done.append(plan.gate)
    except BaseException as err:
        work.discard()
        err.committed = done  # type: ignore[attr-defined]
        raise
    return done
