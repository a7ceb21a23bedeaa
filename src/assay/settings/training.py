"""The sections that say what trains and on what: ``adapter``, ``data`` and ``loss``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from assay.settings.choices import DEFAULT_TARGETS, FORMATS, LOSSES, PREFERENCE_LOSSES, PROJECTIONS
from assay.settings.methods import METHODS, NAMES, option_names
from assay.settings.rule import setting

# methods that put adapters on target projections (not the base weights themselves)
ADAPTED = tuple(n for n, m in METHODS.items() if not m.trains_base)
DEFAULT_METHOD = "lora"


def with_method_options(cls: type) -> type:
    """Adds every method option to the ``adapter`` section ``cls`` as a key, before
    ``dataclass`` reads its fields: in the order the registry first declares each, with its
    rule as its options class states it, applying under the methods that take it (in the
    class's ``family`` words when several do), None where it does not apply."""
    takers: dict[str, list[str]] = {}
    declared: dict[str, tuple[dataclasses.Field[Any], type]] = {}
    for entry in METHODS.values():
        for found in dataclasses.fields(entry.options):
            takers.setdefault(found.name, []).append(entry.name)
            first, _ = declared.setdefault(found.name, (found, entry.options))
            if first.metadata["rule"] != found.metadata["rule"]:
                raise TypeError(f"method option {found.name!r} is declared twice, with two rules")
    for name, (found, owner) in declared.items():
        if name in cls.__annotations__:
            raise TypeError(f"method option {name!r} is also a shared adapter key")
        applies = tuple(takers[name])
        words = getattr(owner, "family", None) if len(applies) > 1 else None
        rule = dataclasses.replace(found.metadata["rule"], applies=applies, applies_text=words)
        cls.__annotations__[name] = f"{found.type} | None"
        default = rule.default_for(DEFAULT_METHOD)
        setattr(cls, name, dataclasses.field(default=default, metadata={"rule": rule}))
    return cls


@dataclass(frozen=True)
@with_method_options
class AdapterConfig:
    """What trains. Keys that do not apply to ``method`` are None. Besides ``method``,
    ``targets`` and ``layers``, each method's options are keys (``rank``, ``lr_ratio``, ``u``,
    ...), declared once in their options class (``assay.settings.methods``)."""

    selector: ClassVar[str] = "method"
    selector_word: ClassVar[str] = "method"

    method: str = setting(
        "full (every weight trains; needs storage float32), lora, rslora (scale "
        "alpha/sqrt(rank)), lora_fa (A frozen), loraplus (B learns lr_ratio times faster), "
        "dora, tinylora.",
        "string",
        DEFAULT_METHOD,
        choices=NAMES,
    )
    targets: tuple[str, ...] = setting(
        "Projection names to adapt (Phi-3 fuses q, k, v into qkv_proj and gate, up into "
        "gate_up_proj: name a fused one or all of its parts).",
        "array",
        DEFAULT_TARGETS,
        items={"enum": list(PROJECTIONS)},
        min_items=1,
        unique=True,
        applies=ADAPTED,
        applies_text="adapter methods (full trains every weight)",
        held=True,
        base=DEFAULT_METHOD,
    )
    layers: tuple[int, ...] | None = setting(
        "Block indices to adapt (0-based).",
        "array",
        default_text="every layer",
        nullable=True,
        items={"type": "integer", "minimum": 0},
        min_items=1,
        unique=True,
        applies=ADAPTED,
        applies_text="adapter methods (full trains every weight)",
        base=DEFAULT_METHOD,
    )

    def options(self) -> dict[str, Any]:
        """The method's own options for ``attach`` (keys that do not apply left out)."""
        names = option_names(self.method)
        return {k: getattr(self, k) for k in names if getattr(self, k) is not None}

    if TYPE_CHECKING:  # the method options, added by with_method_options

        def __getattr__(self, name: str) -> Any: ...


@dataclass(frozen=True)
class DataConfig:
    """Rows and how they become scored tokens."""

    train: str = setting("Path of the training JSONL file.", "string", required=True, min_length=1)
    eval: str | None = setting(
        "Path of an evaluation JSONL file in the same format.",
        "string",
        default_text="none",
        nullable=True,
        min_length=1,
    )
    format: str = setting(
        "Row format: text {text}, prompt_completion {prompt, completion}, messages {messages}, "
        "preference {prompt, chosen, rejected}, kto {prompt, completion, label}; auto detects "
        "it from the first row's keys.",
        "string",
        "auto",
        choices=FORMATS,
    )
    mask: str | None = setting(
        "Which tokens are scored: all (every token after the first) or completion_only "
        "(completions; for messages only the assistant turns).",
        "string",
        default_text="all for text rows, completion_only for every other format",
        choices=("all", "completion_only"),
        nullable=True,
    )
    seq_len: int = setting("Maximum tokens per sequence.", "integer", 512, minimum=2)
    truncate: bool = setting(
        "Cut rows longer than seq_len instead of refusing them (the cut may drop the final EOS).",
        "boolean",
        False,
    )


_BETA_LOSSES = (*PREFERENCE_LOSSES, "kto")


@dataclass(frozen=True)
class LossConfig:
    """The objective. Keys that do not apply to ``type`` are None."""

    selector: ClassVar[str] = "type"
    selector_word: ClassVar[str] = "loss"

    type: str = setting(
        "ce (full logits), chunked_ce (logits per token chunk, recomputed in backward), the "
        "preference losses dpo, ipo, orpo, simpo (preference rows), or kto (kto rows).",
        "string",
        "ce",
        choices=LOSSES,
    )
    chunk_size: int | None = setting(
        "Tokens per chunk.", "integer", 1024, minimum=1, applies=("chunked_ce",), base="ce"
    )
    beta: float | None = setting(
        "Preference-loss temperature.",
        "number",
        0.1,
        exclusive_minimum=0,
        applies=_BETA_LOSSES,
        by_selector={"simpo": 2.0},
        default_text="0.1; simpo 2.0",
        base="ce",
    )
    gamma: float | None = setting(
        "Target reward margin.", "number", 0.5, minimum=0, applies=("simpo",), base="ce"
    )
    desirable_weight: float | None = setting(
        "Weight of desirable rows.",
        "number",
        1.0,
        exclusive_minimum=0,
        applies=("kto",),
        base="ce",
    )
    undesirable_weight: float | None = setting(
        "Weight of undesirable rows.",
        "number",
        1.0,
        exclusive_minimum=0,
        applies=("kto",),
        base="ce",
    )
    dpo_variant: str | None = setting(
        "sigmoid, hinge or robust.",
        "string",
        "sigmoid",
        choices=("sigmoid", "hinge", "robust"),
        applies=("dpo",),
        base="ce",
    )
    label_smoothing: float | None = setting(
        "Assumed label-flip rate of the robust DPO variant.",
        "number",
        0.1,
        minimum=0,
        exclusive_maximum=0.5,
        applies=("dpo",),
        applies_text="dpo with dpo_variant robust",
        base="ce",
    )
