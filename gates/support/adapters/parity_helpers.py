"""Helpers for gate-adapters' parity claims (not a gate module): the subjects, PEFT twins
holding exactly our adapter tensors, the comparisons, the broken variants the controls use,
TinyLoRA's dense fp64 reference, and bitwise restore counts (gate-exports' restore claims).
"""

from __future__ import annotations

import copy
import types
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

import assay
from assay.adapters import adapter_modules, attach, load_adapter
from assay.adapters.lora import lora_scaling
from assay.errors import ConfigError
from assay.qualify import Threshold
from support.adapters.file_helpers import ce

RANK, ALPHA, SEED = 8, 16, 0
PARITY = Threshold("<=", 1e-5, tolerance=0.1)


class Subject:
    """One model, loaded once: assay's decoder, transformers' twin, token ids, base logits."""

    def __init__(self, name: str, path: Path, ids: torch.Tensor, targets: str) -> None:
        from transformers import AutoModelForCausalLM

        self.name, self.path, self.ids, self.targets = name, path, ids, targets
        self.model = assay.load(path)
        kwargs = {"gguf_file": path.name} if path.suffix == ".gguf" else {}
        directory = path.parent if path.suffix == ".gguf" else path
        self.hf = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32, **kwargs)
        with torch.no_grad():
            self.base = self.model(ids)
            self.hf_base = self.hf(input_ids=ids).logits

    def fresh(self, method: str, seed: int = SEED, **options) -> torch.nn.Module:
        model = copy.deepcopy(self.model)
        targets = self.targets
        if method == "tinylora" and self.name == "smollm2":
            targets = "attention"  # an SVD per projection: MLP ones cost minutes on 2 cores
        return attach(model, method, rank=RANK, alpha=ALPHA, targets=targets, seed=seed, **options)


def peft_twin(subject: Subject, ours: torch.nn.Module, method: str):
    """PEFT on a copy of the transformers model, holding exactly our adapter tensors."""
    from peft import LoraConfig, get_peft_model

    spec = ours.assay_adapter_spec
    config = LoraConfig(
        r=RANK,
        lora_alpha=ALPHA,
        target_modules=list(spec.targets),
        use_rslora=method == "rslora",
        use_dora=method == "dora",
        lora_dropout=0.0,
    )
    twin = get_peft_model(copy.deepcopy(subject.hf), config)
    params = dict(twin.named_parameters())
    with torch.no_grad():
        for name, adapter in adapter_modules(ours):
            for tensor, value in adapter.named_parameters(recurse=False):
                target = params[f"base_model.model.model.{name}.{tensor}.default.weight"]
                target.copy_(value)
                target.requires_grad_(value.requires_grad)  # LoRA-FA: A frozen on both sides
    return twin


def run_ours(ours: torch.nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, dict]:
    logits = ours(ids)
    ce(logits, ids).backward()
    grads = {
        f"{n}.{t}": p.grad
        for n, a in adapter_modules(ours)
        for t, p in a.named_parameters(recurse=False)
        if p.requires_grad
    }
    return logits.detach(), grads


def run_twin(twin, ids: torch.Tensor) -> tuple[torch.Tensor, dict]:
    logits = twin(input_ids=ids).logits
    ce(logits, ids).backward()
    grads = {
        n.removeprefix("base_model.model.model.").replace(".default.weight", ""): p.grad
        for n, p in twin.named_parameters()
        if p.requires_grad
    }
    return logits.detach(), grads


def compare(ours, theirs) -> tuple[float, float, int, int]:
    """(logit error, worst gradient error, tensors within PARITY, tensors compared).

    A tensor trainable on one side only is compared with a zero gradient on the other.
    """
    (logits, grads), (ref_logits, ref_grads) = ours, theirs
    errors = []
    for key in grads.keys() | ref_grads.keys():
        mine, ref = grads.get(key), ref_grads.get(key)
        mine = torch.zeros_like(ref) if mine is None else mine
        ref = torch.zeros_like(mine) if ref is None else ref
        errors.append((mine - ref).abs().max().item())
    within = sum(e <= PARITY.value for e in errors)
    return (logits - ref_logits).abs().max().item(), max(errors), within, len(errors)


def swap_scale(model: torch.nn.Module) -> torch.nn.Module:
    """rsLoRA's alpha/sqrt(r) where alpha/r belongs, and the other way round."""
    for _, adapter in adapter_modules(model):
        other = "lora" if adapter.method == "rslora" else "rslora"
        adapter.scaling = lora_scaling(other, adapter.rank, adapter.alpha)
    return model


def unfreeze_a(model: torch.nn.Module) -> torch.nn.Module:
    """LoRA-FA with A trainable, i.e. plain LoRA where only B should learn."""
    for _, adapter in adapter_modules(model):
        adapter.lora_A.requires_grad_(True)
    return model


def attach_norm(model: torch.nn.Module) -> torch.nn.Module:
    """DoRA with the row norm left in the autograd graph (PEFT and the paper detach it)."""

    def weight_norm(self):
        from assay.adapters import dense_weight

        update = self.lora_B @ self.lora_A
        return torch.linalg.norm(dense_weight(self.base) + self.scaling * update, dim=1)

    for _, adapter in adapter_modules(model):
        adapter.weight_norm = types.MethodType(weight_norm, adapter)
    return model


def top_singular_values(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Each target's leading singular values in fp64: the reference, computed once."""
    from assay.adapters import dense_weight

    return {
        name: torch.linalg.svdvals(dense_weight(a.base).double())[: a.r]
        for name, a in adapter_modules(model)
    }


def tinylora_error(model: torch.nn.Module, top: dict[str, torch.Tensor]) -> float:
    """Worst relative error over targets of (a) the forward against x dW^T, dW = U S (sum v_i
    P_i) V^T in fp64, and (b) (U, S, V^T) as W's truncated SVD: S against fp64 singular values,
    W V = U S, and U, V orthonormal (checks that hold whatever the singular-value gaps)."""
    from assay.adapters import dense_weight

    generator = torch.Generator().manual_seed(2)
    worst = 0.0
    for name, adapter in adapter_modules(model):
        weight = dense_weight(adapter.base).double()
        u, s, vt = (adapter.tiny_U.double(), adapter.tiny_S.double(), adapter.tiny_V.double())
        eye = torch.eye(adapter.r, dtype=torch.float64)
        svd_error = max(
            ((s - top[name]).abs().max() / top[name][0]).item(),
            ((weight @ vt.T - u * s).abs().max() / top[name][0]).item(),
            (u.T @ u - eye).abs().max().item(),
            (vt @ vt.T - eye).abs().max().item(),
        )
        mix = torch.einsum("u,uij->ij", adapter.tiny_v.double(), adapter.tiny_P.double())
        delta = (u * s) @ mix @ vt
        x = torch.randn(3, adapter.in_features, generator=generator)
        with torch.no_grad():
            got = (adapter(x) - adapter.base(x)).double()
        expected = x.double() @ delta.T
        forward = ((got - expected).abs().max() / expected.abs().max()).item()
        worst = max(worst, svd_error, forward)
    return worst


@torch.no_grad()
def sqrt_split(model: torch.nn.Module) -> torch.nn.Module:
    """PEFT's basis instead of the paper's: sqrt(S) on both sides of the mix."""
    for _, adapter in adapter_modules(model):
        root = adapter.tiny_S.sqrt()
        adapter.tiny_U.mul_(root / adapter.tiny_S)
        adapter.tiny_V.mul_(root[:, None])
    return model


def transposed_mix(model: torch.nn.Module) -> torch.nn.Module:
    """sum v_i P_i^T where sum v_i P_i is promised."""
    for _, adapter in adapter_modules(model):
        adapter.mixing = types.MethodType(
            lambda self: torch.einsum("u,uji->ij", self.tiny_v, self.tiny_P), adapter
        )
    return model


def restore_mismatches(subject: Subject, saved: torch.nn.Module, folder: Path) -> int:
    """Tensors (adapter params and buffers, plus the logits) not bitwise equal after a reload;
    a refused load restores nothing, so every tensor counts."""
    state = {k: v for k, v in saved.state_dict().items() if "lora_" in k or "tiny_" in k}
    try:
        loaded = load_adapter(copy.deepcopy(subject.model), folder)
    except ConfigError:
        return len(state) + 1
    back = loaded.state_dict()
    bad = sum(k not in back or not torch.equal(v, back[k]) for k, v in state.items())
    with torch.no_grad():
        bad += not torch.equal(saved(subject.ids), loaded(subject.ids))
    return bad


def damage(folder: Path, how: str) -> None:
    weights = next(folder.glob("*.safetensors"))
    tensors = load_file(weights)
    key = sorted(tensors)[-1]
    if how == "drop":
        del tensors[key]
    else:  # one value one ulp away
        flat = tensors[key].flatten()
        flat[0] = torch.nextafter(flat[0], flat[0] + 1)
        tensors[key] = flat.reshape(tensors[key].shape)
    save_file(tensors, weights)


def differing(a: torch.Tensor, b: torch.Tensor) -> int:
    """Elements that are not bitwise equal (torch.equal, counted)."""
    return int((a != b).sum().item())
