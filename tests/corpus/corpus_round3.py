"""Issue-30 corpus classes: lost runs, silent wrong answers, numbers past every bound, YAML keys
that are not names, sizes that cannot fit, a broken distributed environment, hostile receipt
files, and legal input that must be accepted.

Cases that are data live in round3_cases.yaml; the builders here turn them into files and one
CLI run each, and build the cases that need a trained run, a second model or a receipt.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import yaml
from corpus_harness import Case
from corpus_inputs import base_config, make_receipt
from corpus_outputs import good_run, write_config

CASES = yaml.safe_load(Path(__file__).with_name("round3_cases.yaml").read_text("utf-8"))
# one past the digit limit every reader shares (assay.bounded.INT_DIGITS)
HUGE = "1" + "0" * 4300

# kind -> what the class covers (the gate claims each class separately and reports its size)
CLASSES = {
    "lost_runs": "a resume or export that would overwrite or delete a run",
    "wrong_answers": "answers about the wrong model or past the context, and verifying nothing",
    "numbers": "integers past 4,300 digits and sizes past any memory, in every reader",
    "yaml_keys": "YAML keys that are lists, mappings, numbers or booleans",
    "sizes": "settings whose memory cannot fit, refused before anything loads",
    "distributed_env": "a torchrun environment that is incomplete or impossible",
    "receipt_files": "receipts nested, sized or numbered past the readers' bounds",
    "legal": "legal input that must be accepted, not refused",
}


def _fill(text: str, **more: str) -> str:
    for key, value in {"n": HUGE, **more}.items():
        text = text.replace("{" + key + "}", value)
    return text


def _kind(name: str) -> str:
    return name.split(".", 1)[0]


def config_cases(root: Path, model: Path, good_text: str, train: Path) -> list[Case]:
    """The valid config's text with one edit (round3_cases.yaml ``config``)."""
    cases = []
    for name, spec in CASES["config"].items():
        folder = root / name
        folder.mkdir(parents=True)
        text = good_text.replace(str(root / "unused-run"), str(folder / "run"))
        if "replace" in spec:
            old, new = spec["replace"]
            assert old in text, f"{name}: {old!r} is not in the valid config"
            text = text.replace(old, _fill(new), 1)
        if "append" in spec:
            text += _fill(spec["append"]) + "\n"
        path = folder / "config.yaml"
        path.write_text(text)
        cases.append(
            Case(name, _kind(name), ("train", str(path), "--json"), path, spec["where"], folder)
        )
    return cases


def row_cases(root: Path, model: Path) -> list[Case]:
    """A train file whose one row breaks a bound (round3_cases.yaml ``rows``)."""
    cases = []
    for name, spec in CASES["rows"].items():
        folder = root / name
        folder.mkdir(parents=True)
        rows = folder / "train.jsonl"
        rows.write_text(_fill(spec["row"]) + "\n")
        path = write_config(folder / "config.yaml", base_config(model, rows, folder / "run"))
        cases.append(
            Case(name, _kind(name), ("train", str(path), "--json"), rows, spec["where"], folder)
        )
    return cases


def argv_cases(root: Path, good: Path, far: Path) -> list[Case]:
    """Command lines and environments (round3_cases.yaml ``argv``)."""
    words = {"good": str(good), "far": str(far), "long": "word " * 700}
    cases = []
    for name, spec in CASES["argv"].items():
        argv = tuple(_fill(a, **words) for a in spec["argv"])
        file = Path(_fill(spec["file"], **words))
        env = tuple(
            (k, None if v is None else _fill(str(v))) for k, v in spec.get("env", {}).items()
        )
        where = _fill(spec["where"])
        cases.append(Case(name, _kind(name), argv, file, where, good.parent, env=env))
    return cases


def lost_run_cases(root: Path, model: Path, run: tuple[Path, Path, Path]) -> list[Case]:
    """Resumes and exports that would write over, or delete, a run."""
    train, _config, run_dir = run
    folder = root / "lost_runs"
    folder.mkdir(parents=True)
    empty = folder / "empty"
    empty.mkdir()
    copy = folder / "occupied"
    shutil.copytree(run_dir, copy)
    other = write_config(folder / "other.yaml", base_config(model, train, copy))
    export = ("export", str(copy), "--format", "peft", "--force", "--out")
    return [
        Case(
            "lost_runs.resume_without_checkpoint",
            "lost_runs",
            ("train", str(other), "--resume", str(empty), "--json"),
            empty,
            "--resume",
            folder,
        ),
        Case(
            "lost_runs.resume_other_run_into_occupied",
            "lost_runs",
            ("train", str(other), "--resume", str(run_dir), "--json"),
            copy,
            "output.dir",
            folder,
        ),
        Case(
            "lost_runs.export_onto_the_run",
            "lost_runs",
            (*export, str(copy)),
            copy,
            "--out",
            folder,
        ),
        Case(
            "lost_runs.export_inside_the_run",
            "lost_runs",
            (*export, str(copy / "peft")),
            copy / "peft",
            "--out",
            folder,
        ),
        Case(
            "lost_runs.export_around_the_run",
            "lost_runs",
            (*export, str(folder)),
            folder,
            "--out",
            folder,
        ),
    ]


def wrong_answer_cases(root: Path, run: tuple[Path, Path, Path], other_model: Path) -> list[Case]:
    """Evaluating a checkpoint with another model, verifying a folder with nothing in it."""
    train, _config, run_dir = run
    folder = root / "wrong_answers"
    folder.mkdir(parents=True)
    config = write_config(
        folder / "other-model.yaml", base_config(other_model, train, folder / "run")
    )
    empty = folder / "receipts-empty"
    (empty / "some-gate").mkdir(parents=True)
    missing = folder / "receipts-missing"
    return [
        Case(
            "wrong_answers.eval_other_model",
            "wrong_answers",
            ("eval", str(config), "--checkpoint", str(run_dir), "--data", str(train)),
            run_dir,
            "another model",
            folder,
        ),
        Case(
            "wrong_answers.verify_missing_folder",
            "wrong_answers",
            ("verify", "--receipts", str(missing)),
            missing,
            "no such receipts folder",
            folder,
        ),
        Case(
            "wrong_answers.verify_empty_folder",
            "wrong_answers",
            ("verify", "--receipts", str(empty)),
            empty,
            "holds no receipts",
            folder,
        ),
    ]


def _receipt_case(root: Path, name: str, edit) -> Case:
    folder = root / name
    path = make_receipt(folder / "receipts", "a plain note")
    where = edit(path)
    argv = ("render", "--receipts", str(folder / "receipts"), "--records", str(folder))
    return Case(name, _kind(name), argv, path, where, folder)


def _append_field(path: Path, text: str) -> None:
    body = path.read_text().rstrip()
    path.write_text(body[:-1] + f', "x": {text}' + "}\n")


def file_cases(root: Path, model: Path) -> list[Case]:
    """Receipts and a safetensors header past the readers' bounds."""
    cases = [
        _receipt_case(
            root,
            "receipt_files.nested_100000",
            lambda p: _append_field(p, "[" * 100_000 + "]" * 100_000) or "nested deeper",
        ),
        _receipt_case(
            root,
            "receipt_files.nested_900",
            lambda p: _append_field(p, "[" * 900 + "]" * 900) or "nested deeper",
        ),
        _receipt_case(
            root,
            "receipt_files.over_16_mib",
            lambda p: _append_field(p, '"' + "a" * (17 << 20) + '"') or "limit is",
        ),
        _receipt_case(
            root, "numbers.receipt_integer", lambda p: _append_field(p, HUGE) or "4,301 digits"
        ),
    ]
    folder = root / "numbers.safetensors_header"
    shutil.copytree(model, folder)
    weights = next(folder.glob("*.safetensors"))
    raw = weights.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).replace('"format": "pt"', f'"format": {HUGE}').encode()
    weights.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + size :])
    cases.append(
        Case(
            "numbers.safetensors_header",
            "numbers",
            ("info", str(folder)),
            weights,
            "4,301 digits",
            folder,
        )
    )
    return cases


def legal_cases(root: Path, model: Path, run: tuple[Path, Path, Path]) -> list[Case]:
    """Input that is legal and must run: merge keys, the largest seed, finished runs."""
    train, _config, run_dir = run
    folder = root / "legal"
    folder.mkdir(parents=True)
    body = base_config(model, train, folder / "merge-run")
    adapter = body.pop("adapter")
    text = (
        "x-lora: &lora\n"
        + "".join(f"  {k}: {json.dumps(v)}\n" for k, v in adapter.items())
        + "adapter:\n  <<: *lora\n  rank: 2\n"
        + yaml.safe_dump(body)
    )
    merge = folder / "merge.yaml"
    merge.write_text(text)
    largest = write_config(
        folder / "seed.yaml", {**base_config(model, train, folder / "seed-run"), "seed": 2**63 - 1}
    )
    finished = folder / "finished"
    shutil.copytree(run_dir, finished)
    done = write_config(folder / "done.yaml", base_config(model, train, finished))
    from assay.cli import main

    if main(["train", str(done), "--resume", str(finished), "--no-progress", "--json"]) != 0:
        raise RuntimeError("finishing the run behind legal.resume_finished_run failed")
    zero = write_config(folder / "zero.yaml", base_config(model, train, folder / "zero-run"))
    return [
        Case(
            "legal.merge_keys",
            "legal",
            ("train", str(merge), "--no-progress"),
            merge,
            "",
            folder,
            accept=True,
        ),
        Case(
            "legal.largest_seed",
            "legal",
            ("train", str(largest), "--no-progress"),
            largest,
            "",
            folder,
            accept=True,
        ),
        Case(
            "legal.resume_finished_run",
            "legal",
            ("train", str(done), "--resume", str(finished), "--no-progress"),
            done,
            "",
            folder,
            accept=True,
        ),
        Case(
            "legal.stop_at_zero",
            "legal",
            ("train", str(zero), "--stop-at", "0", "--no-progress"),
            zero,
            "",
            folder,
            accept=True,
        ),
    ]


def round3_cases(root: Path, model: Path) -> list[Case]:
    """Every issue-30 class under ``root``, around a valid tiny run stopped after step 1."""
    from assay_testing.tiny import save_tiny

    root.mkdir(parents=True, exist_ok=True)
    run = good_run(root, model)
    train = run[0]
    other = save_tiny("llama3", root / "other", seed=2, gguf=False, vocab_size=49152)["hf"]
    good = write_config(root / "good.yaml", base_config(model, train, root / "unused-run"))
    far_body = base_config(model, train, root / "far-run")
    far_body["data"]["seq_len"] = 10_000_000
    far = write_config(root / "far.yaml", far_body)
    return [
        *config_cases(root, model, good.read_text(), train),
        *row_cases(root, model),
        *argv_cases(root, good, far),
        *lost_run_cases(root, model, run),
        *wrong_answer_cases(root, run, other),
        *file_cases(root, model),
        *legal_cases(root, model, run),
    ]
