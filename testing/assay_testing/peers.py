"""Reference peers built from the same GGUF: transformers fp32, transformers + bitsandbytes NF4,
and HF PEFT LoRA around either. Gates compare assay against these; benchmarks race them.

Needs the ``test`` extra (transformers, peft). Nothing is downloaded: the weights come from the
GGUF file; the NF4 peer goes through a temporary safetensors copy of the fp32 weights because
transformers quantizes on load only.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch

from assay.adapters.inject import ATTENTION


def hf_tokenizer(path: Path):
    """transformers' tokenizer from the GGUF metadata."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


def hf_model(path: Path):
    """transformers fp32 causal LM from a GGUF file (dequantized to fp32), in eval mode."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32
    )
    return model.eval()


def hf_bnb_nf4(path: Path, dense=None):
    """transformers + bitsandbytes NF4 (double quant, fp32 compute) from the same GGUF, on CPU.

    ``dense`` is an already loaded :func:`hf_model` of ``path`` to quantize instead of loading
    the GGUF again; it is saved, not consumed, and comes back unchanged. Returns the model in
    eval mode.
    """
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    owned = dense is None
    if owned:
        dense = AutoModelForCausalLM.from_pretrained(
            path.parent, gguf_file=path.name, dtype=torch.float32
        )
    with tempfile.TemporaryDirectory() as tmp:
        # transformers refuses to save a GGUF-loaded model; the weights are plain fp32 here.
        quantizer = dense.hf_quantizer
        quantization = getattr(dense.config, "quantization_config", None)
        dense.hf_quantizer = None
        if hasattr(dense.config, "quantization_config"):
            del dense.config.quantization_config
        dense.save_pretrained(tmp)
        if owned:
            del dense
        else:
            dense.hf_quantizer = quantizer
            if quantization is not None:
                dense.config.quantization_config = quantization
        config = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.float32,
        )
        model = AutoModelForCausalLM.from_pretrained(
            tmp, quantization_config=config, device_map="cpu", dtype=torch.float32
        )
    for module in model.modules():
        # On AVX512-BF16 CPUs bnb repacks inference weights and multiplies in bf16; keep fp32.
        if hasattr(module, "support_avx512bf16_for_cpu"):
            module.support_avx512bf16_for_cpu = False
    return model.eval()


def hf_bnb_reference(path: Path):
    """(tokenizer, :func:`hf_bnb_nf4` model): gate-nf4's logits reference."""
    tokenizer = hf_tokenizer(path)
    return tokenizer, hf_bnb_nf4(path)


def peft_lora(model, rank: int = 8, alpha: float = 16, targets: Sequence[str] = ATTENTION):
    """HF PEFT LoRA (dropout 0, PEFT's default init: B = 0) around ``model``'s ``targets``."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=rank, lora_alpha=alpha, target_modules=list(targets), lora_dropout=0.0, bias="none"
    )
    return get_peft_model(model, config)
