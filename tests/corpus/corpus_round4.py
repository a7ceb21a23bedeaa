"""Issue-41 corpus classes: archive streaming caps, concurrent writers, interrupted imports,
status files, the tensorboard writer, YAML 1.1 scalars, Unicode line separators and caps on
every reader. Each case is one CLI run (in this process); a case that needs another writer
holding the run's lock or a fault armed gets it from an ``around`` context entered for the
run, from outside the product. Legal inputs (``accept``) must run and say ``expect``.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import random
import shutil
import sys
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from corpus_harness import Case
from corpus_inputs import GOOD_ROWS, base_config, make_receipt
from corpus_outputs import good_run, write_config

# kind -> what the class covers (gate-robustness claims each class and reports its size)
CLASSES = {
    "archive_caps": "import-gpu archives: caps while streaming, manifest types, corrupt streams",
    "concurrent_writers": "a second writer into a run folder another process holds",
    "interrupted_imports": "an import starved of disk mid-write, and its completion",
    "status_files": "run-state.json, metrics.jsonl and latest of the wrong shape",
    "tensorboard_writer": "an events folder, an install or a disk that fails the writer",
    "yaml11_scalars": "YAML 1.1 octal, hex, base-60, dates and yes/no outside booleans",
    "line_separators": "U+2028/U+2029 inside JSON Lines entries (legal)",
    "reader_caps": "every reader of a user file capped: /dev/zero, grown files",
}
ZERO = Path("/dev/zero")


@dataclass(frozen=True)
class HoldLock:
    """Another writer: hold ``folder``'s run lock for the case."""

    folder: Path

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        from assay.train.run.lock import acquire

        lock = acquire(self.folder, "another writer")
        try:
            yield
        finally:
            lock.release()


@dataclass(frozen=True)
class FailWrite:
    """A full disk at the ``n``-th write-side filesystem call of the case."""

    n: int

    def __call__(self):
        from assay_testing.faults import FailAt

        return FailAt(self.n)


@dataclass(frozen=True)
class BrokenTensorboard:
    """A tensorboard that is installed but does not import."""

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        saved = sys.modules.get("torch.utils.tensorboard")
        sys.modules["torch.utils.tensorboard"] = None  # type: ignore[assignment]
        try:
            yield
        finally:
            if saved is None:
                sys.modules.pop("torch.utils.tensorboard", None)
            else:
                sys.modules["torch.utils.tensorboard"] = saved


@dataclass(frozen=True)
class FullDiskUnderWriter:
    """ENOSPC in tensorboard's writer thread once a few records are written."""

    after: int = 6

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        import errno

        from tensorboard.summary.writer import record_writer

        real, count, after = record_writer.RecordWriter.write, [0], self.after

        def write(writer, data):
            count[0] += 1
            if count[0] > after:
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(writer, data)

        record_writer.RecordWriter.write = write
        try:
            yield
        finally:
            record_writer.RecordWriter.write = real


def _kind(name: str) -> str:
    return name.split(".", 1)[0]


# -- archives -------------------------------------------------------------------------------
def _home_and_archive(root: Path) -> tuple[Path, Path]:
    """(home records folder with one receipt, rendered; archive of one box receipt after it)."""
    from assay.cli import main
    from assay.qualify.ledger.archive import pack
    from assay.qualify.ledger.chain import chain_head

    home, box = root / "home", root / "box"
    make_receipt(home / "receipts", "home run")
    with contextlib.redirect_stdout(io.StringIO()):
        main(["render", "--receipts", str(home / "receipts"), "--records", str(home)])
    shutil.copytree(home, box)
    base = chain_head(box / "receipts", "corpus")
    make_receipt(box / "receipts", "box run")
    archive = root / "assay-gpu.tar.gz"
    pack(archive, box / "receipts", box, {"corpus": base}, {"commit": "0" * 40})
    return home, archive


def _tar_header(name: str, kind: bytes, size: int, fmt: int = tarfile.GNU_FORMAT) -> bytes:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size
    return info.tobuf(format=fmt)


def _import(name: str, archive: Path, home: Path, where: str, **more) -> Case:
    argv = (
        "import-gpu",
        str(archive),
        "--receipts",
        str(home / "receipts"),
        "--records",
        str(home),
    )
    return Case(name, _kind(name), argv, archive, where, home, **more)


def _rewritten(archive: Path, out: Path, change) -> Path:
    with tarfile.open(archive, "r:gz") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar}
    change(members)
    with tarfile.open(out, "w:gz") as tar:
        for member, data in members.items():
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out


def _manifest_edit(field_value):
    def change(members):
        manifest = json.loads(members["manifest.json"])
        manifest["files"] = field_value
        members["manifest.json"] = json.dumps(manifest).encode()

    return change


def archive_cases(root: Path) -> list[Case]:
    folder = root / "archive_caps"
    home, archive = _home_and_archive(folder)
    declared = 8 << 20
    made = {
        "long_name_8mib": (
            _tar_header("x", tarfile.GNUTYPE_LONGNAME, declared) + bytes(declared),
            "a long name declares 8,388,608 bytes",
        ),
        "pax_header_8mib": (
            _tar_header("x", tarfile.XHDTYPE, declared) + bytes(declared),
            "a pax header declares",
        ),
        "member_100mib": (_tar_header("big", tarfile.REGTYPE, 100 << 20), "member 'big' declares"),
        "symlink_member": (_tar_header("link", tarfile.SYMTYPE, 0), "is not a plain, safe"),
        "truncated": (_tar_header("cut", tarfile.REGTYPE, 4096) + bytes(100), "truncated"),
    }
    cases = []
    for name, (blocks, where) in made.items():
        path = folder / f"{name}.tar.gz"
        path.write_bytes(gzip.compress(blocks, compresslevel=1))
        cases.append(_import(f"archive_caps.{name}", path, home, where))
    bad_sum = bytearray(_tar_header("x", tarfile.REGTYPE, 0))
    bad_sum[150] ^= 0x01
    (folder / "checksum.tar.gz").write_bytes(gzip.compress(bytes(bad_sum)))
    cases.append(
        _import(
            "archive_caps.header_checksum", folder / "checksum.tar.gz", home, "corrupt tar header"
        )
    )
    for name, files, where in (
        ("manifest_path_number", [{"path": 7, "bytes": 1, "sha256": "0" * 64}], "files[0]"),
        ("manifest_files_object", {"path": "x"}, "files: expected a list"),
    ):
        path = _rewritten(archive, folder / f"{name}.tar.gz", _manifest_edit(files))
        cases.append(_import(f"archive_caps.{name}", path, home, where))
    noise = random.Random(0).randbytes(100_000)  # a large member, so damage lands inside it
    noisy = _rewritten(
        archive, folder / "noisy.tar.gz", lambda m: m.update({"logs/noise.bin": noise})
    )
    raw = noisy.read_bytes()
    for at in range(len(raw) // 2, len(raw) - 32):
        broken = raw[:at] + b"\x55" * 16 + raw[at + 16 :]
        try:
            zlib.decompressobj(31).decompress(broken)
        except zlib.error as err:
            if "invalid" in str(err):
                break
    (folder / "deflate.tar.gz").write_bytes(broken)
    cases.append(
        _import(
            "archive_caps.corrupt_deflate",
            folder / "deflate.tar.gz",
            home,
            "not a readable .tar.gz",
        )
    )
    cases.append(_import("archive_caps.archive_is_dev_zero", ZERO, home, "not a file"))
    return cases


def import_cases(root: Path) -> list[Case]:
    """A full disk at the first write and at the LEDGER's rename: refused, records as they
    were; a receipt left outside the ledger by a killed import: importing again completes."""
    from assay.qualify.ledger.archive import import_archive, read_archive
    from assay_testing.faults import FailAt

    folder = root / "interrupted_imports"
    home, archive = _home_and_archive(folder)
    dry = folder / "dry"
    shutil.copytree(home, dry)
    with FailAt(0) as counted:
        import_archive(archive, dry / "receipts", dry)
    events = counted.events
    # the first byte written (staging: nothing placed yet), and the LEDGER's rename
    first_write = next(i for i, e in enumerate(events) if e in ("write", "file.write")) + 1
    ledger_rename = (events.index("replace") if "replace" in events else len(events) - 1) + 1
    cases = []
    for name, n in (("first_write", first_write), ("ledger_rename", ledger_rename)):
        records = folder / name
        shutil.copytree(home, records)
        cases.append(
            _import(
                f"interrupted_imports.enospc_{name}",
                archive,
                records,
                "No space left on device",
                around=FailWrite(n),
            )
        )
    left = folder / "left_behind"
    shutil.copytree(home, left)
    _, members = read_archive(archive)
    member = next(m for m in members if m.startswith("receipts/corpus/"))
    (left / "receipts" / "corpus" / Path(member).name).write_bytes(members[member])
    cases.append(
        _import(
            "interrupted_imports.rerun_completes", archive, left, "", accept=True, expect="imported"
        )
    )
    return cases


# -- runs -----------------------------------------------------------------------------------
def concurrent_cases(root: Path, model: Path, run: tuple[Path, Path, Path]) -> list[Case]:
    train, _config, run_dir = run
    folder = root / "concurrent_writers"
    folder.mkdir(parents=True)
    held = folder / "held"
    shutil.copytree(run_dir, held)
    config = write_config(folder / "second.yaml", base_config(model, train, held))
    fresh = write_config(folder / "fresh.yaml", base_config(model, train, folder / "fresh-run"))
    where = "is in use by another assay process (pid"
    cases = [
        Case(
            f"concurrent_writers.{name}",
            "concurrent_writers",
            argv,
            cfg,
            where,
            folder,
            around=HoldLock(out),
        )
        for name, argv, cfg, out in (
            ("fresh_run", ("train", str(fresh), "--no-progress"), fresh, folder / "fresh-run"),
            (
                "resume",
                ("train", str(config), "--resume", str(held), "--no-progress"),
                config,
                held,
            ),
            ("overwrite", ("train", str(config), "--overwrite", "--no-progress"), config, held),
        )
    ]
    stale = folder / "stale"
    stale.mkdir()
    stale_config = write_config(folder / "stale.yaml", base_config(model, train, stale / "run"))
    (stale / "run").mkdir()
    (stale / "run" / ".assay-run.lock").write_text('{"pid": 1, "started": "long ago"}')
    cases.append(
        Case(
            "concurrent_writers.stale_lock_of_a_killed_writer",
            "concurrent_writers",
            ("train", str(stale_config), "--no-progress"),
            stale_config,
            "",
            folder,
            accept=True,
            expect="trained",
        )
    )
    return cases


def status_cases(root: Path) -> list[Case]:
    folder = root / "status_files"
    bodies = {
        "state_is_a_list": ("run-state.json", b"[]", "expected a JSON object"),
        "state_word_unknown": ("run-state.json", b'{"state": 3}', "state: expected one of"),
        "seconds_is_text": ("metrics.jsonl", b'{"step": 1, "seconds": "0.5"}\n', ":1: seconds"),
        "seconds_infinite": ("metrics.jsonl", b'{"step": 1, "seconds": Infinity}\n', ":1: sec"),
        "step_is_text": ("metrics.jsonl", b'{"step": "2"}\n', ":1: step"),
        "latest_not_utf8": ("latest", b"\xff\xfe", "not UTF-8 text"),
        "latest_escapes": ("latest", b"../../etc", "is not a checkpoint name"),
        "latest_names_a_missing_checkpoint": ("latest", b"step-000009", "which is not a folder"),
        "pid_is_text": ("run-state.json", b'{"state": "running", "pid": "1"}', "pid: expected"),
        "start_ticks_fractional": (
            "run-state.json",
            b'{"state": "running", "pid": 1, "start_ticks": 1.5}',
            "start_ticks: expected",
        ),
    }
    cases = []
    for name, (file, body, where) in bodies.items():
        run = folder / name
        run.mkdir(parents=True)
        (run / "config.yaml").write_text("steps: 4\n")
        (run / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0, "seconds": 0.5}\n')
        (run / file).write_bytes(body)
        cases.append(
            Case(
                f"status_files.{name}", "status_files", ("status", str(run)), run / file, where, run
            )
        )
    # a run file that is not a file is refused by name, never read as "absent" nor blocked on
    for file in ("metrics.jsonl", "run-state.json", "latest", "config.yaml"):
        run = folder / f"fifo_{file}"
        run.mkdir(parents=True)
        for other in ("config.yaml", "metrics.jsonl"):
            if other != file:
                (run / other).write_text("steps: 4\n" if other == "config.yaml" else "")
        os.mkfifo(run / file)
        cases.append(
            Case(
                f"status_files.{file}_is_a_fifo",
                "status_files",
                ("status", str(run)),
                run / file,
                "not a regular file",
                run,
            )
        )
    reused = folder / "pid_reused"
    reused.mkdir(parents=True)
    (reused / "config.yaml").write_text("steps: 4\n")
    state = {"state": "running", "pid": os.getpid(), "start_ticks": 1, "updated": "x"}
    (reused / "run-state.json").write_text(json.dumps(state))
    cases.append(
        Case(
            "status_files.pid_reused_by_a_live_process",
            "status_files",
            ("status", str(reused)),
            reused,
            "",
            reused,
            accept=True,
            expect=f"failed (process {os.getpid()} is gone",
        )
    )
    return cases


def tensorboard_cases(root: Path, model: Path, run: tuple[Path, Path, Path]) -> list[Case]:
    train, _config, run_dir = run
    folder = root / "tensorboard_writer"
    folder.mkdir(parents=True)
    blocked = folder / "blocked"
    shutil.copytree(run_dir, blocked)
    (blocked / "tensorboard").write_text("a file where the events folder goes")
    config = write_config(folder / "blocked.yaml", base_config(model, train, blocked))
    report = ("--report-to", "tensorboard", "--no-progress")
    broken = write_config(folder / "broken.yaml", base_config(model, train, folder / "b-run"))
    full = write_config(folder / "full.yaml", base_config(model, train, folder / "f-run"))
    quiet = folder / "nothing-to-watch"  # the full-disk run trains and saves; judged by its line
    quiet.mkdir()
    return [
        Case(
            "tensorboard_writer.events_path_is_a_file",
            "tensorboard_writer",
            ("train", str(config), "--resume", str(blocked), *report),
            blocked / "tensorboard",
            "exists and is not a folder",
            folder,
        ),
        Case(
            "tensorboard_writer.installed_but_broken",
            "tensorboard_writer",
            ("train", str(broken), *report),
            Path("--report-to tensorboard"),
            "installed but does not import",
            folder,
            around=BrokenTensorboard(),
        ),
        Case(
            "tensorboard_writer.disk_full_in_writer_thread",
            "tensorboard_writer",
            ("train", str(full), *report),
            folder / "f-run" / "tensorboard",
            "No space left on device",
            quiet,
            around=FullDiskUnderWriter(),
        ),
    ]


YAML11 = {
    "steps_octal": ("steps: 2", "steps: 010", "steps: 010 has a leading zero"),
    "seed_hex": ("seed: 3", "seed: 0x1F", "seed: 0x1F is a hexadecimal"),
    "seed_octal_12": ("seed: 3", "seed: 0o17", "an octal integer"),
    "seed_base60": ("seed: 3", "seed: 1:30", "seed: YAML 1.1 reads 1:30"),
    "tokenizer_no": ("tokenizer: ", "tokenizer: no\nx-old: ", "tokenizer: YAML 1.1 reads 'no'"),
    "format_on": ("format: text", "format: on", "data.format: YAML 1.1 reads 'on'"),
    "layers_leading_zero": ("rank: 2", "rank: 2\n  layers: [0, 01]", "adapter.layers[1]"),
    "eval_date": ("format: text", "format: text\n  eval: 2026-01-02", "data.eval: YAML 1.1"),
}


def yaml_cases(root: Path, model: Path, train: Path) -> list[Case]:
    import yaml

    folder = root / "yaml11_scalars"
    folder.mkdir(parents=True)
    good = yaml.safe_dump(base_config(model, train, folder / "run"))
    cases = []
    for name, (old, new, where) in YAML11.items():
        assert old in good, (name, old)
        path = folder / f"{name}.yaml"
        path.write_text(good.replace(old, new, 1))
        cases.append(
            Case(
                f"yaml11_scalars.{name}",
                "yaml11_scalars",
                ("train", str(path)),
                path,
                where,
                folder,
            )
        )
    legal = folder / "legal"
    legal.mkdir()
    body = base_config(model, train, legal / "run")
    path = write_config(legal / "truncate_yes.yaml", body)
    path.write_text(path.read_text().replace("format: text", "format: text\n  truncate: yes"))
    cases.append(
        Case(
            "yaml11_scalars.yes_on_a_boolean_setting",
            "yaml11_scalars",
            ("train", str(path), "--no-progress"),
            path,
            "",
            legal,
            accept=True,
            expect="trained",
        )
    )
    return cases


def separator_cases(root: Path, model: Path) -> list[Case]:
    """Legal JSON Lines whose strings hold U+2028/U+2029 raw: read whole, not split."""
    from assay.cli import main

    folder = root / "line_separators"
    folder.mkdir(parents=True)
    rows = folder / "train.jsonl"
    text = [
        json.dumps({"text": f"line\u2028sep {r['text']}\u2029"}, ensure_ascii=False)
        for r in GOOD_ROWS
    ]
    rows.write_text("".join(f"{t}\n" for t in text), "utf-8")
    body = base_config(model, rows, folder / "run")
    body["data"]["truncate"] = True  # the separators add bytes; the rows must still fit
    config = write_config(folder / "rows.yaml", body)
    run = folder / "status"
    run.mkdir()
    (run / "config.yaml").write_text("steps: 4\n")
    line = {"step": 3, "loss": 1.5, "seconds": 0.5, "note": "a\u2028b"}
    (run / "metrics.jsonl").write_text(json.dumps(line, ensure_ascii=False) + "\n", "utf-8")
    receipts = folder / "records"
    make_receipt(receipts / "receipts", "a plain note")
    ledger = receipts / "receipts" / "corpus" / "LEDGER"
    ledger.write_text(ledger.read_text("utf-8").replace("# ", "# noted\u2028by hand: ", 1), "utf-8")
    with contextlib.redirect_stdout(io.StringIO()):
        main(["render", "--receipts", str(receipts / "receipts"), "--records", str(receipts)])
    return [
        Case(
            "line_separators.data_rows",
            "line_separators",
            ("train", str(config), "--no-progress"),
            config,
            "",
            folder,
            accept=True,
            expect="trained",
        ),
        Case(
            "line_separators.metrics_line",
            "line_separators",
            ("status", str(run)),
            run,
            "",
            run,
            accept=True,
            expect="at step 3 of 4",
        ),
        Case(
            "line_separators.ledger_comment",
            "line_separators",
            ("verify", "--receipts", str(receipts / "receipts"), "--records", str(receipts)),
            ledger,
            "",
            receipts,
            accept=True,
            expect="ok: receipts",
        ),
    ]


def reader_cases(root: Path, model: Path, run: tuple[Path, Path, Path]) -> list[Case]:
    """Files that never end (/dev/zero) or grew past what their writer promised."""
    train, _config, run_dir = run
    folder = root / "reader_caps"
    folder.mkdir(parents=True)
    linked = folder / "zero.yaml"
    linked.symlink_to(ZERO)
    data = write_config(folder / "data.yaml", base_config(model, ZERO, folder / "run"))
    state = folder / "state-run"
    state.mkdir()
    (state / "config.yaml").write_text("steps: 4\n")
    (state / "run-state.json").symlink_to(ZERO)
    grown = folder / "grown"
    shutil.copytree(run_dir, grown)
    step = grown / (grown / "latest").read_text().strip()
    with (step / "trainables.safetensors").open("ab") as handle:
        handle.write(bytes(1024))
    resume = write_config(folder / "grown.yaml", base_config(model, train, grown))
    return [
        Case(
            "reader_caps.config_is_dev_zero",
            "reader_caps",
            ("train", str(linked)),
            linked,
            "over the limit",
            folder,
        ),
        Case(
            "reader_caps.data_is_dev_zero",
            "reader_caps",
            ("train", str(data)),
            ZERO,
            "not a regular file",
            folder,
        ),
        Case(
            "reader_caps.eval_data_is_dev_zero",
            "reader_caps",
            ("eval", str(data), "--data", str(ZERO)),
            ZERO,
            "not a regular file",
            folder,
        ),
        Case(
            "reader_caps.run_state_is_dev_zero",
            "reader_caps",
            ("status", str(state)),
            state / "run-state.json",
            "not a regular file",
            folder,
        ),
        Case(
            "reader_caps.checkpoint_file_grew",
            "reader_caps",
            ("train", str(resume), "--resume", str(grown), "--no-progress"),
            step / "trainables.safetensors",
            "the manifest's size",
            folder,
        ),
        Case(
            "reader_caps.allowed_signers_dev_zero",
            "reader_caps",
            ("attest", "--verify", str(linked), "--allowed-signers", str(ZERO)),
            ZERO,
            "not a regular file",
            folder,
        ),
    ]


def round4_cases(root: Path, model: Path) -> list[Case]:
    """Every issue-41 class under ``root``, around a valid tiny run stopped after step 1."""
    root.mkdir(parents=True, exist_ok=True)
    run = good_run(root, model)
    cases = [
        *archive_cases(root),
        *import_cases(root),
        *concurrent_cases(root, model, run),
        *status_cases(root),
        *yaml_cases(root, model, run[0]),
        *separator_cases(root, model),
        *reader_cases(root, model, run),
    ]
    try:
        import tensorboard  # noqa: F401
    except ImportError:  # the class then has no cases, which its claim counts as a failure
        return cases
    return [*cases, *tensorboard_cases(root, model, run)]
