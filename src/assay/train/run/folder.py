"""Output protection for run directories: a run never silently mixes with an older one, and
one run folder has one writer.

A folder is a run only when it carries :data:`RUN_MARKER`, the file ``assay train`` writes
into every run folder it claims. ``assay train`` into a directory that already holds a run
refuses unless ``--resume`` (continue it) or ``--overwrite`` (replace it); a non-empty folder
without the marker (a user's files, another run's ``step-*`` folder) is never a run, and is
refused with or without ``--overwrite``, so no flag deletes what assay did not write.
The marker also records what train wrote (:func:`record_written`, at the start, after every
checkpoint and at the end of a run): ``--overwrite`` and ``--resume`` refuse a run whose files
were changed since (:func:`changed_since_written`), so neither deletes or rewrites a user's
edit of a run's own files. :func:`claim_run_dir` checks, then takes the folder's lock
(:mod:`assay.train.run.lock`) and checks again under it, so of two processes started together
exactly one trains and the other is refused naming it.

``--overwrite`` is whole or nothing: the old run is renamed aside in one step
(onto a fresh ``.<name>.replaced-*`` name) and stays there until the new run's first checkpoint
(:meth:`RunClaim.checkpointed` then deletes it); a new run that fails before that puts the old
one back (:meth:`RunClaim.release`). A run killed before its first checkpoint has a run
directory without ``latest`` or any ``step-*``; resuming it starts at step 0 with its metrics
emptied (:func:`not_started`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from assay.atomic import atomic_write_bytes, json_bytes
from assay.bounded import JSONL_BYTES, InputTooLarge, parse_json, read_capped, read_json_file
from assay.digest import feed
from assay.errors import ConfigError
from assay.train.checkpoint.layout import (
    CHECKPOINT_FILES,
    LATEST,
    MANIFEST,
    STEP_FOLDER,
    not_in_a_checkpoint,
)
from assay.train.run.lock import LOCK_NAME, RunLock, acquire, is_lock_record, refuse_if_held

RUN_MARKER = ".assay-run"
RUN_FORMAT = "assay.run/1"  # an on-disk format id: never renamed
# What ``assay train`` writes into a run folder (the loop's config.yaml and metrics.jsonl, the
# run state, the TensorBoard folder; tests/train/test_output_protection.py checks a real run's
# folder holds nothing else), and the temporaries an interrupted write of any of them leaves.
RUN_ENTRIES = frozenset(
    {RUN_MARKER, LOCK_NAME, LATEST, "config.yaml", "metrics.jsonl", "run-state.json", "tensorboard"}
)
_TEMPORARY = re.compile(r"\.(?P<name>.+)\.tmp-[^/]*")


# The entries of a run folder that ``assay train`` writes as folders; every other entry it
# writes is a regular file. It never writes a symlink, a device or a pipe, at any depth.
RUN_FOLDERS = frozenset({"tensorboard"})
# What train's TensorBoard writer puts in the events folder: event files, nothing else.
EVENT_FILE = re.compile(r"events\.out\.tfevents\.[^/]+")
# The file train writes whole and the one it appends rows to, as the marker's record lists
# them. Checked by kind only: run-state.json and latest, pointers every process and every save
# rewrites (a kill between such a write and the record must not make a run unreplaceable), and
# TensorBoard's events, a view of the metrics.
WRITTEN_WHOLE = ("config.yaml",)
METRICS_ROWS = "metrics.jsonl"


def _written_name(name: str) -> str:
    """The entry an interrupted write's temporary ``name`` was for, else ``name``."""
    leftover = _TEMPORARY.fullmatch(name)
    return leftover.group("name") if leftover else name


def written_by_train(name: str) -> bool:
    """True when a run folder's entry ``name`` is one ``assay train`` writes."""
    name = _written_name(name)
    return name in RUN_ENTRIES or STEP_FOLDER.fullmatch(name) is not None


def _written_as(entry: Path) -> bool:
    """True when ``entry`` (a top-level entry of a run folder) has a name ``assay train``
    writes and is of the kind it writes there: a checkpoint (a real folder of the checkpoint's
    own files), the events folder (holding only TensorBoard's event files, as regular files),
    a regular file for the rest."""
    if not written_by_train(entry.name) or entry.is_symlink():
        return False
    name = _written_name(entry.name)
    if STEP_FOLDER.fullmatch(name) and name == entry.name:
        return not not_in_a_checkpoint(entry)
    folder = name in RUN_FOLDERS or STEP_FOLDER.fullmatch(name) is not None
    if not folder:
        return entry.is_file()
    if not entry.is_dir():
        return False
    if name in RUN_FOLDERS:  # the events folder: only the writer's event files, flat
        return all(
            EVENT_FILE.fullmatch(inner.name) and _regular(inner) for inner in entry.iterdir()
        )
    for parent, dirs, files in os.walk(entry):
        for child in dirs + files:
            inner = Path(parent) / child
            if inner.is_symlink() or not (inner.is_dir() or inner.is_file()):
                return False
    return True


def _kind_found(entry: Path) -> str:
    """What stands at run-folder entry ``entry`` instead of what ``assay train`` writes there,
    in a few words."""
    name = _written_name(entry.name)
    if entry.is_symlink():
        return "is a symlink"
    if name in RUN_FOLDERS or STEP_FOLDER.fullmatch(name):
        if not entry.is_dir():
            return "exists and is not a folder"
        if STEP_FOLDER.fullmatch(name) and name == entry.name:
            return f"holds {_shown(not_in_a_checkpoint(entry))}, not a checkpoint's files"
        if name in RUN_FOLDERS:
            return "holds files other than TensorBoard's event files"
        return "holds a link or a special file"
    return "exists and is not a regular file"


def not_written_by_train(run: Path) -> list[str]:
    """The entries of run folder ``run`` (its marker and lock aside) that ``assay train`` did
    not write: a name it never writes, or one of its names standing for something of another
    kind (a symlink in place of a checkpoint, a folder in place of a file, a link or device
    anywhere inside a checkpoint). Deleting the run would delete these."""
    return [name for name in _entries(run) if not _written_as(run / name)]


def is_marked_run(path: Path) -> bool:
    """True when ``path`` is a folder holding a readable :data:`RUN_MARKER` of this format."""
    marker = Path(path) / RUN_MARKER
    if not marker.is_file() or marker.is_symlink():
        return False
    try:
        body = read_json_file(marker, ConfigError)
    except ConfigError:
        return False
    return isinstance(body, dict) and body.get("format") == RUN_FORMAT


def _mark(folder: Path) -> None:
    if not is_marked_run(folder):
        atomic_write_bytes(folder / RUN_MARKER, json_bytes({"format": RUN_FORMAT}))


def _digest(path: Path, length: int | None = None) -> dict[str, Any]:
    """Size and sha256 of ``path``'s first ``length`` bytes (all of it when None)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        size = feed(digest, handle, length)
    return {"bytes": size, "sha256": digest.hexdigest()}


def _regular(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def record_written(run: Path) -> None:
    """Record in ``run``'s marker the size and sha256 of what train has written there so far:
    its copy of the config, the metrics rows, and every checkpoint's manifest (which holds the
    sha256 of the checkpoint's files). Nothing happens in a folder that is not a marked
    run. Train calls this after each write that ends a phase (start, checkpoint, end), so a
    later check tells its files from a user's edits."""
    run = Path(run)
    if not is_marked_run(run):
        return
    written = {
        name: _digest(run / name) for name in (*WRITTEN_WHOLE, METRICS_ROWS) if _regular(run / name)
    }
    for step in sorted(run.iterdir()):
        manifest = step / MANIFEST
        if STEP_FOLDER.fullmatch(step.name) and not step.is_symlink() and _regular(manifest):
            written[f"{step.name}/{MANIFEST}"] = _digest(manifest)
    body = {"format": RUN_FORMAT, "written": written}
    atomic_write_bytes(run / RUN_MARKER, json_bytes(body))


def _recorded(run: Path) -> dict[str, Any]:
    """The marker's record of what train wrote (empty for a marker from before the record)."""
    try:
        written = read_json_file(run / RUN_MARKER, ConfigError).get("written")
    except (ConfigError, AttributeError):
        return {}
    if not isinstance(written, dict):
        return {}
    return {
        k: v
        for k, v in written.items()
        if isinstance(v, dict) and type(v.get("bytes")) is int and isinstance(v.get("sha256"), str)
    }


def _metrics_changed(path: Path, recorded: dict[str, Any] | None) -> bool:
    """True when ``path`` does not begin with the rows the record names, or goes on with a
    line that is not a metrics row (a JSON object with an integer ``step``); a last line
    without its newline is a row a kill cut short."""
    start = 0
    if recorded is not None:
        if _digest(path, recorded["bytes"]) != recorded:
            return True
        start = recorded["bytes"]
    try:
        lines = read_capped(path, JSONL_BYTES, "metrics file")[start:].split(b"\n")
    except InputTooLarge:
        return True
    for line in lines[:-1]:  # the piece after the last newline: empty, or a torn row
        try:
            row = parse_json(line)
        except ValueError:
            return True
        if not isinstance(row, dict) or type(row.get("step")) is not int:
            return True
    return False


def _fingerprints(step: Path) -> Any:
    """The fingerprints checkpoint folder ``step``'s manifest names (None when unreadable)."""
    try:
        return read_json_file(step / MANIFEST, ConfigError).get("fingerprints")
    except (ConfigError, AttributeError):
        return None


def _step_number(name: str) -> int:
    return int(name.partition("-")[2])


def _unrecorded_allowed(run: Path, recorded: dict[str, Any]) -> set[str]:
    """The checkpoints of ``run`` that may be train's without being in the marker's record:
    the newest, when it is newer than every recorded one (a kill after its save, before the
    record); every one, for a marker from before the record (empty). Another run's
    checkpoint copied in under any other name is not train's."""
    steps = [n for n in _entries(run) if STEP_FOLDER.fullmatch(n)]
    if not recorded or not steps:
        return set(steps)
    newest = max(steps, key=_step_number)
    done = [_step_number(k.partition("/")[0]) for k in recorded if k.endswith(f"/{MANIFEST}")]
    return {newest} if all(_step_number(newest) > step for step in done) else set()


def _checkpoint_changed(step: Path, recorded: dict[str, Any] | None, run_prints: Any) -> bool:
    """True when checkpoint folder ``step``'s manifest is not the one recorded, names other
    fingerprints (config, data, model) than the run's checkpoint ``latest`` names (another
    run's checkpoint copied in), or a file of it differs in size or sha256 from what its
    manifest lists."""
    manifest = step / MANIFEST
    if recorded is not None and _digest(manifest) != recorded:
        return True
    try:
        body = read_json_file(manifest, ConfigError)
        files = body.get("files")
    except (ConfigError, AttributeError):
        return True
    if run_prints is not None and body.get("fingerprints") != run_prints:
        return True
    if body.get("step") != _step_number(step.name):  # a checkpoint renamed to a later step
        return True
    if not isinstance(files, dict) or set(files) != set(CHECKPOINT_FILES):
        return True
    for name, entry in files.items():
        if not isinstance(entry, dict) or {"bytes", "sha256"} - set(entry):
            return True
        listed = {"bytes": entry["bytes"], "sha256": entry["sha256"]}
        path = step / name
        if not _regular(path) or path.stat().st_size != listed["bytes"]:
            return True
        if _digest(path) != listed:
            return True
    return False


def _latest_name(run: Path) -> str | None:
    """The checkpoint name ``run``'s ``latest`` holds (``step-NNNNNN``), else None."""
    try:
        name = read_capped(run / LATEST, 256, "latest").decode("utf-8").strip()
    except (OSError, InputTooLarge, UnicodeDecodeError):
        return None
    return name if STEP_FOLDER.fullmatch(name) else None


def _latest_named(run: Path) -> str | None:
    """The checkpoint folder ``run``'s ``latest`` names, when it is one there."""
    name = _latest_name(run)
    return name if name is not None and not not_in_a_checkpoint(run / name) else None


def changed_since_written(run: Path, *, read_later: str | None = None) -> list[str]:
    """The entries of run folder ``run`` whose content is not what train wrote there: its copy
    of the config when its sha256 differs from the marker's record, metrics rows edited or
    followed by a line that is no metrics row, a checkpoint whose manifest differs from the
    record, whose files differ from its manifest, or that is another run's (other
    fingerprints than the checkpoint ``latest`` names). Only entries of the kind train writes
    are read (see :func:`not_written_by_train` for the others). ``read_later`` names a
    checkpoint left out: the one a resume loads, whose own checks name the file and field."""
    recorded = _recorded(run)
    latest = _latest_named(run)
    run_prints = _fingerprints(run / latest) if latest else None
    unrecorded_allowed = _unrecorded_allowed(run, recorded)
    changed = []
    for name in _entries(run):
        entry = run / name
        if not _written_as(entry) or name != _written_name(name) or name == read_later:
            continue
        if name in WRITTEN_WHOLE:
            differs = name in recorded and _digest(entry) != recorded[name]
        elif name == METRICS_ROWS:
            differs = _metrics_changed(entry, recorded.get(name))
        elif STEP_FOLDER.fullmatch(name):
            manifest = recorded.get(f"{name}/{MANIFEST}")
            differs = (manifest is None and name not in unrecorded_allowed) or _checkpoint_changed(
                entry, manifest, run_prints
            )
        else:
            differs = False
        if differs:
            changed.append(name)
    return changed


def mark_new_run(folder: Path) -> None:
    """Mark ``folder`` as a run when it holds nothing yet (the Python ``Trainer`` writing into
    a folder it created, with no CLI claim); a folder already holding files is left unmarked,
    so it never becomes replaceable by being trained into."""
    if Path(folder).is_dir() and not holds_run(Path(folder)):
        _mark(Path(folder))


def _unmark_if_empty(folder: Path) -> None:
    """A claim that ends with nothing written takes its marker back, so the folder is empty
    again (and removed, if the lock created it)."""
    with contextlib.suppress(OSError):
        if folder.is_dir() and not holds_run(folder):
            (folder / RUN_MARKER).unlink(missing_ok=True)


def _unused_name(beside: Path, why: str) -> Path:
    """A fresh, empty folder named ``.<name>.<why>-*`` next to ``beside``: a rename onto it
    replaces nothing of the user's."""
    return Path(tempfile.mkdtemp(prefix=f".{beside.name}.{why}-", dir=beside.parent))


def not_started(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a run directory (it carries the run marker) with no checkpoint
    yet (no ``latest``, no ``step-*``, no ``manifest.json``): a run killed before its first
    save."""
    root = Path(path)
    if not root.is_dir() or (root / LATEST).exists() or (root / MANIFEST).exists():
        return False
    if not is_marked_run(root):
        return False
    return not any(p.name.startswith("step-") for p in root.iterdir())


def _entries(path: Path, *, locked: bool = False) -> list[str]:
    """The entries of folder ``path`` besides its run marker, when it is one of this format,
    and its lock file, when the lock is ours: the folder is a run, this process holds the
    lock, or the file is a holder record a killed writer left. A user's file with the
    marker's or the lock's name is an entry."""
    marked = is_marked_run(path)
    ours = locked or marked or is_lock_record(path / LOCK_NAME)
    own = ({RUN_MARKER} if marked else set()) | ({LOCK_NAME} if ours else set())
    return sorted(p.name for p in path.iterdir() if p.name not in own)


def holds_run(path: Path, *, locked: bool = False) -> bool:
    """True when ``path`` exists and is not an empty directory (the run marker, and the lock
    file when it is ours, aside)."""
    if not path.exists():
        return False
    return not path.is_dir() or bool(_entries(path, locked=locked))


def _shown(found: list[str]) -> str:
    return ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")


def _foreign(out: Path, source: str, locked: bool) -> ConfigError:
    return ConfigError(
        f"{source}: output.dir: {out} holds files ({_shown(_entries(out, locked=locked))}) but "
        f"no {RUN_MARKER} marker, so assay train did not create it and will not replace it; "
        "nothing was changed; choose an empty or new folder"
    )


def _check_replaceable(out: Path, source: str, locked: bool) -> None:
    """--overwrite deletes the old run whole: refuse a run folder that also holds what
    ``assay train`` does not write (a user's notes, a config kept beside the run under
    another name than ``config.yaml``, a symlink standing in for a checkpoint), or is a
    symlink; under the lock (the files read once, by the check that counts), also one whose
    files changed since train wrote them."""
    if out.is_symlink():
        raise ConfigError(
            f"{source}: output.dir: {out} is a symlink; --overwrite replaces only a run folder "
            "itself; nothing was changed; name the folder it points to"
        )
    extra = not_written_by_train(out)
    if extra:
        raise ConfigError(
            f"{source}: output.dir: {out} holds a run and files assay train did not write "
            f"({_shown(extra)}); --overwrite would delete them; nothing was changed; move them "
            "out first"
        )
    if locked:
        _refuse_changed(out, source, "output.dir", "--overwrite would delete")


def _refuse_changed(
    run: Path, source: str, where: str, outcome: str, read_later: str | None = None
) -> None:
    """ConfigError naming the entries of ``run`` changed since train wrote them (leaving out
    checkpoint ``read_later``)."""
    changed = changed_since_written(run, read_later=read_later)
    if changed:
        raise ConfigError(
            f"{source}: {where}: {run} holds a run whose files changed since assay train wrote "
            f"them ({_shown(changed)}); {outcome} the changes; nothing was changed; copy them "
            "out first"
        )


def run_of(path: Path) -> Path:
    """The run directory a ``--resume`` path names: the path, or the run holding a step dir."""
    return path.parent if (path / MANIFEST).is_file() else path


def _check_resume(out: Path, source: str, resume: Path, locked: bool) -> None:
    """A resumed run writes into ``out``: refuse a ``resume`` path that holds no checkpoint
    unless it is ``out`` itself (a run killed before its first save), and refuse to write a
    resumed run into an ``out`` that holds another run."""
    run = run_of(resume)
    if not run.exists():
        raise ConfigError(f"{source}: --resume {resume}: no such run directory")
    if not is_marked_run(run):
        raise ConfigError(
            f"{source}: --resume {resume}: holds no {RUN_MARKER} marker, so assay train did "
            "not create it (a run from before the marker: see the README's Train section); "
            "to start afresh, leave out --resume"
        )
    same = run.resolve() == out.resolve()
    if not_started(run) and not same:
        raise ConfigError(
            f"{source}: --resume {resume}: holds no checkpoint (no 'latest', no step-*); "
            f"to start this run afresh, leave out --resume"
        )
    if not same and holds_run(out, locked=locked):
        raise ConfigError(
            f"{source}: output.dir: {out} holds another run, and the run resumed from "
            f"{run} would write into it; set output.dir to {run} or choose an empty folder"
        )
    if same:  # resuming rewrites the run's own names (later checkpoints, metrics, latest)
        swapped = [n for n in not_written_by_train(run) if written_by_train(n)]
        if swapped:
            entry = run / swapped[0]
            raise ConfigError(
                f"{source}: --resume {resume}: {entry} {_kind_found(entry)}, which assay train "
                "did not write there; resuming would replace it; nothing was changed; move it "
                "away"
            )
        if locked:  # the checkpoint resumed from is checked file by file when it loads
            loaded = resume.name if resume != run else _latest_name(run)
            where = f"--resume {resume}"
            _refuse_changed(run, source, where, "resuming would rewrite", loaded)


def _check(
    out: Path,
    source: str,
    resume: str | os.PathLike[str] | None,
    overwrite: bool,
    *,
    locked: bool = False,
) -> None:
    if out.is_symlink() and not out.exists():
        raise ConfigError(
            f"{source}: output.dir: {out} is a symlink to a missing target; expected a folder"
        )
    if out.exists() and not out.is_dir():  # a user's file is never a run, nor overwritten
        raise ConfigError(f"{source}: output.dir: {out} is a file, not a folder; choose a folder")
    if resume and overwrite:
        raise ConfigError(f"{source}: --resume and --overwrite exclude each other")
    if resume:
        _check_resume(out, source, Path(resume), locked)
    elif not holds_run(out, locked=locked):
        return
    elif not is_marked_run(out):
        raise _foreign(out, source, locked)
    elif overwrite:
        _check_replaceable(out, source, locked)
    else:
        raise ConfigError(
            f"{source}: output.dir: {out} already holds a run; pass --resume {out} to "
            "continue it or --overwrite to delete it and start again"
        )


class RunClaim:
    """The claim of one run folder for the life of a run: its lock, and with ``--overwrite``
    the old run moved aside (``replaced``) until the new run's first checkpoint."""

    def __init__(self, out: Path, source: str, lock: RunLock) -> None:
        self.out, self.source, self.lock = out, source, lock
        self.replaced: Path | None = None

    def replace_old_run(self) -> None:
        """Move the run at ``out`` aside in one rename (nothing is lost if it fails) and lock
        a fresh, empty ``out`` in its place."""
        aside = _move_aside(self.out, self.source)
        old = self.lock
        old.moved(aside)
        try:
            self.lock = acquire(self.out, self.source)
        except BaseException:  # another writer took the name in between: leave it alone
            self.lock = old
            if not self.out.exists():
                os.replace(aside, self.out)
                old.moved(self.out)
            raise
        old.release()
        self.replaced = aside

    def checkpointed(self) -> str | None:
        """The new run has a checkpoint: delete the old one. Returns None, or one line saying
        the old run could not be deleted and where it was left (the new run is kept)."""
        aside, self.replaced = self.replaced, None
        if aside is None:
            return None
        try:
            _remove(aside)
        except OSError as exc:
            return (
                f"{self.source}: --overwrite: the old run, moved whole to {aside}, could not be "
                f"deleted ({exc.strerror or exc}); the new run is in {self.out}; delete {aside} "
                "by hand"
            )
        return None

    def _put_back(self) -> None:
        """The new run failed before its first checkpoint: restore the old run at ``out``."""
        aside, self.replaced = self.replaced, None
        if aside is None:
            return
        failed = _unused_name(self.out, "failed")
        with contextlib.suppress(FileNotFoundError):
            os.replace(self.out, failed)
            self.lock.moved(failed)
        os.replace(aside, self.out)
        with contextlib.suppress(OSError):
            _remove(failed)

    def release(self, *, failed: bool) -> None:
        """End the claim: a ``failed`` run that never checkpointed gives the old run back;
        then the lock is released (and a folder it created for nothing is removed)."""
        try:
            if failed:
                self._put_back()
            elif self.replaced is not None:  # ended well without a checkpoint (--stop-at 0)
                self.checkpointed()
        finally:
            _unmark_if_empty(self.out)
            self.lock.release()


def _move_aside(out: Path, source: str) -> Path:
    aside: Path | None = None
    try:
        aside = _unused_name(out, "replaced")
        os.replace(out, aside)
    except OSError as exc:
        if aside is not None:
            with contextlib.suppress(OSError):
                aside.rmdir()  # the name reserved for nothing: leave no trace
        raise ConfigError(
            f"{source}: --overwrite: cannot move the old run {out} aside "
            f"({exc.strerror or exc}); nothing was deleted"
        ) from None
    return aside


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def claim_run_dir(
    out: Path, source: str, *, resume: str | os.PathLike[str] | None, overwrite: bool
) -> RunClaim:
    """Check the run directory, take its lock, check again under the lock, and with
    ``overwrite`` move an old run aside; the caller ends the claim with
    :meth:`RunClaim.release`.

    ConfigError naming the config's ``output.dir`` when it already holds a run and neither
    ``resume`` (the path to continue from) nor ``overwrite`` is set, or when both are; when it
    holds files but no run marker; with ``overwrite``, when it is a symlink or its run also
    holds files ``assay train`` does not write; for a ``resume`` path that is not a marked run,
    or whose run would be written into another run; and when another process holds the folder
    (naming its pid and start time). A refusal writes nothing: a folder created only to hold
    the lock is removed again.
    """
    refuse_if_held(out, source)
    _check(out, source, resume, overwrite)  # refuse early, before touching anything
    lock = acquire(out, source)
    claim = RunClaim(out, source, lock)
    try:
        _check(out, source, resume, overwrite, locked=True)  # again, under the lock
        if overwrite and holds_run(out, locked=True):
            claim.replace_old_run()
        _mark(claim.out)
    except BaseException:
        claim.release(failed=True)  # an old run already moved aside goes back
        raise
    return claim
