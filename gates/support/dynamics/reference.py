"""The reference stack for gate-dynamics: transformers + PEFT, trained by a loop written here.

Nothing here calls assay's data, loss, order or schedule code: each is written from the
definition assay documents, so a bug shared by both sides cannot pass.

- rows: transformers' own tokenizer and ``apply_chat_template``; the assistant turn (what the
  template adds after the generation prompt) is scored, everything before it is not (-100);
- order: epoch ``e`` visits ``torch.randperm(n)`` from a generator seeded ``seed * 1000003 + e``
  (``assay.train.data.dataset.BatchIterator``'s docstring);
- loss: summed token cross-entropy of every micro-batch of a step divided by the step's scored
  tokens (one division per step, whatever the accumulation); ``F.cross_entropy`` on fp32
  logits, or on logits upcast to fp64 for a recipe whose ``reference_fp64`` is set (torch's
  fp32 CPU ``log_softmax`` sums a 49152-wide row about 2.6e-5 low, a bias assay's plain CE
  shares and its chunked CE, which takes ``torch.logsumexp``, does not);
- schedule: factor ``(s + 1) / warmup`` for the first ``warmup`` steps, then
  ``0.5 (1 + cos(pi p))`` with ``p`` the fraction of the remaining steps done;
- precision: a bf16 recipe runs PEFT's decoder under ``torch.autocast(bfloat16)`` and its head
  and loss in float32 (``reference_logits``); a compiled recipe's reference is PEFT eager;
- weight decay on tensors of two or more dimensions only (DoRA's magnitude vectors have none),
  as assay writes into every run's config copy.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from assay_testing.peers import hf_bnb_nf4, hf_model
from assay_testing.real_model import smollm2_path
from assay_testing.swap_task import WORDS


@dataclass(frozen=True)
class Recipe:
    """What both stacks train with."""

    method: str  # lora | rslora | dora
    accum: int
    steps: int = 20
    rank: int = 8
    alpha: float = 16
    lr: float = 1e-3
    warmup: int = 3
    weight_decay: float = 0.01
    clip: float | None = 1.0  # None: clipping off (the norm is still taken and compared)
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    seed: int = 0
    projections: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    storage: str = "float32"  # or nf4_double_quant: the reference is transformers + bitsandbytes
    loss: str = "ce"  # assay's loss; or chunked_ce at chunk_size (the reference: plain CE)
    chunk_size: int = 0
    words: tuple[int, int] = (2, 7)  # words per chat row (chat_rows)
    reference_fp64: bool = False  # the reference's cross-entropy on fp64 logits
    precision: str = "float32"  # bf16: both stacks run the decoder layers under bf16 autocast
    compile: bool = False  # assay compiles each decoder layer; the reference stays eager

    @property
    def name(self) -> str:
        quantized = "-nf4dq" if self.storage == "nf4_double_quant" else ""
        chunked = f"-chunked{self.chunk_size}" if self.loss == "chunked_ce" else ""
        bf16 = "-bf16" if self.precision == "bf16" else ""
        compiled = "-compiled" if self.compile else ""
        clip = "-noclip" if self.clip is None else ""
        return f"{self.method}-accum{self.accum}{quantized}{chunked}{bf16}{compiled}{clip}"


@dataclass
class Reference:
    """The reference run: per-step losses, adapter snapshots (assay names), the model, and each
    step's gradient norm before clipping."""

    losses: list[float]
    snapshots: dict[int, dict[str, torch.Tensor]]
    model: torch.nn.Module
    cpu_s: float
    grad_norms: list[float] = field(default_factory=list)
    assay_grad_norms: list[float] = field(default_factory=list)  # the assay run it is beside


def chat_rows(
    count: int, seed: int, words_per_row: tuple[int, int] = (2, 7)
) -> list[list[dict[str, str]]]:
    """Single-turn chats: reverse 2 to 7 words (``words_per_row``), so rows differ in length
    and scored tokens."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        words = rng.sample(WORDS, rng.randint(*words_per_row))
        rows.append(
            [
                {"role": "user", "content": "Reverse the words: " + " ".join(words)},
                {"role": "assistant", "content": " ".join(reversed(words))},
            ]
        )
    return rows


def reference_example(tokenizer, chat: list[dict[str, str]]) -> tuple[list[int], list[int]]:
    """(input ids, labels): the assistant turn scored, the rest -100 (transformers only)."""
    head = tokenizer.apply_chat_template(chat[:1], add_generation_prompt=True, tokenize=False)
    full = tokenizer.apply_chat_template(chat, tokenize=False)
    assert full.startswith(head), "the template does not extend the prompt"
    prompt = tokenizer(head, add_special_tokens=False).input_ids
    answer = tokenizer(full[len(head) :], add_special_tokens=False).input_ids
    return prompt + answer, [-100] * len(prompt) + answer


def reference_order(size: int, seed: int, count: int) -> list[int]:
    """The first ``count`` row indices: epoch e is randperm(size) seeded seed * 1000003 + e."""
    order: list[int] = []
    epoch = 0
    while len(order) < count:
        gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
        order += torch.randperm(size, generator=gen).tolist()
        epoch += 1
    return order[:count]


def lr_factor(step: int, recipe: Recipe) -> float:
    """Warmup ``(s + 1) / warmup``, then half a cosine to 0 at ``recipe.steps``."""
    if step < recipe.warmup:
        return (step + 1) / recipe.warmup
    progress = min((step - recipe.warmup) / max(1, recipe.steps - recipe.warmup), 1.0)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def peft_name(name: str) -> str:
    """assay's ``layers.3.self_attn.q_proj.lora_A`` -> PEFT's parameter name."""
    return f"base_model.model.model.{name}.default.weight"


def peft_model(recipe: Recipe):
    """transformers SmolLM2 from the bundled GGUF (fp32, or bitsandbytes NF4 double quant with
    fp32 compute for an NF4 recipe: QLoRA) with PEFT's adapter for ``recipe``."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=recipe.rank,
        lora_alpha=recipe.alpha,
        target_modules=list(recipe.projections),
        lora_dropout=0.0,
        bias="none",
        use_rslora=recipe.method == "rslora",
        use_dora=recipe.method == "dora",
    )
    quantized = recipe.storage == "nf4_double_quant"
    base = (hf_bnb_nf4 if quantized else hf_model)(smollm2_path())
    return get_peft_model(base, config)


def reference_logits(model, ids: torch.Tensor, recipe: Recipe) -> torch.Tensor:
    """PEFT's logits for ``ids``. For a bf16 recipe the decoder (its layers and final norm)
    runs under ``torch.autocast`` to bfloat16 and the head in float32 outside it, which is
    what assay's ``precision: bf16`` documents."""
    if recipe.precision == "float32":
        return model(ids).logits
    causal = model.base_model.model
    with torch.autocast(ids.device.type, dtype=torch.bfloat16):
        hidden = causal.model(input_ids=ids).last_hidden_state
    return causal.lm_head(hidden.float())


def run_reference(
    recipe: Recipe, initial: dict[str, torch.Tensor], examples, keep: tuple[int, ...]
) -> Reference:
    """Train PEFT from ``initial`` (assay's starting adapter, by assay name) for the recipe."""
    cpu = time.process_time()
    model = peft_model(recipe)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in initial.items():
            params[peft_name(name)].copy_(value)
    trainable = {n: p for n, p in params.items() if p.requires_grad}
    assert len(trainable) == len(initial), "PEFT trains other tensors than assay's adapters"
    groups = [
        {
            "params": [p for p in trainable.values() if p.dim() >= 2],
            "weight_decay": recipe.weight_decay,
        },
        {"params": [p for p in trainable.values() if p.dim() < 2], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(
        [g for g in groups if g["params"]], lr=recipe.lr, betas=recipe.betas, eps=recipe.eps
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, recipe))
    order = reference_order(len(examples), recipe.seed, recipe.steps * recipe.accum)
    losses: list[float] = []
    norms: list[float] = []
    snapshots: dict[int, dict[str, torch.Tensor]] = {}
    model.train()
    for step in range(recipe.steps):
        micro = [examples[i] for i in order[step * recipe.accum : (step + 1) * recipe.accum]]
        scored = sum(sum(label != -100 for label in labels[1:]) for _, labels in micro)
        total = 0.0
        for ids, labels in micro:
            logits = reference_logits(model, torch.tensor([ids]), recipe)[0, :-1]
            logits = logits.double() if recipe.reference_fp64 else logits.float()
            summed = F.cross_entropy(
                logits, torch.tensor(labels[1:]), ignore_index=-100, reduction="sum"
            )
            share = summed / scored
            share.backward()
            total += share.item()
        clip = float("inf") if recipe.clip is None else recipe.clip
        norms.append(float(torch.nn.utils.clip_grad_norm_(list(trainable.values()), clip)))
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(total)
        if step + 1 in keep:
            snapshots[step + 1] = {n: params[peft_name(n)].detach().clone() for n in initial}
    model.eval()
    return Reference(losses, snapshots, model, time.process_time() - cpu, norms)
