"""Issue-16 corpus classes: hostile sizes, non-finite numbers, lone surrogates, output
protection (exports and run dirs), re-sealed checkpoints, messages that must name the field,
PEFT configs of the wrong shape, and silently accepted input.

Every case is derived in the session from a tiny model and one valid run; each ``kind`` is one
class that gate-robustness claims separately.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml
from corpus_harness import Case
from corpus_inputs import GOOD_ROWS, _jsonl, base_config
from corpus_outputs import (
    BYTES_TOKENIZER,
    CASES,
    export_cases,
    good_run,
    replace_cases,
    resealed_cases,
    rundir_cases,
    train_case,
    write_config,
)

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
    "replace": "10: replacing commands act only on what they wrote (issue 52)",
}


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
        cases.append(train_case(name, "bounds", path, where, folder))
    big = folder / "big_line"
    big.mkdir()
    rows = big / "train.jsonl"
    rows.write_bytes(_jsonl(GOOD_ROWS[:1]) + b'{"text": "' + b"a" * (17 << 20) + b'"}\n')
    path = write_config(big / "config.yaml", base_config(model, rows, big / "run"))
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
    cases = []
    for name, (section, line, where) in CASES["nonfinite"].items():
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
        cases.append(train_case(name, "nonfinite", path, where, folder))
    return cases


def surrogate_cases(root: Path, model: Path) -> list[Case]:
    """Lone surrogate escapes in JSONL values and keys, and in a YAML config string."""
    cases = []
    for name, spec in CASES["surrogate"].items():
        folder = root / "surrogate" / name
        folder.mkdir(parents=True)
        train = folder / "train.jsonl"
        head = b"" if spec["where"] == ":1" else _jsonl(GOOD_ROWS[:1])
        train.write_bytes(head + spec["row"].encode() + b"\n")
        config = base_config(model, train, folder / "run")
        config["data"].update(spec.get("data", {}))
        path = write_config(folder / "config.yaml", config)
        argv = ("train", str(path), "--json")
        cases.append(Case(f"surrogate.{name}", "surrogate", argv, train, spec["where"], folder))
    folder = root / "surrogate" / "yaml"
    folder.mkdir(parents=True)
    train = folder / "train.jsonl"
    train.write_bytes(_jsonl(GOOD_ROWS))
    text = yaml.safe_dump(base_config(model, train, folder / "run"))
    path = folder / "config.yaml"
    path.write_text(text.replace("format: text", 'format: "text\\ud800"'))
    cases.append(train_case("yaml_string", "surrogate", path, "data.format", folder))
    return cases


def message_cases(root: Path, model: Path) -> list[Case]:
    """Errors that must name the config file, the field and the valid range."""
    folder = root / "message"
    folder.mkdir(parents=True)
    train = folder / "train.jsonl"
    train.write_bytes(_jsonl(GOOD_ROWS))

    def config(name: str, changes: dict) -> Path:
        body = base_config(model, train, folder / "run")
        for key, value in changes.items():
            if isinstance(value, dict):
                body.setdefault(key, {}).update(value)
            else:
                body[key] = value
        return write_config(folder / f"{name}.yaml", body)

    good = config("good", {})
    cases = []
    for name, spec in CASES["message"].items():
        if "argv" in spec:
            argv = tuple(str(good) if a == "{good}" else a for a in spec["argv"])
            cases.append(Case(f"message.{name}", "message", argv, good, spec["where"], folder))
        else:
            path = config(spec["file"], spec["set"])
            cases.append(train_case(name, "message", path, spec["where"], folder))
    return cases


def peftconfig_cases(root: Path, model: Path, good: tuple[Path, Path, Path]) -> list[Case]:
    """adapter_config.json with wrong types or missing keys, through the Python API."""
    from assay.cli import main

    _train, _config, run = good
    folder = root / "peftconfig"
    folder.mkdir(parents=True)
    clean = folder / "clean"
    if main(["export", str(run), "--format", "peft", "--out", str(clean), "--json"]) != 0:
        raise RuntimeError("the valid export behind the PEFT config cases failed")
    cases = []
    for name, spec in CASES["peftconfig"].items():
        copy = folder / name
        shutil.copytree(clean, copy)
        (copy / "assay_manifest.json").unlink()  # a foreign (PEFT-written) folder
        (copy / "assay_adapter.json").unlink()
        data = json.loads((copy / "adapter_config.json").read_text())
        data.pop(spec.get("drop"), None)
        data.update(spec.get("set", {}))
        (copy / "adapter_config.json").write_text(json.dumps(data))
        argv = ("load-adapter", str(model), str(copy))
        file = copy / "adapter_config.json"
        cases.append(Case(f"peftconfig.{name}", "peftconfig", argv, file, spec["where"], copy))
    return cases


def silent_cases(root: Path, model: Path) -> list[Case]:
    """Input that used to be accepted without a word: unknown roles, seq_len past context."""
    cases = []
    for name, spec in CASES["silent_roles"].items():
        folder = root / "silent" / name
        folder.mkdir(parents=True)
        train = folder / "train.jsonl"
        train.write_bytes(_jsonl(spec["rows"]))
        config = base_config(model, train, folder / "run")
        config["data"].update(format="auto", mask="completion_only")
        path = write_config(folder / "config.yaml", config)
        argv = ("train", str(path), "--json")
        cases.append(Case(f"silent.{name}", "silent", argv, train, f"{spec['where']}: ", folder))
    folder = root / "silent" / "seq_len"
    folder.mkdir(parents=True)
    train = folder / "train.jsonl"
    train.write_bytes(_jsonl(GOOD_ROWS))
    config = base_config(model, train, folder / "run")
    config["data"]["seq_len"] = 4096
    path = write_config(folder / "config.yaml", config)
    cases.append(train_case("seq_len_past_context", "silent", path, "data.seq_len", folder))
    return cases


def robust_cases(root: Path, model: Path) -> list[Case]:
    """Every issue-16 class, under ``root``."""
    from assay_testing.byte_tokenizer import save_byte_tokenizer

    root.mkdir(parents=True, exist_ok=True)
    BYTES_TOKENIZER[:] = [save_byte_tokenizer(root / "bytes.gguf") or root / "bytes.gguf"]
    good = good_run(root, model)
    return [
        *bounds_cases(root, model),
        *nonfinite_cases(root, model),
        *surrogate_cases(root, model),
        *export_cases(root, model, good),
        *rundir_cases(root, model, good),
        *replace_cases(root, model, good),
        *resealed_cases(root, model, good),
        *message_cases(root, model),
        *peftconfig_cases(root, model, good),
        *silent_cases(root, model),
    ]
