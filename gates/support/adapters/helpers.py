"""Shared by gate-adapters and gate-exports (not a gate module): the methods, the exact
threshold, what each claim's ``code=`` names, and the two subjects (tiny Qwen2, SmolLM2) the
gates' module fixtures build.
"""

from __future__ import annotations

from pathlib import Path

import torch

from assay.qualify import Threshold
from assay_testing.real_model import smollm2_path
from support.adapters.parity_helpers import Subject

PEFT_METHODS = ("lora", "rslora", "lora_fa", "loraplus", "dora")
EXACT = Threshold("==", 0)
# What each claim runs, by method: attach and the wrapper it builds (import-checked per claim).
ATTACHING = (
    "assay.adapters.attachment",
    "assay.adapters.inject",
    "assay.adapters.base",
    "assay.settings.methods",
)
METHOD_CODE = {
    "full": (),
    "lora": ("assay.adapters.lora",),
    "rslora": ("assay.adapters.lora",),
    "lora_fa": ("assay.adapters.lora",),
    "loraplus": ("assay.adapters.lora",),
    "dora": ("assay.adapters.lora", "assay.adapters.dora"),
    "tinylora": ("assay.adapters.tinylora",),
}
FILES_CODE = ("assay.adapters.io", "assay.adapters.files")


def code(method: str, *more: str) -> tuple[str, ...]:
    """The modules a claim about ``method`` runs: attaching, the method's wrapper, ``more``, and
    the gate's own measuring helpers."""
    return (
        *ATTACHING,
        *METHOD_CODE[method],
        *more,
        "support.adapters.parity_helpers",
        "support.adapters.helpers",
    )


def files_code(method: str, *more: str) -> tuple[str, ...]:
    """``code(method)`` plus the adapter file format the method saves to."""
    fmt = "assay.adapters.tinylora_io" if method == "tinylora" else "assay.adapters.peft_io"
    return code(method, *FILES_CODE, fmt, *more)


def smollm2_subject() -> Subject:
    """The real SmolLM2-135M (GGUF) on a short chat prompt, all linear layers targeted."""
    from assay.model.tokenizer import load_tokenizer

    path = smollm2_path()
    text = "<|im_start|>user\nWhat is 17 * 23?<|im_end|>\n<|im_start|>assistant\n17 * 23 = 391"
    ids = torch.tensor([load_tokenizer(path).encode(text)])
    return Subject("smollm2", path, ids, "all-linear")


def tiny_subject(family: str, folder: Path) -> Subject:
    """A tiny random model of ``family`` (``assay_testing.tiny``: qwen2 with its biased q/k/v,
    qwen3 with its q/k norms, granite with its four scalars, olmo2 with its post-norms, phi3
    with its fused projections, gemma3 with its sandwich norms and two kinds of layer) saved
    under ``folder``, two rows of ids."""
    from assay_testing.tiny import save_tiny

    paths = save_tiny(family, folder, seed=0, gguf=False)
    ids = torch.randint(0, 320, (2, 48), generator=torch.Generator().manual_seed(1))
    return Subject(family, paths["hf"], ids, "all-linear")
