"""gate-generation: assay's greedy decoding of a trained adapter equals transformers + PEFT's.

A LoRA adapter (r8 on the attention projections of layers 20-29) is trained for a few steps on
the swap task on the bundled SmolLM2-135M-Instruct (fp32), exported by assay as a PEFT folder,
and loaded by transformers + PEFT onto the same GGUF weights (``gguf_file=``, dequantized to
fp32). Both decode one left-padded batch of prompts of different token lengths greedily for
``NEW_TOKENS`` tokens, eos ignored, assay with its KV cache: the tokens must be equal, and the
logits at every generated position must agree within ``LOGITS``. Controls patch in a defect of
cached decoding (the new token rotated at the previous token's position) and one of padding
(pads attended to), each of which must fail the claims.

Long (``nox -s gate-generation``, about 2 minutes): fp32 differences of two stacks depend on the
CPU's kernels, so it stays out of CI's regression run until a pilot across machines sets its
tolerance there.
"""

from __future__ import annotations

import torch

from assay.adapters import save_adapter
from assay.model.generate import generate
from assay.qualify import Threshold
from assay.settings.loader import train_config_from_dict
from assay.train.loop import Trainer
from assay_testing import defects
from assay_testing.peers import hf_model
from assay_testing.real_model import smollm2_path
from assay_testing.swap_task import ADAPTER, SEED, make_split, sft_rows, write_sft
from assay_testing.trained_weights import needs_trained_weights

# the claim a reader looks at first (the index and every record lead with it)
HEADLINE = "generate.tokens_equal"

IMPLEMENTATION = (
    "assay_testing.swap_task",
    "assay.model.generate",
    "assay.model.cache",
    "assay.model.decoder",
    "assay.adapters.peft_io",
    "assay.adapters.lora",
    "assay_testing.defects.model",  # the controls' defects: a change to a patch stales them
    "assay_testing.patching",
)
NEW_TOKENS = 8
STEPS = 10
# fp32 on both sides, the same weights: the pilot's largest logit difference was 6.9e-5 (about
# 18 float32 ulps of a logit near 30, after 30 layers of different summation orders); 1e-4 is
# what issue #28 asks and stays; the defects move the logits by 20 and more.
LOGITS = Threshold("<=", 1e-4)
CACHE_DEFECT = "model.generate.cached_position_stale"
PADDING_DEFECT = "model.cache.pads_attended"


def _prompts(tokenizer, split) -> list[list[int]]:
    """Held-out swap prompts behind 0 to 4 solved examples: five distinct token lengths."""
    shots = [f"{item.prompt}{item.answer}\n" for item in split.train[:4]]
    texts = ["".join(shots[:k]) + item.prompt for k, item in enumerate(split.held_out[:5])]
    return [tokenizer.encode(text, add_special_tokens=True) for text in texts]


def _assay_decode(model, prompts, pad_id: int) -> tuple[list[list[int]], list[torch.Tensor]]:
    out = generate(
        model, prompts, max_new_tokens=NEW_TOKENS, eos_id=None, pad_id=pad_id, keep_logits=True
    )
    return [list(g.tokens) for g in out], [g.logits for g in out]


def _hf_decode(model, prompts, pad_id: int) -> tuple[list[list[int]], list[torch.Tensor]]:
    """transformers' greedy ``generate`` on the same left-padded batch, eos ignored."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt)
        mask[row, width - len(prompt) :] = 1
    model.generation_config.eos_token_id = None
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
            do_sample=False,
            pad_token_id=pad_id,
            output_logits=True,
            return_dict_in_generate=True,
        )
    logits = torch.stack(out.logits, dim=1).float()  # [rows, new tokens, vocab], unprocessed
    return out.sequences[:, width:].tolist(), list(logits)


def _gaps(tokens, logits, want_tokens, want_logits) -> tuple[int, float]:
    """(differing tokens, largest |logit difference| over every generated position)."""
    differing = sum(
        a != b
        for got, want in zip(tokens, want_tokens, strict=True)
        for a, b in zip(got, want, strict=True)
    )
    gap = max(float((a - b).abs().max()) for a, b in zip(logits, want_logits, strict=True))
    return differing, gap


def _trained(tmp_path) -> Trainer:
    split = make_split()
    rows = write_sft(tmp_path / "train.jsonl", sft_rows(split.train))
    config = {
        "model": str(smollm2_path()),
        "adapter": ADAPTER,
        "data": {"train": str(rows), "seq_len": 32},
        "optim": {"lr": 2e-3},
        "batch": {"micro_batch": 8},
        "steps": STEPS,
        "output": {"dir": str(tmp_path / "run")},
    }
    trainer = Trainer(train_config_from_dict(config, tmp_path / "run.yaml"), progress=False)
    for _ in range(STEPS):
        trainer.train_step()
    return trainer


def test_greedy_generation_equals_transformers_peft(gate, tmp_path):
    from peft import PeftModel

    needs_trained_weights(gate, "generate.tokens_equal", "generate.logits", "batch.lengths")
    gate.input("model", smollm2_path())
    gate.seed(SEED, 0)
    trainer = _trained(tmp_path)
    split = make_split()
    prompts = _prompts(trainer.tokenizer, split)
    save_adapter(trainer.base, tmp_path / "peft")
    reference = PeftModel.from_pretrained(hf_model(smollm2_path()), tmp_path / "peft").eval()
    pad = trainer.pad_id
    want_tokens, want_logits = _hf_decode(reference, prompts, pad)
    tokens, logits = _assay_decode(trainer.base, prompts, pad)
    controls = {}
    for name in (CACHE_DEFECT, PADDING_DEFECT):
        with defects.inject(name):
            controls[name] = _gaps(
                *_assay_decode(trainer.base, prompts, pad), want_tokens, want_logits
            )
    differing, gap = _gaps(tokens, logits, want_tokens, want_logits)
    lengths = sorted({len(p) for p in prompts})
    claim = gate.claim(
        "batch.lengths",
        f"the compared batch holds prompts of {len(lengths)} distinct token lengths "
        f"({', '.join(map(str, lengths))}), so left padding is exercised",
        kind="correctness",
        threshold=Threshold(">=", 4),
        unit="distinct lengths",
        code=IMPLEMENTATION,
    )
    claim.measure(len(lengths))
    claim.control("the held-out prompts alone (one length)", len({len(p) for p in prompts[:1]}))
    n = len(prompts) * NEW_TOKENS
    claim = gate.claim(
        "generate.tokens_equal",
        f"greedy decoding of the trained LoRA (assay, KV cache) gives transformers + PEFT's "
        f"tokens on a left-padded batch of {len(prompts)} prompts, {NEW_TOKENS} new tokens each",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit=f"differing tokens of {n}",
        code=IMPLEMENTATION,
    )
    claim.measure(differing)
    claim.control("pads attended to (padding defect)", controls[PADDING_DEFECT][0])
    claim = gate.claim(
        "generate.logits",
        "the logits at every generated position agree with transformers + PEFT's (fp32, the "
        "same weights)",
        kind="correctness",
        threshold=LOGITS,
        unit="max |logit difference|",
        code=IMPLEMENTATION,
    )
    claim.measure(gap)
    claim.control(
        "the new token rotated at the previous position (cache defect)", controls[CACHE_DEFECT][1]
    )
    claim.control("pads attended to (padding defect)", controls[PADDING_DEFECT][1])
    gate.note(
        "controls, (differing tokens, max |logit difference|): "
        + ", ".join(f"{k} {v[0]}, {v[1]:.3g}" for k, v in controls.items())
    )
    gate.note(f"prompt token lengths: {[len(p) for p in prompts]}; assay tokens: {tokens[:2]}")
