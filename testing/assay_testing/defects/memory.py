"""Defects in assay.memory: the peak-memory prediction."""

from __future__ import annotations

from assay_testing.defects import Defect
from assay_testing.patching import Edit

DEFECTS: tuple[Defect, ...] = (
    Defect(
        "memory.predict.optimizer_term_dropped",
        "the AdamW moments are left out of the predicted peak",
        (
            Edit(
                "assay.memory.predict:predict",
                "optimizer = _optimizer_bytes(plan, counts)",
                "optimizer = 0",
            ),
        ),
    ),
    Defect(
        "memory.predict.preference_rows_single",
        "preference losses predicted with one row per pair instead of two",
        (
            Edit(
                "assay.memory.predict:predict",
                "(2 if plan.loss in PREFERENCE else 1)",
                "1",
            ),
        ),
    ),
    Defect(
        "memory.predict.lora_fa_counts_a",
        "LoRA-FA predicted with A trainable (gradient and moments for A)",
        (
            Edit(
                "assay.memory.predict:_trainables",
                "[a, b] if entry.first_factor_trains else [b]",
                "[a, b]",
            ),
        ),
    ),
)
