"""Issue-52 corpus classes: every check before an early exit (a finished run resumed under
another model, other data or a damaged checkpoint), numbers formed from several settings checked
where they are formed, and claim ids that only look like others. Each case is one CLI run in
this process, refused in one line naming the file and the field.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from corpus_harness import Case
from corpus_inputs import GOOD_ROWS, _jsonl, base_config, make_receipt
from corpus_outputs import good_run, train_case, write_config
from corpus_round4 import ZERO

# kind -> what the class covers (gate-robustness claims each class and reports its size)
CLASSES = {
    "shortcuts": "rule 2: a finished run resumed under another model, data or a damaged "
    "checkpoint is refused before the 'already finished' exit",
    "derived": "rule 3: products of settings in range (learning rate x decay, LoRA+'s ratio, "
    "the adapter's scale alpha / rank, rows per step and per run), TinyLoRA's rank against "
    "the model's weights and the targets against the model's projection layout (a part of "
    "Phi-3's fused qkv_proj alone, a fused name on a model that holds the parts apart) checked "
    "where they are formed, by train and estimate",
    "claim_ids": "rule 4: claim ids (and a HEADLINE naming one) with surrounding whitespace or "
    "not NFKC-normal refused",
    "ledger_files": "rule 6: a LEDGER, CORRECTIONS or receipt that is a device or links out of "
    "its folder is bad input to verify, render and publish",
}


def _finished_run(root: Path, model: Path) -> tuple[Path, Path, Path]:
    """(train.jsonl, its config, a run that reached its last step) under ``root``."""
    from assay.cli import main

    train, config, run = good_run(root, model)  # stopped after step 1 of 2
    if main(["train", str(config), "--resume", str(run), "--json", "--no-progress"]) != 0:
        raise RuntimeError("the finished run behind the issue-52 corpus failed")
    return train, config, run


def shortcut_cases(root: Path, model: Path, other_model: Path) -> list[Case]:
    """``train --resume`` of a finished run whose resume checks must refuse it."""
    folder = root / "shortcuts"
    train, _config, run = _finished_run(folder, model)
    cases = []

    def resumed(name: str, config: dict, copy: Path, file: Path, where: str) -> None:
        path = write_config(folder / f"{name}.yaml", config)
        case = train_case(name, "shortcuts", path, where, folder, "--resume", str(copy))
        cases.append(Case(case.name, case.kind, case.argv, file, where, folder))

    def copied(name: str) -> tuple[Path, Path]:
        copy = folder / f"run-{name}"
        shutil.copytree(run, copy)
        return copy, copy / (copy / "latest").read_text().strip()

    copy, step = copied("other-model")
    resumed("another_model", base_config(other_model, train, copy), copy, step, "model")
    other_rows = folder / "other.jsonl"
    other_rows.write_bytes(_jsonl([*GOOD_ROWS, {"text": "one row more than the run saw"}]))
    copy, step = copied("other-data")
    resumed("other_data", base_config(model, other_rows, copy), copy, step, "dataset")
    copy, step = copied("damaged")
    with (step / "trainables.safetensors").open("r+b") as handle:
        handle.seek(-8, 2)
        handle.write(bytes(8))
    resumed("damaged_checkpoint", base_config(model, train, copy), copy, step, "sha256")
    cases.append(_another_tokenizer_case(folder, model, train))
    return cases


def _another_tokenizer_case(folder: Path, model: Path, train: Path) -> Case:
    """A finished run resumed under a tokenizer of the same size with two ids traded: every
    row cuts into as many tokens, other ids; the token ids' fingerprint refuses it."""
    from assay.cli import main
    from assay_testing.byte_tokenizer import save_byte_tokenizer

    run = folder / "run-byte-tokenizer"
    config = base_config(model, train, run)
    config = {
        **config,
        "tokenizer": str(folder / "bytes.gguf"),
        "data": {**config["data"], "seq_len": 64},  # bytes cut a row into more tokens
    }
    save_byte_tokenizer(folder / "bytes.gguf")
    path = write_config(folder / "byte_tokenizer.yaml", config)
    if main(["train", str(path), "--json", "--no-progress"]) != 0:
        raise RuntimeError("the byte-tokenizer run behind the issue-52 corpus failed")
    swapped = save_byte_tokenizer(folder / "swapped.gguf", swapped="ae")
    resumed = write_config(folder / "another_tokenizer.yaml", {**config, "tokenizer": str(swapped)})
    step = run / (run / "latest").read_text().strip()
    case = train_case(
        "another_tokenizer", "shortcuts", resumed, "tokens", folder, "--resume", str(run)
    )
    return Case(case.name, case.kind, case.argv, step, "tokens", folder)


def derived_cases(root: Path, model: Path) -> list[Case]:
    """Configs whose every setting is in range and whose products are not."""
    folder = root / "derived"
    folder.mkdir(parents=True)
    train = folder / "train.jsonl"
    train.write_bytes(_jsonl(GOOD_ROWS))
    base = base_config(model, train, folder / "run")
    edits = {
        "lr_times_decay": ({"optim": {"lr": 1e30, "weight_decay": 1e10}}, "optim.weight_decay"),
        "loraplus_ratio": (
            {
                "adapter": {**base["adapter"], "method": "loraplus", "lr_ratio": 1e300},
                "optim": {"lr": 1e-3},
            },
            "adapter.lr_ratio",
        ),
        "adapter_scale": ({"adapter": {**base["adapter"], "alpha": 1e39}}, "adapter.alpha"),
        "rslora_scale": (
            {"adapter": {**base["adapter"], "method": "rslora", "rank": 1, "alpha": 1e20}},
            "adapter.alpha",
        ),
        "rows_per_step": ({"batch": {"micro_batch": 2, "grad_accum": 2**53}}, "batch.grad_accum"),
        "rows_per_run": ({"steps": 2**52, "batch": {"micro_batch": 4}}, "steps"),
        # in range alone, not against the model: a rank past the smaller side of the weight
        "tinylora_rank_past_the_weight": (
            {"adapter": {"method": "tinylora", "r": 10**6, "targets": ["q_proj"]}},
            "adapter.r",
        ),
        "fused_target_on_projections_apart": (
            {"adapter": {**base["adapter"], "targets": ["qkv_proj"]}},
            "adapter.targets",
        ),
        # base_config targets q_proj alone: a part of Phi-3's qkv_proj
        "part_of_a_fused_projection": ({"model": str(_phi3(folder, model))}, "adapter.targets"),
    }
    cases = []
    for name, (change, where) in edits.items():
        config = {**base, **change, "output": {**base["output"], "dir": str(folder / name)}}
        path = write_config(folder / f"{name}.yaml", config)
        cases.append(train_case(name, "derived", path, where, folder))
    path = folder / "lr_times_decay.yaml"
    argv = ("estimate", str(path), "--budget", "4GiB", "--json")
    where = "optim.weight_decay"
    cases.append(Case("derived.estimate_lr_times_decay", "derived", argv, path, where, folder))
    path = folder / "adapter_scale.yaml"
    argv = ("estimate", str(path), "--budget", "4GiB", "--json")
    cases.append(
        Case("derived.estimate_adapter_scale", "derived", argv, path, "adapter.alpha", folder)
    )
    path = folder / "part_of_a_fused_projection.yaml"
    argv = ("estimate", str(path), "--budget", "4GiB", "--json")
    where = "adapter.targets"
    cases.append(
        Case("derived.estimate_part_of_a_fused_projection", "derived", argv, path, where, folder)
    )
    return cases


def _phi3(folder: Path, model: Path) -> Path:
    """A tiny Phi-3 folder (q, k, v fused in qkv_proj) with the vocabulary of ``model``'s."""
    from assay_testing.tiny import save_tiny

    vocab = json.loads((model / "config.json").read_text())["vocab_size"]
    return save_tiny("phi3", folder / "phi3", seed=4, gguf=False, vocab_size=vocab)["hf"]


def claim_id_cases(root: Path) -> list[Case]:
    """Sealed receipts whose claim id differs from a plain one only by what a reader cannot
    see; ``assay render`` must refuse each, naming the receipt and the field."""
    from assay.qualify.ledger.chain import ledger_path
    from assay.qualify.ledger.receipt import seal

    cases = []
    for name, claim_id in (
        ("trailing_space", "x "),
        ("fullwidth_letter", "\uff58"),  # FULLWIDTH LATIN SMALL LETTER X: NFKC makes it "x"
        ("non_breaking_space_inside", "x\u00a0y"),
        ("headline_trailing_space", None),  # the claim plain, the HEADLINE naming it spaced
    ):
        folder = root / "claim_ids" / name
        path = make_receipt(folder / "receipts", "a plain note")
        data = json.loads(path.read_text("utf-8"))
        old_seal = data["receipt_sha256"]
        if claim_id is None:
            data["headline_claim"] = data["claims"][0]["id"] + " "
        else:
            data["claims"][0]["id"] = claim_id
        data = seal(data)
        path.write_text(json.dumps(data, indent=2), "utf-8")
        ledger = ledger_path(folder / "receipts", data["gate"])
        ledger.write_text(ledger.read_text("utf-8").replace(old_seal, data["receipt_sha256"]))
        argv = ("render", "--receipts", str(folder / "receipts"), "--records", str(folder))
        where = "claims[0].id" if claim_id is not None else "headline_claim"
        cases.append(Case(f"claim_ids.{name}", "claim_ids", argv, path, where, folder))
    return cases


def ledger_file_cases(root: Path) -> list[Case]:
    """A valid ledger with one of its files swapped for a link to a device or out of the
    ledger's folder: refused in one line naming that file, never read or listed at length."""
    cases = []

    def swapped(name: str, command: tuple[str, ...], which: str, target: Path | None) -> None:
        folder = root / "ledger_files" / name
        receipt = make_receipt(folder / "receipts", "a plain note")
        path = receipt if which == "receipt" else receipt.parent / which
        if target is None:  # out of the folder: the receipt moved next to the ledger's folder
            target = folder / receipt.name
            receipt.rename(target)
        path.unlink(missing_ok=True)
        path.symlink_to(target)
        argv = (*command, "--receipts", str(folder / "receipts"), "--records", str(folder))
        cases.append(Case(f"ledger_files.{name}", "ledger_files", argv, path, str(target), folder))

    swapped("ledger_dev_zero_publish", ("publish", "--html", str(root / "site")), "LEDGER", ZERO)
    swapped("ledger_dev_zero_verify", ("verify",), "LEDGER", ZERO)
    swapped("corrections_dev_zero_verify", ("verify",), "CORRECTIONS", ZERO)
    swapped("receipt_links_out_render", ("render",), "receipt", None)
    return cases


def round5_cases(root: Path, model: Path, other_model: Path) -> list[Case]:
    """Every issue-52 class under ``root`` (empty or absent)."""
    root.mkdir(parents=True, exist_ok=True)
    return [
        *shortcut_cases(root, model, other_model),
        *derived_cases(root, model),
        *claim_id_cases(root),
        *ledger_file_cases(root),
    ]
