"""LoRA dropout as PEFT has it: the same masks give the same logits and gradients as PEFT.

Both sides draw their masks from torch's global generator in module order (q, k, v, o per
layer), so seeding it before each forward gives both the same masks; a different seed is the
control that shows the masks reach the gradients at all.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from assay.adapters import adapter_modules, attach, save_adapter
from assay.adapters.peft_io import peft_key
from assay.adapters.perturb import randomize_adapters

TOLERANCE = 1e-5
DROPOUT = 0.25


def _loss(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def _ours(fresh, method: str) -> torch.nn.Module:
    model = attach(fresh(), method, rank=4, alpha=8, dropout=DROPOUT, targets="all-linear")
    return randomize_adapters(model, seed=9).train()


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    out = {}
    for name, adapter in adapter_modules(model):
        for tensor, param in adapter.named_parameters(recurse=False):
            if param.requires_grad:
                out[peft_key(name, tensor)] = param.grad.clone()
                param.grad = None
    return out


def _step(model: torch.nn.Module, ids: torch.Tensor, seed: int) -> torch.Tensor:
    torch.manual_seed(seed)
    logits = model(ids)
    _loss(logits, ids).backward()
    return logits.detach()


@pytest.mark.parametrize("method", ["lora", "dora"])
def test_same_masks_give_peft_gradients(fresh, qwen2_dir, ids, tmp_path, method):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    ours = _ours(fresh, method)
    save_adapter(ours, tmp_path)
    hf = AutoModelForCausalLM.from_pretrained(qwen2_dir, dtype=torch.float32)
    theirs = PeftModel.from_pretrained(hf, tmp_path, is_trainable=True).train()
    assert theirs.peft_config["default"].lora_dropout == DROPOUT

    logits = _step(ours, ids, seed=3)
    grads = _grads(ours)
    torch.manual_seed(3)
    reference = theirs(input_ids=ids).logits
    _loss(reference, ids).backward()
    peft_grads = {
        n.replace(".default", ""): p.grad for n, p in theirs.named_parameters() if p.requires_grad
    }
    assert (reference - logits).abs().max() <= TOLERANCE
    for key, grad in grads.items():
        other = peft_grads[key if key in peft_grads else f"{key}.weight"]
        assert (other - grad).abs().max() <= TOLERANCE, key

    # Control: other masks move the gradients far past the tolerance, so the parity above
    # is a statement about the masks, not one that holds whatever they are.
    _step(ours, ids, seed=4)
    moved = max((g - grads[k]).abs().max().item() for k, g in _grads(ours).items())
    assert moved > 100 * TOLERANCE


def test_dropout_is_off_in_eval_mode_and_at_zero(fresh, ids):
    plain = attach(fresh(), "lora", rank=4, alpha=8, targets="all-linear")
    plain = randomize_adapters(plain, seed=9)
    dropped = _ours(fresh, "lora")
    expected = plain(ids)
    assert torch.equal(dropped.eval()(ids), expected)
    assert not torch.equal(dropped.train()(ids), expected)
    zero = attach(fresh(), "lora", rank=4, dropout=0.0, targets="all-linear")
    assert zero.assay_adapter_spec.options == {}


def test_dropout_round_trips_through_peft_config(fresh, tmp_path):
    from assay.adapters import load_adapter

    save_adapter(_ours(fresh, "lora"), tmp_path)
    loaded = load_adapter(fresh(), tmp_path)
    assert loaded.assay_adapter_spec.options == {"dropout": DROPOUT}
    assert all(a.dropout == DROPOUT for _, a in adapter_modules(loaded))
