"""Helpers for gate-exports' file round trips and gate-adapters' direct measurements (not a
gate module).

Corrupt PEFT folders and exported tensors the way a wrong writer would, load them through
PEFT, transformers and the gguf package, and measure frozen tensors byte for byte.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from assay.adapters import adapter_modules, load_adapter
from assay.errors import ConfigError
from assay.model.gguf import gguf_name


def ce(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def rewrite_folder(folder: Path, how: str) -> None:
    """Corrupt a PEFT folder on disk the way a wrong writer would.

    ``transpose``: every square q_proj pair stored as (B^T, A^T), shapes still fit;
    ``scale``: adapter_config.json's use_rslora flipped (alpha/r against alpha/sqrt(r));
    ``keys``: q_proj's and o_proj's tensors stored under each other's keys (same shapes).
    """
    weights, config = folder / "adapter_model.safetensors", folder / "adapter_config.json"
    tensors = load_file(weights)
    if how == "transpose":
        for key in [k for k in tensors if "q_proj.lora_A" in k]:
            b_key = key.replace("lora_A", "lora_B")
            tensors[key], tensors[b_key] = (
                tensors[b_key].t().contiguous(),
                tensors[key].t().contiguous(),
            )
    elif how == "keys":
        for key in [k for k in tensors if "q_proj" in k]:
            other = key.replace("q_proj", "o_proj")
            if other in tensors and tensors[other].shape == tensors[key].shape:
                tensors[key], tensors[other] = tensors[other], tensors[key]
    save_file(tensors, weights, metadata={"format": "pt"})
    if how == "scale":
        cfg = json.loads(config.read_text())
        cfg["use_rslora"] = not cfg["use_rslora"]
        config.write_text(json.dumps(cfg))


def peft_loads_ours(subject: Any, folder: Path, expected: torch.Tensor) -> float:
    """Max abs logit error of PeftModel.from_pretrained(transformers model, folder)."""
    from peft import PeftModel

    twin = PeftModel.from_pretrained(copy.deepcopy(subject.hf), folder).eval()
    with torch.no_grad():
        return (twin(input_ids=subject.ids).logits - expected).abs().max().item()


def ours_loads_peft(subject: Any, folder: Path, expected: torch.Tensor) -> float:
    """Max abs logit error of assay's load_adapter on a folder PEFT wrote. A refused folder
    (ConfigError) counts as an error as large as the largest reference logit."""
    try:
        model = load_adapter(copy.deepcopy(subject.model), folder)
    except ConfigError:
        return expected.abs().max().item()
    with torch.no_grad():
        return (model(subject.ids) - expected).abs().max().item()


def corrupt_tensors(tensors: dict, how: str, prefix: str = "") -> dict:
    """A wrong writer's tensors: ``transpose`` layer 0's o_proj (square), ``keys`` layer 0's
    gate_proj and up_proj under each other's names (same shape)."""
    out = dict(tensors)
    layer = f"{prefix}layers.0."
    if how == "transpose":
        key = f"{layer}self_attn.o_proj.weight"
        out[key] = tensors[key].t().contiguous()
    elif how == "keys":
        gate_key, up_key = f"{layer}mlp.gate_proj.weight", f"{layer}mlp.up_proj.weight"
        out[gate_key], out[up_key] = tensors[up_key], tensors[gate_key]
    return out


def transformers_error(directory: Path, ids: torch.Tensor, expected, gguf_file=None) -> float:
    kwargs = {"gguf_file": gguf_file} if gguf_file else {}
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32, **kwargs).eval()
    with torch.no_grad():
        return (hf(input_ids=ids).logits - expected).abs().max().item()


def reader_mismatches(path: Path, tensors: dict) -> int:
    """Tensors that gguf.GGUFReader reads back differently from ``tensors`` (Q/K excluded:
    llama files hold them permuted; transformers' loader checks those)."""
    read = {t.name: np.asarray(t.data) for t in gguf.GGUFReader(path).tensors}
    bad = 0
    for name, tensor in tensors.items():
        if ".q_proj.weight" in name or ".k_proj.weight" in name:
            continue
        got = read.get(gguf_name(name))
        want = tensor.detach().float().numpy()
        bad += got is None or got.shape != want.shape or not np.array_equal(got, want)
    return bad


def train_steps(model: torch.nn.Module, ids: torch.Tensor, params: dict, steps: int = 4):
    """AdamW (weight decay 0.1, so a tensor in the optimizer moves even with a zero gradient)
    over ``params`` for ``steps`` cross-entropy steps; returns the optimizer."""
    optimizer = torch.optim.AdamW(list(params.values()), lr=1e-2, weight_decay=0.1)
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        ce(model(ids), ids).backward()
        for p in params.values():
            if p.grad is None:  # a frozen tensor handed to the optimizer anyway
                p.grad = torch.zeros_like(p)
        optimizer.step()
    return optimizer


def lora_fa_a_changes(model: torch.nn.Module, ids: torch.Tensor, params: dict) -> int:
    """Elements of every LoRA-FA A that differ after training, plus A tensors that have
    optimizer state or sit in a param group."""
    a_tensors = [a.lora_A for _, a in adapter_modules(model)]
    before = [a.detach().clone() for a in a_tensors]
    optimizer = train_steps(model, ids, params)
    grouped = {id(p) for group in optimizer.param_groups for p in group["params"]}
    changed = sum(int((a != b).sum()) for a, b in zip(a_tensors, before, strict=True))
    held = sum(id(a) in grouped or a in optimizer.state for a in a_tensors)
    return changed + held


def base_digests(model: torch.nn.Module) -> dict[str, str]:
    """sha256 of the raw bytes of every non-adapter tensor (parameters and buffers)."""
    out = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        if "lora_" in name or "tiny_" in name:
            continue
        raw = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
        out[name] = hashlib.sha256(raw.numpy().tobytes()).hexdigest()
    return out
