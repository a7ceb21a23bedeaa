"""Cases for the rule that a model file is read, and written, as the function transformers
computes from it, or refused (docs/models.md): a tied config over a stored head of its own, a
GGUF export of a model whose sliding window binds, and a GGUF export of a family whose GGUF
assay does not read back.

Each case reports whether assay judged it as the rule says: refused in one line naming the
file, or, where the file is what transformers computes, read or written with the same logits.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from pathlib import Path

import torch

# the logits of a file that is read as transformers computes it, against transformers'
LOGITS_BOUND = 1e-4
# a window shorter than the tokens attends otherwise than the whole context
WINDOW = 4
TOKENS = 24


def _one_line_refusal(action: Callable[[], object], names: str) -> str | None:
    """None when ``action`` raises an AssayError of one line naming ``names``; else what
    happened instead."""
    from assay.errors import AssayError

    try:
        action()
    except AssayError as error:
        text = str(error)
        if "\n" in text or names not in text:
            return f"refused, but not in one line naming {names}: {text!r}"
        return None
    except Exception as error:  # anything else is a crash, not a refusal
        return f"crashed: {type(error).__name__}: {error}"
    return "accepted"


def _logits_error(folder: Path, ids: torch.Tensor) -> float:
    """Max abs difference between assay's and transformers' logits on ``folder``."""
    from transformers import AutoModelForCausalLM

    import assay

    theirs = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        return (assay.load(folder)(ids) - theirs(input_ids=ids).logits).abs().max().item()


def tied_head_outcomes(untied: Path, root: Path) -> list[str]:
    """Two cases on a copy of the untied model folder ``untied`` with ``tie_word_embeddings``
    set true: over its own, different head the folder must be refused naming the weights file;
    over a head equal to the embedding (as some checkpoints keep one) it must load with
    transformers' logits."""
    from safetensors.torch import load_file, save_file

    import assay
    from assay.errors import AssayError
    from assay_testing.tiny import edit_config

    wrong = []
    ids = torch.arange(TOKENS)[None] % 64
    for label, head_is_embedding in (("its own head", False), ("a head equal to it", True)):
        folder = shutil.copytree(untied, root / label.replace(" ", "-"))
        edit_config(folder, tie_word_embeddings=True)
        weights = folder / "model.safetensors"
        if head_is_embedding:
            tensors = load_file(weights)
            tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
            save_file(tensors, weights, metadata={"format": "pt"})
            try:
                error = _logits_error(folder, ids)
            except AssayError as refusal:
                wrong.append(f"tied over {label}: refused: {refusal}")
                continue
            if error > LOGITS_BOUND:
                wrong.append(f"tied over {label}: logits {error:.3g} from transformers'")
            continue
        why = _one_line_refusal(lambda folder=folder: assay.load(folder), str(weights))
        if why is not None:
            wrong.append(f"tied over {label}: {why}")
    return wrong


def gguf_outcomes(mistral: Path, unwritten: dict[str, Path], root: Path) -> list[str]:
    """GGUF exports: the Mistral folder ``mistral`` with a window of 4 (binding) and with its
    own window (no shorter than its context), and each folder of ``unwritten`` (a family whose
    GGUF assay does not read back, by name). The binding window and those families must be
    refused in one line naming the target, with nothing written; the unbound window must be
    written and read back with the model's logits."""
    import assay
    from assay.model.gguf_export import write_gguf
    from assay.model.safetensors import SafetensorsSource

    wrong = []
    ids = torch.arange(TOKENS)[None] % 64
    for label, folder, window, refused in (
        ("a binding window", mistral, WINDOW, True),
        ("a window no shorter than the context", mistral, None, False),
        *((f"a {family}", folder, None, True) for family, folder in unwritten.items()),
    ):
        out = root / label.replace(" ", "-")
        out.mkdir(parents=True)
        source = SafetensorsSource(folder)
        config = source.config
        if window is not None:
            config = dataclasses.replace(config, sliding_window=window)
        tensors = {name: source.read(name) for name in config.expected_shapes()}
        target = out / "model.gguf"

        def export(config=config, tensors=tensors, target=target) -> Path:
            return write_gguf(target, config, tensors)

        if refused:
            why = _one_line_refusal(export, str(target))
            if why is None and any(out.iterdir()):
                why = f"refused, but left {sorted(p.name for p in out.iterdir())}"
            if why is not None:
                wrong.append(f"GGUF of {label}: {why}")
            continue
        try:
            export()
        except Exception as error:
            wrong.append(f"GGUF of {label}: refused: {error}")
            continue
        with torch.no_grad():
            error = (assay.load(target)(ids) - assay.load(folder)(ids)).abs().max().item()
        if error > LOGITS_BOUND:
            wrong.append(f"GGUF of {label}: read back {error:.3g} from the model's logits")
    return wrong
