"""Cases for the rule that a base model is its weights and its numerics (docs/adapters.md,
docs/training.md): an adapter, or a checkpoint to resume, put onto the same weights under a
config that computes otherwise, or onto other weights, is refused in one line; a config change
that no forward pass reads is not.

Each case copies a tiny model folder (Granite for adapters, whose multipliers the attack
changed; the Llama of the text run for resume), changes its config.json, and reports whether
assay judged it as the rule says."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from assay_testing.tiny import edit_config

# (label, config.json changes, whether the changed folder is another base)
CHANGES = (
    ("embedding_multiplier 1", {"embedding_multiplier": 1.0}, True),
    ("logits_scaling 2", {"logits_scaling": 2.0}, True),
    ("rms_norm_eps 1e-2", {"rms_norm_eps": 1e-2}, True),
    ("rope theta 777", {"rope_theta": 777.0}, True),
    ("read as llama", {"model_type": "llama"}, True),
    ("embedding_multiplier a millionth off", {"embedding_multiplier": 12.000012}, True),
    ("context 4096 (read by no forward pass)", {"max_position_embeddings": 4096}, False),
)
# recorded numerics a hand edit could leave: each refused in one line, never an exception
MALFORMED = (
    ("rope frequencies as strings", "rope_inverse_frequencies", ["a", "b"]),
    ("a 400-digit hidden size", "hidden_size", 10**400),
    ("an object for a flag", "qk_norm", {"a": 1}),
    ("a key assay never writes", "new", 1.0),
)
# the text run's base is a Llama: Granite's scalars and the family are not its to change
RESUME_CHANGES = tuple(
    c for c in CHANGES if not {"model_type", "embedding_multiplier", "logits_scaling"} & set(c[1])
)
ADAPTER_CASES = 2 * len(CHANGES) + len(MALFORMED) + 1


def adapter_outcomes(granite: Path, root: Path) -> list[str]:
    """Misjudged adapter cases: for each format (PEFT folder, TinyLoRA) and each of CHANGES,
    the adapter trained on ``granite`` loaded onto the changed copy must be refused (one line,
    naming the base) exactly when the copy is another base."""
    import assay
    from assay.adapters import attach, load_adapter, save_adapter
    from assay.errors import AssayError

    wrong = []
    for method in ("lora", "tinylora"):
        trained = attach(assay.load(granite), method, rank=2, targets="attention")
        folder = save_adapter(trained, root / f"adapter-{method}")
        for index, (label, changes, other) in enumerate(CHANGES):
            copy = shutil.copytree(granite, root / f"{method}-{index}")
            edit_config(copy, **changes)
            try:
                load_adapter(assay.load(copy), folder)
                refused = False
            except AssayError as error:
                refused = "\n" not in str(error) and "base_model" in str(error)
            if refused != other:
                wrong.append(f"{method}: {label}: {'refused' if refused else 'loaded'}")
    return wrong


def malformed_outcomes(granite: Path) -> list[str]:
    """Misjudged MALFORMED cases: each forged record checked against ``granite`` must be one
    ConfigError line naming base_model_numerics."""
    import assay
    from assay.adapters.base_identity import NUMERICS_KEY, base_record, check_recorded_base
    from assay.errors import ConfigError

    model = assay.load(granite)
    wrong = []
    for label, key, value in MALFORMED:
        record = base_record(model)
        record[NUMERICS_KEY] = {**record[NUMERICS_KEY], key: value}
        try:
            check_recorded_base(Path("adapter/assay_adapter.json"), model, record)
            wrong.append(f"malformed: {label}: loaded")
        except ConfigError as error:
            if "\n" in str(error) or NUMERICS_KEY not in str(error):
                wrong.append(f"malformed: {label}: {error}")
        except Exception as error:  # the defect this case looks for
            wrong.append(f"malformed: {label}: {type(error).__name__}")
    return wrong


def gguf_outcomes(root: Path) -> list[str]:
    """Misjudged GGUF case: an adapter trained on a tiny Mistral's folder loads onto the same
    model's GGUF (which llama.cpp files under llama, with no window key)."""
    import assay
    from assay.adapters import attach, load_adapter, save_adapter
    from assay.errors import AssayError
    from assay_testing.tiny import save_tiny

    paths = save_tiny("mistral", root / "mistral", seed=3)
    folder = save_adapter(attach(assay.load(paths["hf"]), "lora", rank=2), root / "mistral-a")
    try:
        load_adapter(assay.load(paths["gguf"]), folder)
    except AssayError as error:
        return [f"mistral adapter on its own GGUF: {error}"]
    return []


def resume_outcomes(root: Path) -> list[str]:
    """Misjudged resume cases: a run of the text run's Llama stopped after one step, its base's
    config.json changed (RESUME_CHANGES), resumed: refused (exit 2, one line naming the
    fingerprint) exactly when the change makes another base; the config is put back after
    each case."""
    import contextlib
    import io

    from assay.cli import main
    from assay_testing.text_run import save_text_run

    keys = save_text_run(root / "ws", seed=0)
    model = Path(keys["model"])
    original = (model / "config.json").read_text()
    settings = {**keys, "adapter": {"rank": 2, "targets": ["q_proj"]}, "steps": 2, "seed": 1}
    quiet = ["--json", "--no-progress"]
    wrong = []
    for index, (label, changes, other) in enumerate(RESUME_CHANGES):
        run = root / f"run-{index}"
        config = root / f"run-{index}.yaml"
        config.write_text(yaml.safe_dump({**settings, "output": {"dir": str(run)}}))
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            assert main(["train", str(config), *quiet, "--stop-at", "1"]) == 0
            edit_config(model, **changes)
            generate = ["generate", str(config), "--checkpoint", str(run), "--prompt", "a"]
            generated = main([*generate, "--max-new-tokens", "1"])
            said_by_generate = err.getvalue()
            err.truncate(0)
            err.seek(0)
            code = main(["train", str(config), *quiet, "--resume", str(run)])
        (model / "config.json").write_text(original)
        said = err.getvalue()
        refused = code == 2 and said.count("\n") == 1 and "fingerprint differs" in said
        if refused != other:
            wrong.append(f"resume: {label}: {'refused' if refused else f'exit {code}'}")
        refused = generated == 2 and "under another config" in said_by_generate
        if refused != other:
            wrong.append(f"generate --checkpoint: {label}: exit {generated}")
    return wrong
