"""gate-generation: assay's greedy decoding of a trained adapter equals transformers + PEFT's.

A LoRA adapter (r8 on the attention projections of layers 20-29) is trained for a few steps on
the swap task on the bundled SmolLM2-135M-Instruct (fp32), exported by assay as a PEFT folder,
and loaded by transformers + PEFT onto the same GGUF weights (``gguf_file=``, dequantized to
fp32). Both decode one left-padded batch of prompts of different token lengths greedily for
``NEW_TOKENS`` tokens, eos ignored, assay with its KV cache: the tokens must be equal, and the
logits at every generated position must agree within ``LOGITS``. Controls patch in a defect of
cached decoding (the new token rotated at the previous token's position) and one of padding
(pads attended to), each of which must fail the claims.

The same adapter, loaded onto each frozen-base storage with dense and with stored embeddings,
must decode with its cache the tokens its own full recompute gives (the training forward at each
step), logits within ``RECOMPUTE``; a control restores the bug that crashed generation on stored
embeddings.

Long (``nox -s gate-generation``, about 6 minutes): fp32 differences of two stacks depend on the
CPU's kernels, so it stays out of CI's regression run until a pilot across machines sets its
tolerance there.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import assay
from assay.adapters import load_adapter, save_adapter
from assay.model.generate import generate
from assay.qualify import Threshold
from assay.settings.loader import train_config_from_dict
from assay.settings.storages import STORAGES, storage
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
    "assay.storage.apply",
    "assay.storage.load",
    "assay_testing.defects.model",  # the controls' defects: a change to a patch stales them
    "assay_testing.patching",
)
NEW_TOKENS = 8
STEPS = 10
# fp32 on both sides, the same weights: the pilot's largest logit difference was 6.9e-5 (about
# 18 float32 ulps of a logit near 30, after 30 layers of different summation orders); 1e-4 is
# what issue #28 asks and stays; the defects move the logits by 20 and more.
LOGITS = Threshold("<=", 1e-4)
# cached against full recompute on one stack: only the summation order differs. Two pilot
# runs' largest gaps over the storage cases were 9.6e-5 and 1.1e-4 (NF4, logits near 30); the
# cache defect moves logits by 20 and more, so 5e-4 leaves the pilots room and hides no defect.
RECOMPUTE = Threshold("<=", 5e-4)
CACHE_DEFECT = "model.generate.cached_position_stale"
PADDING_DEFECT = "model.cache.pads_attended"
EMBEDDING_DEFECT = "model.generate.device_from_embedding"


def _prompts(tokenizer, split) -> list[list[int]]:
    """Held-out swap prompts behind 0 to 4 solved examples: five distinct token lengths."""
    shots = [f"{item.prompt}{item.answer}\n" for item in split.train[:4]]
    texts = ["".join(shots[:k]) + item.prompt for k, item in enumerate(split.held_out[:5])]
    return [tokenizer.encode(text, add_special_tokens=True) for text in texts]


def _assay_decode(
    model, prompts, pad_id: int, use_cache: bool = True
) -> tuple[list[list[int]], list[torch.Tensor]]:
    """assay's greedy tokens and logits: with its KV cache, or (``use_cache`` False) the full
    recompute, the training forward over the whole sequence at each step."""
    out = generate(
        model,
        prompts,
        max_new_tokens=NEW_TOKENS,
        eos_id=None,
        pad_id=pad_id,
        keep_logits=True,
        use_cache=use_cache,
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


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Trainer, list[list[int]], Path]:
    """The trained LoRA: its trainer, the compared prompts, and its PEFT folder."""
    folder = tmp_path_factory.mktemp("generation")
    trainer = _trained(folder)
    save_adapter(trainer.base, folder / "peft")
    return trainer, _prompts(trainer.tokenizer, make_split()), folder / "peft"


def test_greedy_generation_equals_transformers_peft(gate, trained):
    from peft import PeftModel

    needs_trained_weights(gate, "generate.tokens_equal", "generate.logits", "batch.lengths")
    gate.input("model", smollm2_path())
    gate.seed(SEED, 0)
    trainer, prompts, peft = trained
    reference = PeftModel.from_pretrained(hf_model(smollm2_path()), peft).eval()
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


def _case(model, prompts, pad_id: int, reference) -> tuple[int, float | None, str]:
    """(differing tokens against ``reference``, the base's clean full recompute, else 1 when
    cached decoding raised; largest |logit difference|, None when it raised; what was seen)."""
    try:
        differing, gap = _gaps(*_assay_decode(model, prompts, pad_id), *reference)
    except Exception as err:  # a crash is a failed base, named in the note
        return 1, None, f"raised {type(err).__name__}: {err}"
    return differing, gap, f"{differing} tokens, {gap:.3g}"


def test_every_storage_decodes_as_it_recomputes(gate, trained):
    """Issue 55's type check found generate() crashing on a base whose embedding is stored
    (a stored embedding has no ``weight``): every frozen-base storage, with dense embeddings and
    (where the storage converts weights) with stored ones, carrying the trained adapter, decodes
    with its KV cache exactly as the training forward recomputes the whole sequence."""
    gate.input("model", smollm2_path())
    trainer, prompts, peft = trained
    pad = trainer.pad_id
    # a storage that keeps the fp32 parameters keeps the embedding dense too: nothing to store
    cases = [(name, False) for name in STORAGES]
    cases += [(name, True) for name in STORAGES if not storage(name).keeps_parameters]
    seen: dict[str, list[tuple[int, float | None, str]]] = {
        "clean": [],
        CACHE_DEFECT: [],
        EMBEDDING_DEFECT: [],
    }
    for name, stored in cases:
        model = load_adapter(
            assay.load(smollm2_path(), storage=name, quantize_embeddings=stored), peft
        )
        # the reference is recomputed once per base, with no defect armed
        reference = _assay_decode(model, prompts, pad, use_cache=False)
        seen["clean"].append(_case(model, prompts, pad, reference))
        for defect in (CACHE_DEFECT, EMBEDDING_DEFECT):
            with defects.inject(defect):
                seen[defect].append(_case(model, prompts, pad, reference))

    def failing(run: str) -> int:
        return sum(differing > 0 for differing, _, _ in seen[run])

    def widest(run: str) -> float:
        return max((gap for _, gap, _ in seen[run] if gap is not None), default=0.0)

    tokens = gate.claim(
        "generate.every_storage",
        f"the trained LoRA on each of the {len(cases)} frozen bases ({', '.join(STORAGES)} with "
        f"dense embeddings, and the {len(cases) - len(STORAGES)} that store weights with their "
        "embeddings and head stored too) decodes greedily with its KV cache "
        f"the tokens its full recompute gives ({len(prompts)} left-padded prompts, "
        f"{NEW_TOKENS} new tokens)",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit=f"bases of {len(cases)} differing or raising",
        code=IMPLEMENTATION,
    )
    tokens.measure(failing("clean"))
    tokens.control(
        f"the new token rotated at the previous position ({CACHE_DEFECT})", failing(CACHE_DEFECT)
    )
    tokens.control(
        f"generation asking the embedding for its weight, the bug fixed ({EMBEDDING_DEFECT})",
        failing(EMBEDDING_DEFECT),
    )
    logits = gate.claim(
        "generate.every_storage_logits",
        "on every base that decoded, the cached logits at every generated position agree with "
        "the full recompute's (one stack: only the summation order differs)",
        kind="correctness",
        threshold=RECOMPUTE,
        unit="max |logit difference|",
        code=IMPLEMENTATION,
    )
    logits.measure(widest("clean"))
    logits.control(
        f"the new token rotated at the previous position ({CACHE_DEFECT})", widest(CACHE_DEFECT)
    )
    labels = [f"{name}{' + stored embeddings' if stored else ''}" for name, stored in cases]
    for key, found in seen.items():
        shown = (
            f"{label}: {seen_there}"
            for label, (_, _, seen_there) in zip(labels, found, strict=True)
        )
        gate.note(f"{key}: " + "; ".join(shown))
