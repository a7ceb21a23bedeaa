"""gate-adapters: adapter math equals PEFT's, init and disable are exact, frozen tensors stay put.

Subjects: the real SmolLM2-135M (GGUF) and a tiny random Qwen2 (biased q/k/v, tied head).
PEFT 0.21 on transformers is the independent reference for lora, rslora, lora_fa and dora: both
sides get the same randomized adapter tensors (B drawn non-zero, DoRA magnitudes jittered,
copied from ours into PEFT's in memory), then logits and the gradient of every trainable tensor
after one cross-entropy backward are compared. TinyLoRA has no PEFT twin with the same basis
(PEFT splits sqrt(S) on both sides): it is compared with a float64 dense computation of the
delta W it promises. Raw values are compared (absolute error): on the prompt used here our
SmolLM2 logits equal transformers' bitwise, and the base gap is recorded in a note.

Fresh adapters must be exact no-ops and disabled adapters must give the base logits bitwise.
Frozen tensors are measured directly: LoRA-FA's A bit for bit and absent from the optimizer,
every base byte. Adapter files and merged exports are gate-exports' claims.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

import assay
from assay.adapters import adapter_modules, attach, disabled
from assay.adapters.perturb import randomize_adapters
from assay.qualify import Threshold
from support.adapters.file_helpers import base_digests, lora_fa_a_changes, train_steps
from support.adapters.helpers import EXACT, PEFT_METHODS, code, smollm2_subject, tiny_subject
from support.adapters.parity_helpers import (
    ALPHA,
    PARITY,
    RANK,
    SEED,
    Subject,
    attach_norm,
    compare,
    differing,
    peft_twin,
    run_ours,
    run_twin,
    sqrt_split,
    swap_scale,
    tinylora_error,
    top_singular_values,
    transposed_mix,
    unfreeze_a,
)
from support.moved_claims import retire_moved_claims

# the claim a reader looks at first (the index and every record lead with it)
HEADLINE = "peft.smollm2.lora"

ALL_METHODS = ("full", *PEFT_METHODS, "tinylora")

# Every smollm2 test shares one module-scoped Subject (an assay load and a transformers load):
# under `--dist loadgroup` they run on one xdist worker, which pays for it once.
WHICH = [
    pytest.param("smollm2", marks=pytest.mark.xdist_group("adapters-smollm2")),
    "qwen2",
    "qwen3",
    "granite",
    "olmo2",
    "phi3",
    "gemma3",
]


@pytest.fixture(scope="module")
def smollm2() -> Subject:
    return smollm2_subject()


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory) -> Subject:
    return tiny_subject("qwen2", tmp_path_factory.mktemp("qwen2"))


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory) -> Subject:
    return tiny_subject("qwen3", tmp_path_factory.mktemp("qwen3"))


@pytest.fixture(scope="module")
def granite(tmp_path_factory) -> Subject:
    return tiny_subject("granite", tmp_path_factory.mktemp("granite"))


@pytest.fixture(scope="module")
def olmo2(tmp_path_factory) -> Subject:
    return tiny_subject("olmo2", tmp_path_factory.mktemp("olmo2"))


@pytest.fixture(scope="module")
def phi3(tmp_path_factory) -> Subject:
    return tiny_subject("phi3", tmp_path_factory.mktemp("phi3"))


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory) -> Subject:
    return tiny_subject("gemma3", tmp_path_factory.mktemp("gemma3"))


@pytest.mark.parametrize("method", PEFT_METHODS)
@pytest.mark.parametrize("which", WHICH)
def test_adapter_math_equals_peft(gate, request, which, method):
    subject: Subject = request.getfixturevalue(which)
    gate.input(
        "model", subject.path if subject.path.is_file() else subject.path / "model.safetensors"
    )
    gate.seed(SEED, 1)

    def ours(broken=None):
        model = randomize_adapters(subject.fresh(method), seed=1)
        model = broken(model) if broken else model
        return model, run_ours(model, subject.ids)

    model, mine = ours()
    theirs = run_twin(peft_twin(subject, model, method), subject.ids)
    del model
    logit_error, grad_error, within, count = compare(mine, theirs)
    claim = gate.claim(
        f"peft.{which}.{method}",
        f"{method} on {which} ({subject.targets}, r={RANK}, alpha={ALPHA}) equals PEFT: logits and "
        f"gradients of all {count} trainable tensors after one backward",
        kind="correctness",
        threshold=PARITY,
        unit="max abs error",
        code=code(method, "assay.adapters.perturb"),
    )
    claim.measure(max(logit_error, grad_error))
    claim.control(
        "rsLoRA and LoRA scales swapped",
        max(compare(ours(swap_scale)[1], theirs)[:2]),
    )
    if method == "lora_fa":
        claim.control("A left trainable", max(compare(ours(unfreeze_a)[1], theirs)[:2]))
    if method == "dora":
        claim.control(
            "DoRA row norm not detached",
            max(compare(ours(attach_norm)[1], theirs)[:2]),
        )
    gate.note(
        f"{which} {method}: logits {logit_error:.3g}, worst gradient {grad_error:.3g}, "
        f"{within}/{count} gradient tensors within {PARITY.value:g}; base models' logit gap "
        f"{(subject.base - subject.hf_base).abs().max().item():.3g}"
    )
    assert within == count


TINY_THRESHOLD = Threshold("<=", 1e-4, tolerance=0.1)


@pytest.mark.parametrize("which", WHICH)
def test_tinylora_delta_is_the_promised_dense_update(gate, request, which):
    subject: Subject = request.getfixturevalue(which)
    gate.seed(SEED, 3)
    options = {"u": 13, "r": 2, "sharing": "per_target"}
    # SVD of every SmolLM2 projection costs minutes on 2 cores: three layers' attention there.
    layers = (0, 15, 29) if which == "smollm2" else None
    model = copy.deepcopy(subject.model)
    attach(model, "tinylora", targets="attention", layers=layers, seed=SEED, **options)
    randomize_adapters(model, seed=3)
    top = top_singular_values(model)
    claim = gate.claim(
        f"tinylora.{which}",
        f"TinyLoRA (u=13, r=2, per target, attention of layers {layers or 'all'}) on {which}: "
        "forward equals x (U S sum v_i P_i V^T)^T computed densely in fp64, and U, S, V^T are "
        "W's truncated SVD (relative errors)",
        kind="correctness",
        threshold=TINY_THRESHOLD,
        unit="max relative error",
        code=code("tinylora", "assay.adapters.perturb"),
    )
    claim.measure(tinylora_error(model, top))
    for name, broken in (
        ("sum v_i P_i^T used for the mix", transposed_mix),
        ("sqrt(S) split on both sides (PEFT's basis)", sqrt_split),
    ):
        claim.control(name, tinylora_error(broken(copy.deepcopy(model)), top))


def projection_z(projections: list[torch.Tensor], r: int) -> float:
    """|sample variance x r - 1| in standard errors of a variance estimate (sqrt(2 / (n - 1))
    for normal entries): how far TinyLoRA's fixed projections are from N(0, 1/r)."""
    entries = torch.cat([p.reshape(-1).double() for p in projections])
    spread = float(entries.var() * r)
    return abs(spread - 1.0) / (2.0 / (entries.numel() - 1)) ** 0.5


def test_tinylora_projections_are_drawn_as_the_method_defines(gate, qwen2):
    """TinyLoRA's random projections P_i (fixed, never trained) are N(0, 1/r): the scale the
    trainable vector v multiplies, so another variance trains another method."""
    gate.seed(SEED, 4)
    r = 4
    model = copy.deepcopy(qwen2.model)
    attach(model, "tinylora", targets="all-linear", seed=SEED, u=32, r=r, sharing="per_target")
    found = [m.tiny_P for m in model.modules() if hasattr(m, "tiny_P")]
    claim = gate.claim(
        "tinylora.projection_variance",
        f"TinyLoRA (u=32, r={r}, every linear of tiny qwen2, {sum(p.numel() for p in found)} "
        "entries): the fixed projections' variance is 1/r, within 5 standard errors of a "
        "variance estimate",
        kind="correctness",
        threshold=Threshold("<=", 5.0),
        unit="standard errors from 1/r",
        code=code("tinylora"),
    )
    claim.measure(projection_z(found, r))
    claim.control("projections drawn N(0, 1)", projection_z([p * r**0.5 for p in found], r))
    claim.control("projections drawn N(0, 2/r)", projection_z([p * 2**0.5 for p in found], r))


@pytest.mark.parametrize("which", WHICH)
def test_fresh_adapters_are_exact_no_ops(gate, request, which):
    subject: Subject = request.getfixturevalue(which)
    for method in ALL_METHODS:
        model = subject.fresh(method)
        claim = gate.claim(
            f"zero_init.{which}.{method}",
            f"{method} on {which}: logits right after attach equal the base logits exactly",
            kind="correctness",
            threshold=EXACT,
            unit="logits not bitwise equal",
            code=code(method),
        )
        with torch.no_grad():
            claim.measure(differing(model(subject.ids), subject.base))
            if method == "full":
                model.layers[0].mlp.down_proj.weight.view(-1)[0] += 1e-3
                name = "one base weight + 1e-3"
            else:
                adapter = adapter_modules(model)[0][1]
                zero = adapter.tiny_v if method == "tinylora" else adapter.lora_B
                zero.view(-1)[0] = 1e-3
                name = f"one element of {'v' if method == 'tinylora' else 'B'} = 1e-3"
            claim.control(name, differing(model(subject.ids), subject.base))


@pytest.mark.parametrize("which", WHICH)
def test_disable_gives_base_logits_exactly(gate, request, which):
    subject: Subject = request.getfixturevalue(which)
    for method in (*PEFT_METHODS, "tinylora"):
        model = randomize_adapters(subject.fresh(method), seed=5)
        claim = gate.claim(
            f"disable.{which}.{method}",
            f"{method} on {which} (adapters randomized): logits with every adapter disabled "
            "equal the base logits exactly",
            kind="correctness",
            threshold=EXACT,
            unit="logits not bitwise equal",
            code=code(method, "assay.adapters.control", "assay.adapters.perturb"),
        )
        with torch.no_grad(), disabled(model):
            claim.measure(differing(model(subject.ids), subject.base))
            adapter_modules(model)[-1][1].enable()  # the last adapter left active
            claim.control("one adapter left active", differing(model(subject.ids), subject.base))


def _two_steps(model: torch.nn.Module, optimizer: torch.optim.Optimizer, ids) -> None:
    for _ in range(2):
        optimizer.zero_grad()
        model(ids).float().pow(2).mean().backward()
        optimizer.step()


def test_loraplus_steps_equal_peft_loraplus_optimizer(gate, qwen2, tmp_path):
    """LoRA+ lives in the optimizer: B's group trains at lr_ratio times the learning rate.
    PEFT's ``create_loraplus_optimizer`` over the same model and gradients is the reference."""
    from peft.optimizers import create_loraplus_optimizer

    from assay.settings.loader import train_config_from_dict
    from assay.train.build import build_optimizer, trainable_parameters

    lr, ratio, decay = 1e-3, 16.0, 0.1
    (tmp_path / "t.jsonl").write_text('{"text": "x"}\n')
    config = train_config_from_dict(
        {
            "model": "m",
            "data": {"train": "t.jsonl"},
            "steps": 2,
            "adapter": {"method": "loraplus", "rank": RANK, "alpha": ALPHA, "lr_ratio": ratio},
            "optim": {"lr": lr, "weight_decay": decay},
        },
        tmp_path / "c.yaml",
    )
    model = randomize_adapters(qwen2.fresh("loraplus", lr_ratio=ratio), seed=2)

    # the control's optimizer is built as for plain LoRA: every parameter at the run's rate
    one_rate = dataclasses.replace(
        config, adapter=dataclasses.replace(config.adapter, method="lora")
    )

    def stepped(built_from) -> dict[str, torch.Tensor]:
        ours = copy.deepcopy(model)
        _two_steps(ours, build_optimizer(built_from, trainable_parameters(ours)), qwen2.ids)
        return trainable_parameters(ours)

    twin = copy.deepcopy(model)
    reference = create_loraplus_optimizer(
        twin, torch.optim.AdamW, lr=lr, loraplus_lr_ratio=ratio, loraplus_weight_decay=decay
    )
    _two_steps(twin, reference, qwen2.ids)
    theirs = trainable_parameters(twin)

    def unequal(mine: dict[str, torch.Tensor]) -> int:
        return sum(not torch.equal(mine[n], theirs[n]) for n in theirs)

    claim = gate.claim(
        "loraplus.steps_equal_peft",
        f"loraplus on qwen2 (r={RANK}, lr_ratio {ratio:g}, weight decay {decay:g}): after two "
        f"AdamW steps every one of {len(theirs)} trainable tensors equals PEFT's "
        "create_loraplus_optimizer bitwise",
        kind="correctness",
        threshold=EXACT,
        unit="tensors not bitwise equal",
        code=code("loraplus", "assay.adapters.perturb", "assay.train.build"),
    )
    claim.measure(unequal(stepped(config)))
    claim.control("B at the run's learning rate (one rate for all)", unequal(stepped(one_rate)))


# --- Properties measured directly, not only through a parity with the defect as control ------


STORAGE_CODE = {
    "float32": ("assay.storage.linear", "assay.storage.dense"),
    "bf16": ("assay.storage.linear", "assay.storage.dense"),
    "nf4": ("assay.storage.linear", "assay.storage.nf4"),
    "nf4_double_quant": ("assay.storage.linear", "assay.storage.nf4"),
}


def test_frozen_tensors_do_not_move(gate, qwen2):
    """LoRA-FA's A: bit-for-bit unchanged after AdamW steps and absent from the optimizer.
    The frozen base: byte-identical after LoRA training for every storage."""
    from assay.train.build import trainable_parameters

    gate.seed(SEED, 12)

    def subject(method: str, storage: str = "float32") -> torch.nn.Module:
        model = assay.load(qwen2.path, storage=storage)
        model = attach(model, method, rank=RANK, alpha=ALPHA, targets="all-linear", seed=SEED)
        return randomize_adapters(model, seed=12)

    model = subject("lora_fa")
    count = sum(a.lora_A.numel() for _, a in adapter_modules(model))
    fa = gate.claim(
        "lora_fa.a_frozen",
        f"LoRA-FA on tiny qwen2, 4 AdamW steps (weight decay 0.1) over the trainer's "
        f"trainable_parameters: all {count:,} elements of every A bit-for-bit unchanged and no A "
        "in the optimizer (param groups or state)",
        kind="correctness",
        threshold=EXACT,
        unit="changed A elements + A tensors in the optimizer",
        code=code("lora_fa", "assay.train.build", "support.adapters.file_helpers"),
    )
    fa.measure(lora_fa_a_changes(model, qwen2.ids, trainable_parameters(model)))
    model = unfreeze_a(subject("lora_fa"))
    fa.control("A left trainable", lora_fa_a_changes(model, qwen2.ids, trainable_parameters(model)))
    model = subject("lora_fa")
    every = {n: p for n, p in model.named_parameters() if "lora_" in n}
    fa.control(
        "A handed to the optimizer (zero gradient, weight decay moves it)",
        lora_fa_a_changes(model, qwen2.ids, every),
    )

    for storage in ("float32", "bf16", "nf4", "nf4_double_quant"):
        model = subject("lora", storage)
        before = base_digests(model)
        train_steps(model, qwen2.ids, trainable_parameters(model))
        after = base_digests(model)
        claim = gate.claim(
            f"frozen_base.{storage}",
            f"LoRA on tiny qwen2 over {storage} storage, 4 AdamW steps: all {len(before)} base "
            "tensors (weights, packed bytes, scales, norms, embeddings) byte-identical after",
            kind="correctness",
            threshold=EXACT,
            unit="changed base tensors",
            code=code(
                "lora", "assay.train.build", *STORAGE_CODE[storage], "support.adapters.file_helpers"
            ),
        )
        claim.measure(sum(before[k] != after.get(k) for k in before))
        model = subject("lora", storage)
        model.layers[0].input_layernorm.weight.requires_grad_(True)
        before = base_digests(model)
        train_steps(model, qwen2.ids, trainable_parameters(model))
        after = base_digests(model)
        claim.control(
            "layers.0.input_layernorm left trainable", sum(before[k] != after[k] for k in before)
        )


# Claims that gate-exports has held since the split (stop 34), retired here while gate-exports'
# newest receipt passes each one.
MOVED_TO_EXPORTS = (
    tuple(f"restore.{m}" for m in ("lora", "rslora", "lora_fa", "dora", "tinylora"))
    + tuple(
        f"peft_files.{way}.{m}"
        for m in ("lora", "rslora", "dora")
        for way in ("assay_to_peft", "peft_to_assay")
    )
    + ("export.safetensors.transformers", "export.gguf.reader", "export.gguf.transformers")
)


def test_claims_moved_to_gate_exports_live_there(gate, pytestconfig):
    gate.note(retire_moved_claims(gate, "exports", MOVED_TO_EXPORTS, pytestconfig))
