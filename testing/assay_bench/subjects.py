"""The contestants of the step benchmark, built from one model (a GGUF file or an HF
safetensors folder, such as assay_testing.scale_models writes): assay (resident, NF4,
streamed) and its peers (transformers + PEFT, transformers + bitsandbytes NF4 + PEFT).

Every subject trains LoRA (rank 8, alpha 16 by default) on the attention projections in fp32
with AdamW (fused, lr 1e-4); the bf16 subjects run their forward under bf16 autocast (the
weights stay fp32) and the compiled ones compile each decoder layer. assay subjects use
assay's fused chunked CE by default (what ``assay train`` runs with ``loss: {type:
chunked_ce}``); the peers use transformers' loss op, F.cross_entropy over full fp32 logits.
Subjects that differ only by gradient checkpointing or autocast share one model (and switch
the flag before each of their steps). Needs the ``test`` extra.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from assay_bench.step import Subject

# In timing order: the subjects each ratio compares run next to each other in a round.
DESCRIPTIONS = {
    "peft": "transformers + PEFT, fp32 base",
    "assay": "assay resident, fp32 base",
    "stream-ram": "assay streamed from the RAM tier (2 slots), activations kept",
    "assay+ckpt": "assay resident, fp32 base, per-layer gradient checkpointing",
    "stream-ram+recompute": "assay streamed from the RAM tier (2 slots), layers recomputed",
    "assay-nf4": "assay resident, NF4 double-quant base (fp32 compute)",
    "bnb-nf4": "transformers + bitsandbytes NF4 double quant (fp32 compute) + PEFT",
    "assay-nf4+ckpt": "assay resident, NF4 double-quant base, per-layer gradient checkpointing",
    "peft-all": "transformers + PEFT, fp32 base, LoRA on every linear layer (all-linear)",
    "assay-all": "assay resident, fp32 base, LoRA on every linear layer",
    "assay-all+ckpt": "assay resident, fp32 base, LoRA on every linear layer, per-layer "
    "gradient checkpointing",
    "peft-compiled": "transformers + PEFT, fp32 base, each decoder layer torch.compile'd "
    "(dynamic shapes)",
    "assay-compiled": "assay resident, fp32 base, each decoder layer torch.compile'd (what "
    "compile: true runs)",
    "peft-bf16": "transformers + PEFT, fp32 weights, forward under torch.autocast(bfloat16) "
    "(transformers' Trainer with bf16=True)",
    "assay-bf16": "assay resident, fp32 weights, decoder layers under torch.autocast(bfloat16) "
    "(what precision: bf16 runs; head and chunked CE fp32)",
}
# subjects whose forward runs under bf16 autocast (assay_bench.step.step_loss)
BF16 = ("peft-bf16", "assay-bf16")
SUBJECTS = tuple(DESCRIPTIONS)
RECOMPUTING = ("assay+ckpt", "assay-nf4+ckpt", "stream-ram+recompute", "assay-all+ckpt")
HF_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")


def _optimizer(params, lr: float) -> torch.optim.Optimizer:
    return torch.optim.AdamW(list(params), lr=lr, fused=True)


def _trainable(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def _checkpointing(model, on: bool) -> Callable[[], None]:
    def setup() -> None:
        model.gradient_checkpointing = on

    return setup


def hf_dense(path: Path) -> torch.nn.Module:
    """transformers fp32 causal LM in eval mode: from the GGUF (assay_testing.peers.hf_model)
    or from an HF safetensors folder."""
    if not path.is_dir():
        from assay_testing.peers import hf_model

        return hf_model(path)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    model.hf_quantizer = None  # as a GGUF-loaded one has: peers.hf_bnb_nf4 saves and restores it
    return model


def build_subjects(
    names: Sequence[str],
    path: Path,
    *,
    rank: int = 8,
    alpha: float = 16,
    lr: float = 1e-4,
    assay_loss: str = "chunked_ce",
    progress: Callable[[str], None] = lambda _: None,
    stream_device: str = "cpu",
) -> dict[str, Subject]:
    """The named subjects (from :data:`SUBJECTS`) of the model at ``path`` (a GGUF file or an
    HF safetensors folder), in that order, on CPU, except that streamed subjects compute on
    ``stream_device`` (their base stays in RAM). assay subjects use
    ``assay_loss`` (assay_bench.step.LOSSES); the transformers peers use ``ce``."""
    import assay
    from assay.adapters import attach
    from assay.model.loader import open_source

    unknown = [n for n in names if n not in DESCRIPTIONS]
    if unknown:
        raise ValueError(f"unknown subject(s) {unknown}; expected some of {', '.join(SUBJECTS)}")
    config = open_source(path).config
    built: dict[str, Subject] = {}

    def lora(storage: str, targets: str = "attention"):
        model = assay.load(path, storage=storage)
        return attach(model, "lora", rank=rank, alpha=alpha, targets=targets).train()

    def add(
        name: str, model, *, recompute: bool = False, setup=None, forward=None, targets="attention"
    ) -> None:
        built[name] = Subject(
            name=name,
            description=DESCRIPTIONS[name],
            model=model,
            forward=forward,
            optimizer=_optimizer(_trainable(model), lr),
            config=config,
            lora_rank=rank,
            lora_targets=targets,
            recompute=recompute,
            setup=setup or (lambda: None),
            loss="ce" if forward is not None else assay_loss,
            precision="bf16" if name in BF16 else "float32",
        )

    for storage, targets, plain, checkpointed in (
        ("float32", "attention", "assay", "assay+ckpt"),
        ("nf4_double_quant", "attention", "assay-nf4", "assay-nf4+ckpt"),
        ("float32", "all-linear", "assay-all", "assay-all+ckpt"),
    ):
        if plain in names or checkpointed in names:
            progress(f"loading assay {storage}, LoRA on {targets}")
            model = lora(storage, targets)
            for name, on in ((plain, False), (checkpointed, True)):
                if name in names:
                    add(name, model, recompute=on, setup=_checkpointing(model, on), targets=targets)
    if "assay-bf16" in names:  # autocast is in the step: it can share the eager model
        model = built["assay"].model if "assay" in built else lora("float32")
        add("assay-bf16", model, setup=_checkpointing(model, False))
    if "assay-compiled" in names:
        from assay.train.build import compile_decoder_layers

        progress("loading assay float32 to compile")
        model = lora("float32")
        compile_decoder_layers(model, torch.device("cpu"))
        add("assay-compiled", model)
    for name, recompute in (("stream-ram", False), ("stream-ram+recompute", True)):
        if name in names:
            from assay.stream import StreamedModel

            progress(f"loading assay float32 for {name}")
            streamed = StreamedModel(
                lora("float32"), tier="ram", buffers=2, device=stream_device, recompute=recompute
            )
            add(name, streamed, recompute=recompute)
    if {"peft", "peft-bf16", "bnb-nf4"} & set(names):
        from assay_testing.peers import hf_bnb_nf4, peft_lora

        progress(f"loading transformers fp32 from {path.name}")
        dense = hf_dense(path)
        if "bnb-nf4" in names:
            progress("quantizing transformers + bitsandbytes NF4")
            wrapped = peft_lora(hf_bnb_nf4(path, dense=dense), rank, alpha, HF_TARGETS).train()
            add("bnb-nf4", wrapped, forward=_hf_forward(wrapped))
        if "peft" in names or "peft-bf16" in names:
            wrapped = peft_lora(dense, rank, alpha, HF_TARGETS).train()
            for name in ("peft", "peft-bf16"):
                if name in names:
                    add(name, wrapped, forward=_hf_forward(wrapped))
        del dense
    if "peft-compiled" in names:
        from assay_testing.peers import peft_lora

        progress("loading transformers fp32 to compile")
        wrapped = peft_lora(hf_dense(path), rank, alpha, HF_TARGETS).train()
        for layer in wrapped.base_model.model.model.layers:
            layer.compile(dynamic=True)
        add("peft-compiled", wrapped, forward=_hf_forward(wrapped))
    if "peft-all" in names:
        from peft import LoraConfig, get_peft_model

        progress("loading transformers fp32 for PEFT all-linear")
        all_linear = LoraConfig(
            r=rank, lora_alpha=alpha, target_modules="all-linear", lora_dropout=0.0, bias="none"
        )
        wrapped = get_peft_model(hf_dense(path), all_linear).train()
        add("peft-all", wrapped, forward=_hf_forward(wrapped), targets="all-linear")
    return {name: built[name] for name in names}


def _hf_forward(model) -> Callable[[torch.Tensor], torch.Tensor]:
    def forward(ids: torch.Tensor) -> torch.Tensor:
        return model(input_ids=ids, use_cache=False).logits

    return forward
