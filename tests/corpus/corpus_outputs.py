"""Issue-16 cases about what a run writes: re-sealed checkpoints, protected run directories,
export destinations and PEFT folders whose manifest no longer binds; and the helpers every
issue-16 builder shares (the valid run the cases break, config writing)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import yaml
from corpus_harness import Case
from corpus_inputs import GOOD_ROWS, TOKENIZER, _jsonl, base_config, make_receipt

from assay_testing.forgery import reseal

CASES = yaml.safe_load((Path(__file__).with_name("robust_cases.yaml")).read_text("utf-8"))

# The byte tokenizer (assay_testing.byte_tokenizer) loads in milliseconds where SmolLM2's takes
# seconds; robust_cases writes it and every config here uses it.
BYTES_TOKENIZER: list[Path] = []


def write_config(path: Path, config: dict[str, Any]) -> Path:
    if BYTES_TOKENIZER and config.get("tokenizer") == TOKENIZER:
        config = {**config, "tokenizer": str(BYTES_TOKENIZER[0])}
        if config["data"].get("seq_len") == 32:  # bytes are longer than SmolLM2 tokens
            config["data"] = {**config["data"], "seq_len": 64}
    path.write_text(yaml.safe_dump(config))
    return path


def train_case(name: str, kind: str, path: Path, where: str, watch: Path, *extra: str) -> Case:
    return Case(f"{kind}.{name}", kind, ("train", str(path), "--json", *extra), path, where, watch)


def good_run(root: Path, model: Path) -> tuple[Path, Path, Path]:
    """(train.jsonl, config, run dir) of a valid tiny run stopped after step 1."""
    from assay.cli import main

    folder = root / "good-run"
    folder.mkdir(parents=True)
    train = folder / "train.jsonl"
    train.write_bytes(_jsonl(GOOD_ROWS))
    run = folder / "run"
    config = write_config(folder / "config.yaml", base_config(model, train, run))
    if main(["train", str(config), "--json", "--stop-at", "1", "--no-progress"]) != 0:
        raise RuntimeError("the valid run behind the issue-16 corpus failed")
    return train, config, run


def _first_state(tensors: dict, suffix: str) -> str:
    return next(k for k in sorted(tensors) if k.endswith(suffix))


def _reshape_moment(tensors: dict) -> None:
    import torch

    tensors[_first_state(tensors, "/exp_avg")] = torch.zeros(3, 3)


def _nan_trainable(tensors: dict) -> None:
    import torch

    key = sorted(tensors)[0]
    tensors[key] = torch.full_like(tensors[key], float("nan"))


def _negative_second_moment(tensors: dict) -> None:
    import torch

    key = _first_state(tensors, "/exp_avg_sq")
    tensors[key] = -torch.ones_like(tensors[key])


# The safetensors edits robust_cases.yaml names under `tensors:`.
TENSOR_EDITS = {
    "reshape_moment": _reshape_moment,
    "nan_trainable": _nan_trainable,
    "negative_second_moment": _negative_second_moment,
}


def _edit_step(step: Path, spec: dict[str, Any]) -> None:
    """Apply one robust_cases.yaml ``resealed`` edit to a checkpoint step directory."""
    path = step / spec["file"]
    if "tensors" in spec:
        from safetensors.torch import load_file, save_file

        tensors = load_file(path)
        TENSOR_EDITS[spec["tensors"]](tensors)
        save_file(tensors, path)
        return
    data = json.loads(path.read_text())
    if spec.get("clear"):
        data.clear()
    data.update(spec.get("set", {}))
    path.write_text(json.dumps(data))


def resealed_cases(root: Path, model: Path, good: tuple[Path, Path, Path]) -> list[Case]:
    """Checkpoints edited and re-sealed: each must be refused naming the file and field."""
    train, _config, run = good
    folder = root / "resealed"
    folder.mkdir(parents=True)
    cases = []
    for name, spec in CASES["resealed"].items():
        copy = folder / name
        shutil.copytree(run, copy)
        step = copy / "step-000001"
        _edit_step(step, spec)
        reseal(step)
        config = write_config(folder / f"{name}.yaml", base_config(model, train, copy))
        argv = ("train", str(config), "--resume", str(copy), "--json")
        cases.append(
            Case(f"resealed.{name}", "resealed", argv, step / spec["file"], spec["where"], copy)
        )
    return cases


def rundir_cases(root: Path, model: Path, good: tuple[Path, Path, Path]) -> list[Case]:
    """Training into a directory that holds a run, without --resume or --overwrite."""
    train, _config, run = good
    folder = root / "rundir"
    folder.mkdir(parents=True)
    copy = folder / "run"
    shutil.copytree(run, copy)
    config = write_config(folder / "config.yaml", base_config(model, train, copy))
    cases = [
        train_case("existing_run", "rundir", config, "output.dir", folder),
        train_case(
            "resume_and_overwrite",
            "rundir",
            config,
            "--overwrite",
            folder,
            "--resume",
            str(copy),
            "--overwrite",
        ),
    ]
    stray = folder / "stray"
    stray.mkdir()
    (stray / "notes.txt").write_text("someone else's file\n")
    config = write_config(folder / "stray.yaml", base_config(model, train, stray))
    cases.append(train_case("foreign_files", "rundir", config, "output.dir", folder))
    return cases


def export_cases(root: Path, model: Path, good: tuple[Path, Path, Path]) -> list[Case]:
    """Export into occupied destinations, and PEFT folders whose manifest no longer binds."""
    from assay.cli import main

    _train, _config, run = good
    folder = root / "export"
    folder.mkdir(parents=True)
    cases = []
    occupied = folder / "occupied"
    occupied.mkdir()
    (occupied / "adapter_config.json").write_text("{}\n")
    argv = ("export", str(run), "--format", "peft", "--out", str(occupied))
    cases.append(Case("export.non_empty_peft", "export", argv, occupied, "--force", folder))
    argv = ("export", str(run), "--format", "safetensors", "--out", str(occupied))
    cases.append(Case("export.non_empty_merged", "export", argv, occupied, "--force", folder))
    existing = folder / "model.gguf"
    existing.write_bytes(b"old")
    argv = ("export", str(run), "--format", "gguf", "--out", str(existing))
    cases.append(Case("export.existing_gguf", "export", argv, existing, "--force", folder))

    clean = folder / "peft"
    if main(["export", str(run), "--format", "peft", "--out", str(clean), "--json"]) != 0:
        raise RuntimeError("the valid export behind the export cases failed")

    def broken(name: str, change: Any, file: str, where: str) -> None:
        copy = folder / name
        shutil.copytree(clean, copy)
        change(copy)
        argv = ("load-adapter", str(model), str(copy))
        cases.append(Case(f"export.{name}", "export", argv, copy / file, where, copy))

    def edit_config(copy: Path) -> None:
        data = json.loads((copy / "adapter_config.json").read_text())
        data["use_rslora"] = True
        (copy / "adapter_config.json").write_text(json.dumps(data))

    broken("config_edited", edit_config, "adapter_config.json", "sha256")
    broken(
        "weights_truncated",
        lambda c: (c / "adapter_model.safetensors").write_bytes(
            (c / "adapter_model.safetensors").read_bytes()[:-8]
        ),
        "adapter_model.safetensors",
        "sha256",
    )
    broken(
        "weights_missing",
        lambda c: (c / "adapter_model.safetensors").unlink(),
        "adapter_model.safetensors",
        "missing",
    )
    broken(
        "stray_file",
        lambda c: (c / "adapter_model.bin").write_bytes(b"x"),
        "adapter_model.bin",
        "not listed",
    )
    broken(
        "manifest_garbage",
        lambda c: (c / "assay_manifest.json").write_text('{"a": 1}'),
        "assay_manifest.json",
        "format",
    )
    cases += _not_a_run_cases(folder, model)
    return cases


def _not_a_run_cases(folder: Path, model: Path) -> list[Case]:
    """A folder that is neither a run nor a checkpoint, named as export's source and as
    generate's checkpoint, beside a config.yaml the user did not name: the refusal names the
    folder itself (found by the issue-52 adversary)."""
    beside = folder / "beside"
    beside.mkdir()
    (beside / "config.yaml").write_text("steps: 1\n")
    empty = beside / "empty"
    empty.mkdir()
    out = str(folder / "from-empty")
    argvs = {
        "export_source_not_a_run": ("export", str(empty), "--format", "peft", "--out", out),
        "generate_checkpoint_not_a_run": (
            "generate",
            str(model),
            "--prompt",
            "hi",
            "--checkpoint",
            str(empty),
        ),
    }
    return [
        Case(f"export.{name}", "export", argv, empty, "not a run folder", beside)
        for name, argv in argvs.items()
    ]


def replace_cases(root: Path, model: Path, good: tuple[Path, Path, Path]) -> list[Case]:
    """Issue 52, rule 1: a replacing command (``train --overwrite``, ``train --resume``,
    ``export --force``, ``publish --html``) refused on what it did not write: a user's folder,
    another run's step folder, a file that is not an earlier export."""
    train, _config, run = good
    folder = root / "replace"
    folder.mkdir(parents=True)
    mine = folder / "thesis"
    mine.mkdir()
    (mine / "thesis.tex").write_text("\\documentclass{article}\n")
    (mine / "notes.md").write_text("my notes\n")
    copy = folder / "run"
    shutil.copytree(run, copy)
    cases = []
    for name, out, extra in (
        ("overwrite_user_folder", mine, ("--overwrite",)),
        ("overwrite_step_folder", copy / "step-000001", ("--overwrite",)),
        ("resume_user_folder", mine, ("--resume", str(mine))),
    ):
        config = write_config(folder / f"{name}.yaml", base_config(model, train, out))
        where = "--resume" if "--resume" in extra else "output.dir"
        cases.append(train_case(name, "replace", config, where, folder, *extra))
    export_to = {
        "peft": mine,
        "safetensors": copy / "step-000001",
        "gguf": mine / "notes.md",
    }
    for fmt, out in export_to.items():
        argv = ("export", str(run), "--format", fmt, "--out", str(out), "--force")
        cases.append(Case(f"replace.export_{fmt}_force", "replace", argv, out, "--force", folder))
    argv = ("publish", "--html", str(mine))
    cases.append(Case("replace.publish_user_folder", "replace", argv, mine, "--html", folder))
    linked = folder / "linked_run"  # a run whose checkpoint is the user's symlink
    shutil.copytree(run, linked)
    (linked / "step-000001").rename(folder / "kept-step")
    (linked / "step-000001").symlink_to(folder / "kept-step")
    config = write_config(folder / "overwrite_step_link.yaml", base_config(model, train, linked))
    cases.append(
        train_case("overwrite_step_link", "replace", config, "output.dir", folder, "--overwrite")
    )
    cases.append(_edited_site_case(folder))
    cases.extend(_third_adversary_cases(folder, model, train, run))
    cases.extend(_edited_run_cases(folder, model, train, run))
    return cases


def _edited_run_cases(folder: Path, model: Path, train: Path, run: Path) -> list[Case]:
    """A run whose own files the user changed after train wrote them: a note appended to the
    metrics (--overwrite would delete it), a checkpoint's cursor edited (the same), a comment
    added to the run's config (--resume would rewrite it); and a GGUF export changed since."""
    from assay.adapters.manifest import write_manifest

    def append_note(path: Path) -> None:
        path.write_bytes(path.read_bytes() + b'{"my": "annotation"}\n')

    def edit_cursor(path: Path) -> None:
        path.write_bytes(path.read_bytes().replace(b"0", b"1", 1))

    def comment(path: Path) -> None:
        path.write_bytes(path.read_bytes() + b"# my note on this run\n")

    cases = []
    for name, edited, edit, flag in (
        ("overwrite_edited_metrics", "metrics.jsonl", append_note, "--overwrite"),
        ("overwrite_edited_cursor", "step-000001/cursor.json", edit_cursor, "--overwrite"),
        ("resume_edited_config", "config.yaml", comment, "--resume"),
    ):
        copy = folder / f"{name}_run"
        shutil.copytree(run, copy)
        before = (copy / edited).read_bytes()
        edit(copy / edited)
        assert (copy / edited).read_bytes() != before, f"{name}: the edit changed nothing"
        config = write_config(folder / f"{name}.yaml", base_config(model, train, copy))
        extra = ("--resume", str(copy)) if flag == "--resume" else (flag,)
        where = "--resume" if flag == "--resume" else "output.dir"
        cases.append(train_case(name, "replace", config, where, folder, *extra))
    cases.append(_foreign_checkpoint_case(folder, model, train, run))
    cases.append(_twin_checkpoint_case(folder, model, train, run))
    noted = folder / "overwrite_events_note_run"  # a note of the user's in the events folder
    shutil.copytree(run, noted)
    (noted / "tensorboard").mkdir(exist_ok=True)
    (noted / "tensorboard" / "notes.txt").write_text("my notes on this run\n")
    config = write_config(folder / "overwrite_events_note.yaml", base_config(model, train, noted))
    cases.append(
        train_case("overwrite_events_note", "replace", config, "output.dir", folder, "--overwrite")
    )
    mine = folder / "users_files_under_export_names"  # bound by a hand-written manifest
    mine.mkdir()
    for name in ("adapter_config.json", "adapter_model.safetensors", "assay_adapter.json"):
        (mine / name).write_text("my thesis draft\n")
    write_manifest(mine, "peft")
    argv = ("export", str(run), "--format", "peft", "--out", str(mine), "--force")
    cases.append(
        Case(
            "replace.export_users_files_under_export_names",
            "replace",
            argv,
            mine,
            "--force",
            folder,
        )
    )
    cases.append(_edited_gguf_case(folder, run))
    return cases


def _twin_checkpoint_case(folder: Path, model: Path, train: Path, run: Path) -> Case:
    """A checkpoint of another run of the same config (so the same fingerprints) copied into
    the run under a name train never wrote there: --overwrite deleted it (found by the third
    issue-52 adversary); the marker's record does not hold it, and it is not the newest
    checkpoint a kill could have left unrecorded under the step its manifest names."""
    from assay.cli import main

    twin = folder / "twin_run"
    twin_config = write_config(folder / "twin.yaml", base_config(model, train, twin))
    if main(["train", str(twin_config), "--json", "--no-progress"]) != 0:
        raise RuntimeError("the twin run behind the twin-checkpoint case failed")
    copy = folder / "overwrite_edited_with_a_twin_runs_checkpoint_run"
    shutil.copytree(run, copy)
    shutil.copytree(twin / "step-000001", copy / "step-000005")
    name = "overwrite_edited_with_a_twin_runs_checkpoint"
    config = write_config(folder / f"{name}.yaml", base_config(model, train, copy))
    return train_case(name, "replace", config, "step-000005", folder, "--overwrite")


def _foreign_checkpoint_case(folder: Path, model: Path, train: Path, run: Path) -> Case:
    """Another run's checkpoint (another seed, so other fingerprints) copied to the name the
    resumed run saves next: resuming would replace it."""
    from assay.cli import main

    other = folder / "other_seed_run"
    other_config = write_config(
        folder / "other_seed.yaml", {**base_config(model, train, other), "seed": 99}
    )
    if main(["train", str(other_config), "--json", "--no-progress"]) != 0:
        raise RuntimeError("the other run behind the foreign-checkpoint case failed")
    copy = folder / "resume_edited_with_another_runs_checkpoint_run"
    shutil.copytree(run, copy)
    shutil.copytree(other / "step-000002", copy / "step-000002")
    config = write_config(
        folder / "resume_edited_with_another_runs_checkpoint.yaml", base_config(model, train, copy)
    )
    name = "resume_edited_with_another_runs_checkpoint"
    return train_case(name, "replace", config, "--resume", folder, "--resume", str(copy))


def _edited_gguf_case(folder: Path, run: Path) -> Case:
    """A GGUF export the user changed since (a byte of its last weight): --force keeps it."""
    from assay.cli import main

    gguf = folder / "edited_export.gguf"
    argv = ("export", str(run), "--format", "gguf", "--out", str(gguf))
    if main([*argv, "--json"]) != 0:
        raise RuntimeError("the GGUF export behind the edited-export case failed")
    data = bytearray(gguf.read_bytes())
    data[-2] ^= 0x01
    gguf.write_bytes(bytes(data))
    return Case(
        "replace.export_gguf_edited", "replace", (*argv, "--force"), gguf, "--force", folder
    )


def _third_adversary_cases(folder: Path, model: Path, train: Path, run: Path) -> list[Case]:
    """Issue 52, third adversary: a symlinked lock file (the holder record went where it
    pointed), a user's folder at the next checkpoint's name of a resumed run, a hand-written
    export manifest that lists a user's file."""
    from assay.adapters.manifest import write_manifest

    kept = folder / "kept-by-the-lock-link.txt"
    kept.write_text("the user's file a lock link names\n")
    locked = folder / "lock_link_run"
    shutil.copytree(run, locked)
    (locked / ".assay-run.lock").symlink_to(kept)
    config = write_config(folder / "overwrite_lock_link.yaml", base_config(model, train, locked))
    cases = [
        train_case("overwrite_lock_link", "replace", config, "output.dir", folder, "--overwrite")
    ]
    resumed = folder / "resume_next_step_run"
    shutil.copytree(run, resumed)
    (resumed / "step-000002").mkdir()  # the step the resumed run saves next
    (resumed / "step-000002" / "user.bin").write_bytes(b"the user's data\n")
    config = write_config(folder / "resume_next_step.yaml", base_config(model, train, resumed))
    cases.append(
        train_case(
            "resume_next_step", "replace", config, "--resume", folder, "--resume", str(resumed)
        )
    )
    forged = folder / "forged_export"
    forged.mkdir()
    (forged / "thesis.tex").write_text("\\documentclass{article}\n")
    write_manifest(forged, "peft")  # binds the user's file as an export would bind its own
    argv = ("export", str(run), "--format", "peft", "--out", str(forged), "--force")
    cases.append(Case("replace.export_forged_manifest", "replace", argv, forged, "--force", folder))
    return cases


def _edited_site_case(folder: Path) -> Case:
    """An earlier site whose copied LEDGER.txt the user edited: publishing again keeps it."""
    from assay.qualify.publishing.index import render_all
    from assay.qualify.publishing.site import build_site

    ledger = folder / "site_ledger"
    make_receipt(ledger / "receipts", "a plain note")
    render_all(ledger / "receipts", ledger)
    site = folder / "site"
    build_site(ledger / "receipts", ledger, site, root=ledger)
    edited = site / "receipts" / "corpus" / "LEDGER.txt"
    edited.write_bytes(edited.read_bytes() + b"my annotation\n")
    argv = ("publish", "--receipts", str(ledger / "receipts"), "--records", str(ledger))
    argv = (*argv, "--html", str(site))
    return Case("replace.publish_edited_site_ledger", "replace", argv, edited, "--html", folder)
