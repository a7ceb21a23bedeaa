"""Replacing commands act only on what they wrote (issue 52, rule 1).

Invariant: for any folder assay did not write, and for any file that is not an earlier
export, every command that replaces, renames over or deletes an output path (``train
--overwrite``, ``train`` into it, ``train --resume``, ``export --force`` in each format,
``publish --html``, the record and heads writers) refuses in one line naming the path, exits
2, and leaves every byte and name there as it was. Folder contents are generated, including
ones that imitate assay's own files (a ``latest`` pointer, a run state, a manifest, a marker of
another format). Controls: the same commands do replace what they wrote themselves.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assay.atomic import replace_generated
from assay.cli import main
from assay.errors import AssayError
from assay.train.run.folder import RUN_MARKER
from assay_testing.text_run import save_text_run
from assay_testing.tree_listing import tree_listing

USER_NAMES = ("thesis.tex", "notes.md", "data.csv", "photo.jpg", "README.md", "index.html")
LOOKALIKE_FILES = {
    "latest": b"step-000001\n",
    "run-state.json": json.dumps({"state": "finished", "step": 2}).encode(),
    "config.yaml": b"steps: 2\n",
    "metrics.jsonl": b'{"step": 1, "loss": 1.0}\n',
    "assay_manifest.json": json.dumps({"format": "assay.export/1", "files": {}}).encode(),
    "adapter_config.json": b"{}\n",
    RUN_MARKER: b'{"format": "assay.run/0"}\n',  # a marker of another format is not ours
    ".assay-run.lock": b"a user's file that has the lock's name\n",
}

names = st.one_of(
    st.sampled_from(USER_NAMES + tuple(LOOKALIKE_FILES)),
    st.text("abcdefghijklmnopqrstuvwxyz0123456789._-", min_size=1, max_size=12).filter(
        lambda n: n not in (".", "..")
    ),
)
entries = st.dictionaries(
    names,
    st.one_of(st.binary(max_size=64), st.dictionaries(names, st.binary(max_size=16), max_size=3)),
    min_size=1,
    max_size=6,
)


def _write(folder: Path, tree: dict) -> None:
    folder.mkdir(parents=True)
    for name, body in tree.items():
        if isinstance(body, dict):
            (folder / name).mkdir()
            _write_files(folder / name, body)
        else:
            (folder / name).write_bytes(LOOKALIKE_FILES.get(name, body))


def _write_files(folder: Path, files: dict) -> None:
    for name, body in files.items():
        (folder / name).write_bytes(body)


def _snapshot(root: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


def _cli(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


def _config_into(root: Path, keys: dict, out: Path) -> Path:
    config = {**keys, "adapter": {"rank": 2, "targets": ["q_proj"]}, "steps": 1, "seed": 1}
    config["output"] = {"dir": str(out), "save_every": 1}
    path = Path(tempfile.mkstemp(suffix=".yaml", dir=root)[1])
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A workspace with one finished run (the source of the exports the commands try)."""
    root = tmp_path_factory.mktemp("replace")
    keys = save_text_run(root / "ws", seed=0)
    path = _config_into(root, keys, root / "run")
    assert main(["train", str(path), "--json", "--no-progress"]) == 0
    return root, keys, root / "run"


def _replacing_commands(root: Path, keys: dict, run: Path, folder: Path) -> list[list[str]]:
    config = str(_config_into(root, keys, folder))
    file = next((p for p in sorted(folder.iterdir()) if p.is_file()), None)
    commands = [
        ["train", config, "--overwrite", "--no-progress"],
        ["train", config, "--no-progress"],
        ["train", config, "--resume", str(folder), "--no-progress"],
        ["export", str(run), "--format", "peft", "--out", str(folder), "--force"],
        ["export", str(run), "--format", "safetensors", "--out", str(folder), "--force"],
        ["export", str(run), "--format", "gguf", "--out", str(folder), "--force"],
        ["publish", "--receipts", str(root / "none"), "--html", str(folder)],
    ]
    if file is not None:
        commands.append(["export", str(run), "--format", "gguf", "--out", str(file), "--force"])
    return commands


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=entries)
def test_no_command_replaces_a_folder_it_did_not_write(trained, tree):
    root, keys, run = trained
    folder = Path(tempfile.mkdtemp(dir=root)) / "out"
    _write(folder, tree)
    before = _snapshot(folder)
    for argv in _replacing_commands(root, keys, run, folder):
        code, err = _cli(argv)
        assert code == 2, (argv, err)
        assert err.count("\n") == 1 and str(folder) in err, (argv, err)
        assert _snapshot(folder) == before, argv


@settings(max_examples=50, deadline=None)
@given(theirs=st.binary(max_size=200), ours=st.text(min_size=1, max_size=40))
def test_a_generated_file_replaces_only_its_own_kind(tmp_path_factory, theirs, ours):
    """The record, index and heads writers: a file whose first line differs is kept."""
    first = f"# Gate record: {ours.splitlines()[0] if ours.splitlines() else 'x'}\n"
    path = tmp_path_factory.mktemp("gen") / "gate.md"
    path.write_bytes(theirs)
    if theirs.split(b"\n", 1)[0] + b"\n" == first.encode():
        replace_generated(path, (first + "body\n").encode())
        assert path.read_bytes() == (first + "body\n").encode()
        return
    with pytest.raises(AssayError, match="was not written by this command"):
        replace_generated(path, (first + "body\n").encode())
    assert path.read_bytes() == theirs


def test_controls_each_command_replaces_what_it_wrote(trained):
    """The refusals above are not refusals of everything: a run, an export of each format
    and a site that assay wrote are replaced (and a marked run resumed)."""
    root, keys, run = trained
    config = str(_config_into(root, keys, run))
    assert _cli(["train", config, "--overwrite", "--no-progress"])[0] == 0
    assert (run / RUN_MARKER).is_file()
    for fmt, out in (("peft", "p"), ("safetensors", "s"), ("gguf", "g.gguf")):
        argv = ["export", str(run), "--format", fmt, "--out", str(root / out)]
        assert _cli(argv)[0] == 0
        assert _cli([*argv, "--force"])[0] == 0, fmt
    path = root / "gate.md"
    replace_generated(path, b"# Gate record: g\nold\n")
    replace_generated(path, b"# Gate record: g\nnew\n")
    assert path.read_bytes().endswith(b"new\n")


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(extra=st.dictionaries(names, st.binary(max_size=16), min_size=1, max_size=3))
def test_overwrite_refuses_a_run_that_holds_files_train_did_not_write(trained, extra):
    """A run folder with a user's notes (or the config being run) added is still a run, but
    --overwrite would delete them with it: refused, nothing changed (adversary case F2)."""
    from assay.train.run.folder import written_by_train

    root, keys, run = trained
    extra = {n: b for n, b in extra.items() if not written_by_train(n)}
    if not extra:
        return
    folder = Path(tempfile.mkdtemp(dir=root)) / "run"
    shutil.copytree(run, folder)
    _write_files(folder, extra)
    before = _snapshot(folder)
    code, err = _cli(["train", str(_config_into(root, keys, folder)), "--overwrite"])
    assert code == 2 and err.count("\n") == 1 and "assay train did not write" in err, err
    assert _snapshot(folder) == before


def test_every_entry_of_a_real_run_is_one_train_writes(trained):
    """RUN_ENTRIES is the list --overwrite trusts: a real run's folder holds nothing else."""
    from assay.train.loop import METRICS, RUN_CONFIG
    from assay.train.run.folder import RUN_ENTRIES, written_by_train
    from assay.train.run.state import RUN_STATE

    _root, _keys, run = trained
    assert {METRICS, RUN_CONFIG, RUN_STATE} <= RUN_ENTRIES
    assert all(written_by_train(p.name) for p in run.iterdir())


def test_overwrite_through_a_symlink_is_refused_and_leaves_nothing(trained):
    root, keys, run = trained
    link = Path(tempfile.mkdtemp(dir=root)) / "link"
    link.symlink_to(run)
    listing = sorted(p.name for p in link.parent.iterdir())
    code, err = _cli(["train", str(_config_into(root, keys, link)), "--overwrite"])
    assert code == 2 and "is a symlink" in err
    assert sorted(p.name for p in link.parent.iterdir()) == listing  # no reserved name left


def _swap_kind(run: Path, how: str, elsewhere: Path) -> None:
    """Put in ``run`` something of another kind under a name ``assay train`` writes."""
    step = next(p for p in sorted(run.iterdir()) if p.name.startswith("step-"))
    if how == "step_link":  # a user's symlink standing in for a checkpoint
        shutil.move(step, elsewhere / step.name)
        step.symlink_to(elsewhere / step.name)
    elif how == "link_in_step":
        (step / "notes.md").symlink_to(elsewhere / "notes.md")
    elif how == "folder_for_file":
        (run / "metrics.jsonl").unlink()
        (run / "metrics.jsonl").mkdir()
        (run / "metrics.jsonl" / "mine.txt").write_bytes(b"kept")
    elif how == "file_for_step":
        (run / "step-999999").write_bytes(b"a user's file with a checkpoint's name")
    elif how == "link_for_file":
        (run / "config.yaml").unlink()
        (run / "config.yaml").symlink_to(elsewhere / "notes.md")


@pytest.mark.parametrize(
    "how", ["step_link", "link_in_step", "folder_for_file", "file_for_step", "link_for_file"]
)
def test_overwrite_refuses_a_name_train_writes_holding_another_kind(trained, how):
    """Second adversary, case 1f: a symlink in place of a checkpoint has a name train writes,
    but train never wrote a symlink; deleting the run would remove it. The kind counts as well
    as the name: refused in one line, and nothing here or where the links point changes."""
    root, keys, run = trained
    folder = Path(tempfile.mkdtemp(dir=root)) / "run"
    elsewhere = Path(tempfile.mkdtemp(dir=root))
    (elsewhere / "notes.md").write_bytes(b"the user's notes")
    shutil.copytree(run, folder)
    _swap_kind(folder, how, elsewhere)
    before, outside = tree_listing(folder), tree_listing(elsewhere)
    code, err = _cli(["train", str(_config_into(root, keys, folder)), "--overwrite"])
    assert code == 2 and err.count("\n") == 1 and "assay train did not write" in err, err
    assert tree_listing(folder) == before and tree_listing(elsewhere) == outside


def _sealed(folder: Path, kind: str) -> None:
    """A hand-written manifest that binds whatever ``folder`` holds, as export writes one."""
    from assay.adapters.manifest import write_manifest

    write_manifest(folder, kind)


def _forge(folder: Path, how: str, export: Path) -> None:
    """A folder that looks like an export by its manifest but is not one assay wrote."""
    folder.mkdir()
    if how == "lists_nothing":
        _sealed(folder, "peft")
    elif how == "lists_a_users_file":
        (folder / "thesis.tex").write_bytes(b"\\documentclass{article}\n")
        _sealed(folder, "peft")
    elif how == "weights_are_a_link":  # the link's target has the export's very bytes
        for entry in export.iterdir():
            if entry.name == "adapter_model.safetensors":
                (folder / entry.name).symlink_to(entry)
            else:
                shutil.copy(entry, folder / entry.name)
    elif how == "other_kinds_files":  # a safetensors export's pair sealed as a PEFT export
        (folder / "config.json").write_bytes(b"{}")
        (folder / "model.safetensors").write_bytes(b"mine")
        _sealed(folder, "peft")
    elif how == "users_files_under_the_exports_names":  # the issue-52 adversaries' case
        for entry in export.iterdir():
            if entry.name != "assay_manifest.json":
                (folder / entry.name).write_bytes(b"my thesis draft\n")
        _sealed(folder, "peft")


@pytest.mark.parametrize(
    "how",
    [
        "lists_nothing",
        "lists_a_users_file",
        "weights_are_a_link",
        "other_kinds_files",
        "users_files_under_the_exports_names",
    ],
)
def test_a_manifest_alone_does_not_make_a_folder_an_export(trained, how):
    """Third adversary, rule 1 (cases 18 and 19): `export --force` took a hand-written
    assay_manifest.json that listed nothing, or listed a user's file, as proof of an earlier
    export, and replaced a symlink standing in for the adapter's weights. An export is a folder
    holding exactly the regular files its kind writes, bound by the manifest: anything else is
    refused in one line, and nothing here or where a link points changes."""
    root, _keys, run = trained
    export = root / f"export-{how}"
    assert _cli(["export", str(run), "--format", "peft", "--out", str(export)])[0] == 0
    folder = Path(tempfile.mkdtemp(dir=root)) / "out"
    _forge(folder, how, export)
    before, source = tree_listing(folder), tree_listing(export)
    for fmt in ("peft", "safetensors"):
        argv = ["export", str(run), "--format", fmt, "--out", str(folder), "--force"]
        code, err = _cli(argv)
        assert code == 2 and err.count("\n") == 1 and str(folder) in err, (fmt, err)
    assert tree_listing(folder) == before and tree_listing(export) == source


@pytest.mark.parametrize("how", ["users_folder", "file_added", "link", "metrics_link"])
def test_resume_refuses_a_run_whose_next_names_hold_what_train_did_not_write(trained, how):
    """Third adversary, rule 1: `train --resume` replaced a user's folder standing at the next
    checkpoint's name (step-000002/user.bin was deleted). A resume rewrites the run's own names
    (later checkpoints, metrics, latest), so each must hold what train wrote there: refused in
    one line, nothing here or where a link points changes."""
    root, keys, _run = trained
    folder = Path(tempfile.mkdtemp(dir=root)) / "run"
    elsewhere = Path(tempfile.mkdtemp(dir=root))
    (elsewhere / "notes.md").write_bytes(b"the user's notes")
    config = _config_into(root, keys, folder)
    body = yaml.safe_load(config.read_text())
    config.write_text(yaml.safe_dump({**body, "steps": 2}))
    assert _cli(["train", str(config), "--stop-at", "1", "--no-progress"])[0] == 0
    if how == "users_folder":
        (folder / "step-000002").mkdir()
        (folder / "step-000002" / "user.bin").write_bytes(b"mine")
    elif how == "file_added":
        (folder / "step-000001" / "user.bin").write_bytes(b"mine")
    elif how == "link":
        (folder / "step-000002").symlink_to(elsewhere)
    else:
        (folder / "metrics.jsonl").unlink()
        (folder / "metrics.jsonl").symlink_to(elsewhere / "notes.md")
    before, outside = tree_listing(folder), tree_listing(elsewhere)
    code, err = _cli(["train", str(config), "--resume", str(folder), "--no-progress"])
    assert code == 2 and err.count("\n") == 1 and "did not write" in err, err
    assert tree_listing(folder) == before and tree_listing(elsewhere) == outside


def test_control_resume_replaces_a_checkpoint_it_wrote(trained):
    """A checkpoint at the next step's name that train itself wrote (a save whose `latest`
    never moved) is replaced by the resumed run, which then finishes."""
    root, keys, _run = trained
    folder = Path(tempfile.mkdtemp(dir=root)) / "run"
    config = _config_into(root, keys, folder)
    body = yaml.safe_load(config.read_text())
    config.write_text(yaml.safe_dump({**body, "steps": 2}))
    assert _cli(["train", str(config), "--no-progress"])[0] == 0
    (folder / "latest").write_text("step-000001\n")  # as if killed before latest moved
    code, err = _cli(["train", str(config), "--resume", str(folder), "--no-progress"])
    assert code == 0, err
    assert (folder / "latest").read_text() == "step-000002\n"


def test_a_checkpoint_save_replaces_only_a_checkpoint(tmp_path):
    """The Python API has no claim step: save_checkpoint itself refuses a folder at its name
    that holds what a save does not write, and replaces one it wrote."""
    import torch

    from assay.train.checkpoint.directory import CheckpointError, save_checkpoint

    weight = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    prints = {"config": "c", "dataset": "d", "model": "m"}

    def save() -> Path:
        return save_checkpoint(tmp_path, 1, {"w": weight}, optimizer, {}, {"row": 0}, prints)

    save()
    (tmp_path / "latest").unlink()
    save()  # the control: a checkpoint this writer wrote is replaced
    (tmp_path / "latest").unlink()
    (tmp_path / "step-000001" / "user.bin").write_bytes(b"mine")
    with pytest.raises(CheckpointError, match=r"user\.bin"):
        save()
    assert (tmp_path / "step-000001" / "user.bin").read_bytes() == b"mine"


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-2] ^= 0x01
    path.write_bytes(bytes(data))


def _append(text: bytes):
    def edit(path: Path) -> None:
        with open(path, "ab") as handle:
            handle.write(text)

    return edit


# (entry named in the refusal, file edited, edit): each a file train wrote into the run and
# records (run-state.json and latest, pointers it rewrites, are checked by kind only)
EDITS = {
    "metrics_annotated": ("metrics.jsonl", "metrics.jsonl", _append(b'{"my": "annotation"}\n')),
    "metrics_value_edited": ("metrics.jsonl", "metrics.jsonl", _flip_last_byte),
    "config_commented": ("config.yaml", "config.yaml", _append(b"# my note\n")),
    "cursor_edited": ("step-000001", "step-000001/cursor.json", _flip_last_byte),
    "weights_edited": ("step-000001", "step-000001/trainables.safetensors", _flip_last_byte),
    "manifest_edited": ("step-000001", "step-000001/manifest.json", _append(b" ")),
}


def _copy_of(run: Path, root: Path) -> Path:
    folder = Path(tempfile.mkdtemp(dir=root)) / "run"
    shutil.copytree(run, folder)
    return folder


def _unrecorded(folder: Path) -> None:
    """The marker as train wrote it before it recorded what it wrote."""
    (folder / RUN_MARKER).write_text(json.dumps({"format": "assay.run/1"}))


@pytest.mark.parametrize("recorded", [True, False], ids=["recorded", "marker_without_record"])
@pytest.mark.parametrize("edit", sorted(EDITS))
def test_overwrite_and_resume_refuse_a_run_whose_files_changed_since_train_wrote_them(
    trained, edit, recorded
):
    """A run's own file edited after train wrote it (a row appended to the metrics, a value
    changed, a comment added to the config, a checkpoint file changed) is the user's edit:
    --overwrite would delete it, so it refuses naming the entry and changes nothing; --resume
    refuses what it would rewrite (metrics, config) and leaves the checkpoint it loads to the
    load's own checks. A marker from before the record still has its checkpoints checked against
    their manifests and its metrics read as rows."""
    root, keys, run = trained
    named, path, change = EDITS[edit]
    if not recorded and path in (
        "config.yaml",
        "run-state.json",
        "latest",
        "step-000001/manifest.json",
    ):
        pytest.skip("a file written whole is checked against the record alone")
    folder = _copy_of(run, root)
    if not recorded:
        _unrecorded(folder)
    change(folder / path)
    before = tree_listing(folder)
    config = str(_config_into(root, keys, folder))
    code, err = _cli(["train", config, "--no-progress", "--overwrite"])
    assert code == 2 and tree_listing(folder) == before, err
    assert "changed since assay train wrote them" in err and named in err, err
    assert err.count("\n") == 1, err
    # --resume rewrites the metrics and the config, never the checkpoint it loads: that one's
    # own checks refuse an edit they can see, naming the file, and pass one they cannot (this
    # finished run then ends as "already finished"); either way nothing changes
    code, err = _cli(["train", config, "--no-progress", "--resume", str(folder)])
    assert tree_listing(folder) == before, err
    if not path.startswith("step-"):
        assert code == 2 and "changed since assay train wrote them" in err, err
    assert code == 0 or (code == 2 and err.count("\n") == 1 and named in err), err


@pytest.mark.parametrize("recorded", [True, False], ids=["recorded", "marker_without_record"])
def test_overwrite_replaces_a_run_as_train_left_it_even_when_killed_mid_row(trained, recorded):
    """The control: a run as train wrote it is replaced, also one a kill left with metrics
    rows after its last checkpoint and a row cut short (rows train writes, not edits)."""
    root, keys, run = trained
    folder = _copy_of(run, root)
    if not recorded:
        _unrecorded(folder)
    assert _cli(["train", str(_config_into(root, keys, folder)), "--overwrite"])[0] == 0
    _append(b'{"step": 2, "loss": 1.5}\n{"step": 3, "lo')(folder / "metrics.jsonl")
    code, err = _cli(["train", str(_config_into(root, keys, folder)), "--overwrite"])
    assert code == 0, err


@pytest.mark.parametrize("edit", ["metadata_byte", "tensor_byte", "appended"])
def test_export_force_refuses_a_gguf_export_changed_since_it_was_written(trained, edit):
    """A GGUF export carries its own sha256 (the seal): one the user changed since (a metadata
    value, a weight, bytes appended) is refused by --force and left as it was; the control, the
    same export unchanged, is replaced."""
    root, _keys, run = trained
    path = Path(tempfile.mkdtemp(dir=root)) / "model.gguf"
    argv = ["export", str(run), "--format", "gguf", "--out", str(path)]
    assert _cli(argv)[0] == 0
    assert _cli([*argv, "--force"])[0] == 0  # the control
    data = bytearray(path.read_bytes())
    if edit == "appended":
        data += b"\n"
    else:
        at = data.find(b"general.architecture") if edit == "metadata_byte" else len(data) - 8
        data[at + 2] ^= 0x01
    path.write_bytes(bytes(data))
    code, err = _cli([*argv, "--force"])
    assert code == 2 and path.read_bytes() == bytes(data), err
    assert "changed since assay export wrote it" in err and str(path) in err, err


def test_resume_refuses_another_runs_checkpoint_at_its_next_name(trained):
    """A checkpoint of another run (other fingerprints) copied to the name a resumed run saves
    next would be replaced by that save: --resume refuses it and --overwrite keeps it (found
    by the issue-52 adversary); the control, the run without the copy, resumes."""
    root, keys, _run = trained
    config = _config_into(root, keys, Path(tempfile.mkdtemp(dir=root)) / "run")
    body = yaml.safe_load(config.read_text())
    config.write_text(yaml.safe_dump({**body, "steps": 2}))
    folder = Path(body["output"]["dir"])
    assert _cli(["train", str(config), "--stop-at", "1", "--no-progress"])[0] == 0
    other = _config_into(root, keys, Path(tempfile.mkdtemp(dir=root)) / "other")
    other_body = yaml.safe_load(other.read_text())
    other.write_text(yaml.safe_dump({**other_body, "steps": 2, "seed": 7}))
    assert _cli(["train", str(other), "--no-progress"])[0] == 0
    control = _copy_of(folder, root)
    shutil.copytree(Path(other_body["output"]["dir"]) / "step-000002", folder / "step-000002")
    before = tree_listing(folder)
    for argv in (["--resume", str(folder)], ["--overwrite"]):
        code, err = _cli(["train", str(config), "--no-progress", *argv])
        assert code == 2 and tree_listing(folder) == before, (argv, err)
        assert "step-000002" in err, err
    control_config = _config_into(root, keys, control)
    control_config.write_text(
        yaml.safe_dump({**body, "steps": 2, "output": {"dir": str(control), "save_every": 1}})
    )
    assert _cli(["train", str(control_config), "--resume", str(control), "--no-progress"])[0] == 0


def test_overwrite_keeps_a_users_file_in_the_events_folder(trained):
    """The events folder holds TensorBoard's event files alone: a user's note put there is not
    deleted by --overwrite (found by the issue-52 adversary); the control, a run whose events
    folder holds only what the writer wrote, is replaced."""
    root, keys, _run = trained
    folder = Path(tempfile.mkdtemp(dir=root)) / "run"
    config = str(_config_into(root, keys, folder))
    assert _cli(["train", config, "--no-progress", "--report-to", "tensorboard"])[0] == 0
    events = sorted((folder / "tensorboard").iterdir())
    assert events and all(p.name.startswith("events.out.tfevents.") for p in events)
    control = _copy_of(folder, root)
    (folder / "tensorboard" / "notes.txt").write_text("my notes on this run\n")
    before = tree_listing(folder)
    code, err = _cli(["train", config, "--overwrite", "--no-progress"])
    assert code == 2 and tree_listing(folder) == before, err
    assert "tensorboard" in err and err.count("\n") == 1, err
    control_config = str(_config_into(root, keys, control))
    assert _cli(["train", control_config, "--overwrite", "--no-progress"])[0] == 0


@pytest.mark.parametrize("name", ["step-000008", "step-000002"], ids=["later", "earlier"])
def test_overwrite_keeps_a_same_config_runs_checkpoint_copied_in(trained, name):
    """Another run of the same config (so the same fingerprints) stopped at step 2; its
    checkpoint copied into a finished run under a name train never wrote there (step 8 of a
    4-step run, or step 2 of a run that saved only its last) was deleted by --overwrite (found
    by the third issue-52 adversary). A checkpoint the marker does not record is train's only
    when a kill can have left it so: the newest, after every recorded one, named for the step
    its manifest holds. The control: the run as train left it is replaced."""
    root, keys, _run = trained
    runs = {}
    for label, stop in (("mine", None), ("other", "2")):
        config = _config_into(root, keys, Path(tempfile.mkdtemp(dir=root)) / label)
        body = yaml.safe_load(config.read_text())
        out = {"dir": body["output"]["dir"], "save_every": 1000}  # the last step only
        config.write_text(yaml.safe_dump({**body, "steps": 4, "output": out}))
        extra = ["--stop-at", stop] if stop else []
        assert _cli(["train", str(config), "--no-progress", *extra])[0] == 0
        runs[label] = (config, Path(body["output"]["dir"]))
    config, folder = runs["mine"]
    control = _copy_of(folder, root)
    shutil.copytree(runs["other"][1] / "step-000002", folder / name)
    before = tree_listing(folder)
    code, err = _cli(["train", str(config), "--no-progress", "--overwrite"])
    assert code == 2 and tree_listing(folder) == before, err
    assert name in err, err
    control_config = _config_into(root, keys, control)
    body = yaml.safe_load(config.read_text())
    control_config.write_text(
        yaml.safe_dump({**body, "output": {"dir": str(control), "save_every": 1000}})
    )
    assert _cli(["train", str(control_config), "--no-progress", "--overwrite"])[0] == 0
