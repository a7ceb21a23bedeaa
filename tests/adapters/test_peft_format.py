"""PEFT format: our save loads in PEFT with our logits and gradients; PEFT's save loads in ours."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from assay.adapters import adapter_modules, attach, load_adapter, save_adapter
from assay.adapters.peft_io import peft_key
from assay.adapters.perturb import randomize_adapters
from assay.errors import ConfigError

TOLERANCE = 1e-5
PEFT_METHODS = ["lora", "rslora", "lora_fa", "dora"]


def _loss(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


@pytest.mark.parametrize("method", PEFT_METHODS)
def test_peft_loads_our_adapter_with_equal_logits_and_gradients(
    fresh, qwen2_dir, ids, tmp_path, method
):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    ours = randomize_adapters(attach(fresh(), method, rank=4, alpha=8, layers=[1]), seed=9)
    logits = ours(ids)
    _loss(logits, ids).backward()
    save_adapter(ours, tmp_path)
    config = json.loads((tmp_path / "adapter_config.json").read_text())
    assert config["layers_to_transform"] == [1]
    hf = AutoModelForCausalLM.from_pretrained(qwen2_dir, dtype=torch.float32)
    theirs = PeftModel.from_pretrained(hf, tmp_path, is_trainable=True)
    if method == "lora_fa":
        for name, param in theirs.named_parameters():
            param.requires_grad_(param.requires_grad and "lora_A" not in name)
    reference = theirs(input_ids=ids).logits
    assert (reference - logits).abs().max() <= TOLERANCE
    _loss(reference, ids).backward()
    grads = {
        n.replace(".default", ""): p.grad for n, p in theirs.named_parameters() if p.requires_grad
    }
    compared = 0
    for name, adapter in adapter_modules(ours):
        for tensor, param in adapter.named_parameters(recurse=False):
            if not param.requires_grad:
                continue
            key = peft_key(name, tensor)
            key = key if key in grads else f"{key}.weight"
            assert (grads[key] - param.grad).abs().max() <= TOLERANCE, key
            compared += 1
    assert compared == len(grads) > 0


@pytest.mark.parametrize("method", ["lora", "dora"])
def test_a_peft_saved_adapter_loads_into_assay(fresh, qwen2_dir, ids, tmp_path, method):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(qwen2_dir, dtype=torch.float32)
    config = LoraConfig(
        r=4,
        lora_alpha=8,
        target_modules=["q_proj", "down_proj"],
        use_dora=method == "dora",
        lora_dropout=0.0,
    )
    theirs = get_peft_model(hf, config)
    with torch.no_grad():
        for name, param in theirs.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05)
    theirs.save_pretrained(tmp_path)
    with pytest.warns(UserWarning, match=r"the base model could not be verified"):
        ours = load_adapter(fresh(), tmp_path)  # PEFT records no fingerprint of the base
    assert ours.assay_adapter_spec.method == method
    with torch.no_grad():
        error = (theirs(input_ids=ids).logits - ours(ids)).abs().max()
    assert error <= TOLERANCE


@pytest.mark.parametrize("method", PEFT_METHODS)
def test_save_and_load_restore_parameters_and_logits_bitwise(fresh, ids, tmp_path, method):
    ours = randomize_adapters(attach(fresh(), method, rank=4, targets="all-linear"), seed=1)
    save_adapter(ours, tmp_path)
    loaded = load_adapter(fresh(), tmp_path)
    assert loaded.assay_adapter_spec == ours.assay_adapter_spec
    mine, back = dict(ours.named_parameters()), dict(loaded.named_parameters())
    assert mine.keys() == back.keys()
    assert all(torch.equal(mine[k], back[k]) for k in mine)
    assert all(mine[k].requires_grad == back[k].requires_grad for k in mine)
    with torch.no_grad():
        assert torch.equal(ours(ids), loaded(ids))


def test_a_save_missing_one_tensor_is_refused(fresh, tmp_path):
    save_adapter(attach(fresh(), "dora", rank=4), tmp_path)
    weights = tmp_path / "adapter_model.safetensors"
    tensors = load_file(weights)
    dropped = sorted(tensors)[0]
    del tensors[dropped]
    save_file(tensors, weights)
    with pytest.raises(ConfigError, match="missing"):
        load_adapter(fresh(), tmp_path)


def test_unsupported_peft_config_fields_are_refused(fresh, tmp_path):
    save_adapter(attach(fresh(), "lora", rank=4), tmp_path)
    path = tmp_path / "adapter_config.json"
    config = json.loads(path.read_text())
    path.write_text(json.dumps({**config, "bias": "all"}))
    with pytest.raises(ConfigError, match="bias='all' is not supported"):
        load_adapter(fresh(), tmp_path)


def test_nothing_to_save_is_a_config_error(fresh, tmp_path):
    with pytest.raises(ConfigError, match="no adapter attached"):
        save_adapter(fresh(), tmp_path)
    with pytest.raises(ConfigError, match="export the merged model"):
        save_adapter(attach(fresh(), "full"), tmp_path)
    with pytest.raises(ConfigError, match="not an adapter folder"):
        load_adapter(fresh(), tmp_path)


def test_dora_with_rslora_scaling_is_refused_not_loaded_with_alpha_over_r(fresh, tmp_path):
    save_adapter(attach(fresh(), "dora", rank=4), tmp_path)
    (tmp_path / "assay_adapter.json").unlink()  # as PEFT writes it: no assay sidecar
    path = tmp_path / "adapter_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "use_rslora": True}))
    with pytest.raises(ConfigError, match="use_dora with use_rslora is not supported"):
        load_adapter(fresh(), tmp_path)


def test_an_adapter_saved_from_one_base_is_refused_on_another(fresh, tiny_models, tmp_path):
    import warnings

    import assay

    model = fresh()
    attach(model, "lora", rank=2, alpha=4, targets=["q_proj"])
    save_adapter(model, tmp_path / "a")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # its own base: verified, so no warning either
        load_adapter(fresh(), tmp_path / "a")
    other = assay.load(tiny_models["qwen2"]["hf"], storage="float32")
    other.fingerprint = type(other.fingerprint)(
        **{**other.fingerprint.__dict__, "canonical_sha256": "f" * 64}
    )  # the same shapes, other weights: only the fingerprint can tell
    with pytest.raises(ConfigError, match=r"base_model_sha256: trained on another base model"):
        load_adapter(other, tmp_path / "a")
