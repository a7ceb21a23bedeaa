"""gate-adapters: adapter math equals PEFT's, adapters restore bitwise, init and disable are exact.

Subjects: the real SmolLM2-135M (GGUF) and a tiny random Qwen2 (biased q/k/v, tied head).
PEFT 0.21 on transformers is the independent reference for lora, rslora, lora_fa and dora: both
sides get the same randomized adapter tensors (B drawn non-zero, DoRA magnitudes jittered,
copied from ours into PEFT's in memory), then logits and the gradient of every trainable tensor
after one cross-entropy backward are compared. TinyLoRA has no PEFT twin with the same basis
(PEFT splits sqrt(S) on both sides): it is compared with a float64 dense computation of the
delta W it promises. Raw values are compared (absolute error): on the prompt used here our
SmolLM2 logits equal transformers' bitwise, and the base gap is recorded in a note.
"""

from __future__ import annotations

import copy
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

import assay
from assay.adapters import adapter_modules, attach, disabled, load_adapter, save_adapter
from assay.adapters.lora import lora_scaling
from assay.adapters.perturb import randomize_adapters
from assay.errors import ConfigError
from assay.qualify import Threshold
from assay.testing.real_model import smollm2_path

PEFT_METHODS = ("lora", "rslora", "lora_fa", "dora")
ALL_METHODS = ("full", *PEFT_METHODS, "tinylora")
RANK, ALPHA, SEED = 8, 16, 0
PARITY = Threshold("<=", 1e-5, tolerance=0.1)
EXACT = Threshold("==", 0)
IMPLEMENTATION = tuple(
    f"assay.adapters.{m}"
    for m in (
        "base",
        "lora",
        "dora",
        "tinylora",
        "inject",
        "attach",
        "control",
        "peft_io",
        "tinylora_io",
        "io",
        "files",
    )
)


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


# Every smollm2 test shares one module-scoped Subject (an assay load and a transformers load):
# under `--dist loadgroup` they run on one xdist worker, which pays for it once.
WHICH = [pytest.param("smollm2", marks=pytest.mark.xdist_group("adapters-smollm2")), "qwen2"]


@pytest.fixture(scope="module")
def smollm2() -> Subject:
    from assay.model.tokenizer import load_tokenizer

    path = smollm2_path()
    text = "<|im_start|>user\nWhat is 17 * 23?<|im_end|>\n<|im_start|>assistant\n17 * 23 = 391"
    ids = torch.tensor([load_tokenizer(path).encode(text)])
    return Subject("smollm2", path, ids, "all-linear")


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory) -> Subject:
    from assay.testing.tiny import save_tiny

    paths = save_tiny("qwen2", tmp_path_factory.mktemp("qwen2"), seed=0, gguf=False)
    ids = torch.randint(0, 320, (2, 48), generator=torch.Generator().manual_seed(1))
    return Subject("qwen2", paths["hf"], ids, "all-linear")


def ce(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


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


@pytest.mark.parametrize("method", PEFT_METHODS)
@pytest.mark.parametrize("which", WHICH)
def test_adapter_math_equals_peft(gate, request, which, method):
    subject: Subject = request.getfixturevalue(which)
    gate.uses(*IMPLEMENTATION, "assay.adapters.perturb")
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


TINY_THRESHOLD = Threshold("<=", 1e-4, tolerance=0.1)


@pytest.mark.parametrize("which", WHICH)
def test_tinylora_delta_is_the_promised_dense_update(gate, request, which):
    subject: Subject = request.getfixturevalue(which)
    gate.uses(*IMPLEMENTATION, "assay.adapters.perturb")
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
    )
    claim.measure(tinylora_error(model, top))
    for name, broken in (
        ("sum v_i P_i^T used for the mix", transposed_mix),
        ("sqrt(S) split on both sides (PEFT's basis)", sqrt_split),
    ):
        claim.control(name, tinylora_error(broken(copy.deepcopy(model)), top))


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


@pytest.mark.parametrize("method", [*PEFT_METHODS, "tinylora"])
def test_save_and_load_restore_bitwise(gate, qwen2, tmp_path, method):
    gate.uses(*IMPLEMENTATION)
    gate.seed(SEED, 4)
    saved = randomize_adapters(qwen2.fresh(method), seed=4)
    save_adapter(saved, tmp_path / "ok")
    total = len([k for k in saved.state_dict() if "lora_" in k or "tiny_" in k])
    claim = gate.claim(
        f"restore.{method}",
        f"{method} on tiny qwen2: save then load into a fresh model restores all {total} adapter "
        "tensors and the logits bitwise",
        kind="correctness",
        threshold=EXACT,
        unit="tensors not restored",
    )
    claim.measure(restore_mismatches(qwen2, saved, tmp_path / "ok"))
    for how, name in (("drop", "save drops one tensor"), ("ulp", "one saved value one ulp off")):
        save_adapter(saved, tmp_path / how)
        damage(tmp_path / how, how)
        claim.control(name, restore_mismatches(qwen2, saved, tmp_path / how))


def differing(a: torch.Tensor, b: torch.Tensor) -> int:
    """Elements that are not bitwise equal (torch.equal, counted)."""
    return int((a != b).sum().item())


@pytest.mark.parametrize("which", WHICH)
def test_fresh_adapters_are_exact_no_ops(gate, request, which):
    subject: Subject = request.getfixturevalue(which)
    gate.uses(*IMPLEMENTATION)
    for method in ALL_METHODS:
        model = subject.fresh(method)
        claim = gate.claim(
            f"zero_init.{which}.{method}",
            f"{method} on {which}: logits right after attach equal the base logits exactly",
            kind="correctness",
            threshold=EXACT,
            unit="logits not bitwise equal",
        )
        with torch.no_grad():
            claim.measure(differing(model(subject.ids), subject.base))
            if method == "full":
                model.layers[0].mlp.up_proj.weight.view(-1)[0] += 1e-3
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
    gate.uses(*IMPLEMENTATION)
    for method in (*PEFT_METHODS, "tinylora"):
        model = randomize_adapters(subject.fresh(method), seed=5)
        claim = gate.claim(
            f"disable.{which}.{method}",
            f"{method} on {which} (adapters randomized): logits with every adapter disabled "
            "equal the base logits exactly",
            kind="correctness",
            threshold=EXACT,
            unit="logits not bitwise equal",
        )
        with torch.no_grad(), disabled(model):
            claim.measure(differing(model(subject.ids), subject.base))
            adapter_modules(model)[-1][1].enable()  # the last adapter left active
            claim.control("one adapter left active", differing(model(subject.ids), subject.base))
