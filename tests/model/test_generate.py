"""Greedy generation with a KV cache: token for token against transformers' ``generate``
(greedy, left-padded batches), cached against full recompute, with adapters and NF4."""

from __future__ import annotations

import pytest
import torch

import assay
from assay.adapters import attach, save_adapter
from assay.adapters.perturb import randomize_adapters
from assay.errors import AssayError
from assay.model.generate import generate
from assay_testing.tiny import FAMILIES

NEW = 12


def _prompts(seed: int = 5, lengths=(5, 9, 3)) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 320, (n,), generator=g).tolist() for n in lengths]


def _left_padded(prompts) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(ids, attention mask, width) of ``prompts`` padded on the left with token 0."""
    width = max(len(p) for p in prompts)
    ids = torch.zeros((len(prompts), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt)
        mask[row, width - len(prompt) :] = 1
    return ids, mask, width


def _hf_generate(hf, prompts, new: int = NEW, eos: int | None = None) -> list[list[int]]:
    """transformers' greedy generate on the same left-padded batch, cut at the first eos."""
    ids, mask, width = _left_padded(prompts)
    with torch.no_grad():
        out = hf.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=new,
            do_sample=False,
            pad_token_id=0,
            eos_token_id=eos,
        )
    rows = []
    for row in out[:, width:].tolist():
        rows.append(row[: row.index(eos)] if eos is not None and eos in row else row)
    return rows


def _hf(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_matches_transformers_generate_on_a_padded_batch(tiny_models, family):
    path = tiny_models[family]["hf"]
    prompts = _prompts()
    got = generate(assay.load(path), prompts, max_new_tokens=NEW, eos_id=None)
    assert [list(g.tokens) for g in got] == _hf_generate(_hf(path), prompts)
    assert all(g.stop == "length" and len(g.tokens) == NEW for g in got)


@pytest.mark.parametrize("family", FAMILIES)
def test_one_prompt_alone_matches_transformers(tiny_models, family):
    path = tiny_models[family]["hf"]
    hf, ours = _hf(path), assay.load(path)
    for prompt in _prompts(seed=8):
        assert (
            list(generate(ours, [prompt], max_new_tokens=NEW, eos_id=None)[0].tokens)
            == (_hf_generate(hf, [prompt])[0])
        )


def test_decoding_stops_at_eos_like_transformers(tiny_models):
    path = tiny_models["llama3"]["hf"]
    ours, prompts = assay.load(path), _prompts()
    free = generate(ours, prompts, max_new_tokens=NEW, eos_id=None)
    eos = free[0].tokens[3]  # a token row 0 emits by step 4: make it the stop token
    got = generate(ours, prompts, max_new_tokens=NEW, eos_id=eos)
    assert got[0].stop == "eos" and len(got[0].tokens) <= 3
    for g, f in zip(got, free, strict=True):
        cut = f.tokens.index(eos) if eos in f.tokens else len(f.tokens)
        assert g.tokens == f.tokens[:cut]
        assert g.stop == ("eos" if eos in f.tokens else "length")
    assert [list(g.tokens) for g in got] == _hf_generate(_hf(path), prompts, eos=eos)


def test_sliding_window_applies_to_the_cache(tmp_path):
    """A Mistral window of 6 and 20 new tokens: keys older than the window drop out."""
    from transformers import AutoModelForCausalLM, MistralConfig

    from assay_testing.tiny import _COMMON

    torch.manual_seed(4)
    config = MistralConfig(**_COMMON, sliding_window=6, tie_word_embeddings=False)
    hf = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for param in hf.parameters():
            param.normal_(0, 0.1)
    hf.save_pretrained(tmp_path)
    ours = assay.load(tmp_path)
    assert ours.config.sliding_window == 6
    prompts = _prompts(lengths=(9, 4))
    got = generate(ours, prompts, max_new_tokens=20, eos_id=None)
    assert [list(g.tokens) for g in got] == _hf_generate(hf.eval(), prompts, new=20)
    unwindowed = generate(
        assay.load(tmp_path), prompts, max_new_tokens=20, eos_id=None, use_cache=False
    )
    assert [g.tokens for g in got] == [g.tokens for g in unwindowed]


@pytest.mark.parametrize(
    ("storage", "stored_embeddings"),
    [("float32", False), ("nf4_double_quant", False), ("nf4_double_quant", True)],
)
def test_cached_equals_full_recompute_with_adapters(tiny_models, storage, stored_embeddings):
    """Stored embeddings too: a FrozenEmbedding holds no ``weight`` for generation to ask."""
    model = assay.load(
        tiny_models["qwen2"]["hf"], storage=storage, quantize_embeddings=stored_embeddings
    )
    randomize_adapters(attach(model, "lora", rank=4, alpha=8, targets="all-linear"), seed=3)
    prompts = _prompts(seed=2, lengths=(7, 2, 11, 5))
    cached = generate(model, prompts, max_new_tokens=16, eos_id=None)
    full = generate(model, prompts, max_new_tokens=16, eos_id=None, use_cache=False)
    assert [g.tokens for g in cached] == [g.tokens for g in full]


def test_adapter_generation_matches_peft(tiny_models, tmp_path):
    from peft import PeftModel

    path = tiny_models["qwen2"]["hf"]
    ours = randomize_adapters(attach(assay.load(path), "lora", rank=4, alpha=8), seed=6, std=0.2)
    save_adapter(ours, tmp_path)
    theirs = PeftModel.from_pretrained(_hf(path), tmp_path).eval()
    prompts = _prompts(seed=3)
    got = [list(g.tokens) for g in generate(ours, prompts, max_new_tokens=NEW, eos_id=None)]
    assert got == _hf_generate(theirs, prompts)
    plain = generate(assay.load(path), prompts, max_new_tokens=NEW, eos_id=None)
    assert got != [list(g.tokens) for g in plain]  # the adapter changes what is generated


def test_a_stale_cache_is_caught(tiny_models, monkeypatch):
    """Control for the parity tests: a cache that appends a stale value instead of the new one
    decodes differently. (Positions that count the left padding would not be caught, and need
    not be: rotary attention depends on position differences only, and pads are masked.)"""
    from assay.model.cache import LayerCache

    path = tiny_models["llama3"]["hf"]
    prompts = _prompts()
    want = _hf_generate(_hf(path), prompts)
    model = assay.load(path)

    def stale(self, k, v):
        if self.keys is not None:
            v = self.values[:, :, -1:]
        return original(self, k, v)

    original = LayerCache.extend
    with monkeypatch.context() as patch:
        patch.setattr(LayerCache, "extend", stale)
        broken = generate(model, prompts, max_new_tokens=NEW, eos_id=None)
    assert [list(g.tokens) for g in broken] != want


def test_kept_logits_are_transformers_output_logits(tiny_models):
    """``keep_logits``: per row, the logits each new token was chosen from, as transformers'
    ``output_logits`` gives them on the same left-padded batch; their argmax is the token."""
    path = tiny_models["llama3"]["hf"]
    prompts = _prompts()
    got = generate(assay.load(path), prompts, max_new_tokens=NEW, eos_id=None, keep_logits=True)
    ids, mask, _ = _left_padded(prompts)
    with torch.no_grad():
        out = _hf(path).generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=NEW,
            do_sample=False,
            pad_token_id=0,
            eos_token_id=None,
            output_logits=True,
            return_dict_in_generate=True,
        )
    want = torch.stack(out.logits, dim=1)
    for row, g in enumerate(got):
        assert g.logits.shape == (NEW, want.shape[-1]) and g.logits.dtype == torch.float32
        assert torch.equal(g.logits.argmax(-1), torch.tensor(g.tokens))
        torch.testing.assert_close(g.logits, want[row], rtol=0, atol=1e-4)
    assert generate(assay.load(path), prompts, max_new_tokens=2, eos_id=None)[0].logits is None


def test_bad_requests_are_one_line_errors(tiny_models):
    model = assay.load(tiny_models["llama3"]["hf"])
    with pytest.raises(AssayError, match="no prompts"):
        generate(model, [], max_new_tokens=1, eos_id=None)
    with pytest.raises(AssayError, match="empty"):
        generate(model, [[5], []], max_new_tokens=1, eos_id=None)
    with pytest.raises(AssayError, match="negative"):
        generate(model, [[5]], max_new_tokens=-1, eos_id=None)
    assert generate(model, [[5]], max_new_tokens=0, eos_id=None)[0].tokens == ()


@pytest.mark.slow
def test_smollm2_generation_matches_transformers(smollm2_path):
    from transformers import AutoModelForCausalLM

    from assay.model.tokenizer import load_tokenizer

    hf = AutoModelForCausalLM.from_pretrained(
        smollm2_path.parent, gguf_file=smollm2_path.name, dtype=torch.float32
    ).eval()
    tok = load_tokenizer(smollm2_path)
    texts = ["The capital of France is", "def fibonacci(n):", "Input: cat river\nOutput:"]
    prompts = [tok.encode(t, add_special_tokens=True) for t in texts]
    got = generate(assay.load(smollm2_path), prompts, max_new_tokens=16, eos_id=tok.eos_id)
    want = [_hf_generate(hf, [p], new=16, eos=tok.eos_id)[0] for p in prompts]
    assert [list(g.tokens) for g in got] == want
