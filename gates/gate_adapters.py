"""gate-adapters: adapter math equals PEFT's, adapters restore bitwise, init and disable are exact.

Subjects: the real SmolLM2-135M (GGUF) and a tiny random Qwen2 (biased q/k/v, tied head).
PEFT 0.21 on transformers is the independent reference for lora, rslora, lora_fa and dora: both
sides get the same randomized adapter tensors (B drawn non-zero, DoRA magnitudes jittered,
copied from ours into PEFT's in memory), then logits and the gradient of every trainable tensor
after one cross-entropy backward are compared. TinyLoRA has no PEFT twin with the same basis
(PEFT splits sqrt(S) on both sides): it is compared with a float64 dense computation of the
delta W it promises. Raw values are compared (absolute error): on the prompt used here our
SmolLM2 logits equal transformers' bitwise, and the base gap is recorded in a note.

Interop is also claimed through the other implementation's own files and loaders, both ways:
assay's PEFT folder into PeftModel.from_pretrained and PEFT's save_pretrained folder into
assay's loader; merged safetensors into transformers, merged GGUF into gguf.GGUFReader and
transformers' GGUF loader. Their controls corrupt the files on disk (transposed pairs, swapped
keys, a wrong scale) or the writer (fault ``model.gguf_export.skip_qk_permute``). Frozen tensors are
measured directly: LoRA-FA's A bit for bit and absent from the optimizer, every base byte.
"""

from __future__ import annotations

import copy

import pytest
import torch
from safetensors.torch import load_file, save_file

import assay
from adapter_files import (
    base_digests,
    corrupt_tensors,
    lora_fa_a_changes,
    ours_loads_peft,
    peft_loads_ours,
    reader_mismatches,
    rewrite_folder,
    train_steps,
    transformers_error,
)
from adapter_parity import (
    ALPHA,
    PARITY,
    RANK,
    SEED,
    Subject,
    attach_norm,
    compare,
    damage,
    differing,
    peft_twin,
    restore_mismatches,
    run_ours,
    run_twin,
    sqrt_split,
    swap_scale,
    tinylora_error,
    top_singular_values,
    transposed_mix,
    unfreeze_a,
)
from assay.adapters import adapter_modules, attach, disabled, save_adapter
from assay.adapters.perturb import randomize_adapters
from assay.qualify import Threshold
from assay_testing import defects
from assay_testing.real_model import smollm2_path

# the claim a reader looks at first (the index and every record lead with it)
HEADLINE = "peft.smollm2.lora"

PEFT_METHODS = ("lora", "rslora", "lora_fa", "dora")
ALL_METHODS = ("full", *PEFT_METHODS, "tinylora")
EXACT = Threshold("==", 0)
# What each claim runs, by method: attach and the wrapper it builds (import-checked per claim).
ATTACHING = (
    "assay.adapters.attach",
    "assay.adapters.inject",
    "assay.adapters.base",
    "assay.adapter_registry",
)
METHOD_CODE = {
    "full": (),
    "lora": ("assay.adapters.lora",),
    "rslora": ("assay.adapters.lora",),
    "lora_fa": ("assay.adapters.lora",),
    "dora": ("assay.adapters.lora", "assay.adapters.dora"),
    "tinylora": ("assay.adapters.tinylora",),
}
FILES_CODE = ("assay.adapters.io", "assay.adapters.files")


def code(method: str, *more: str) -> tuple[str, ...]:
    """The modules a claim about ``method`` runs: attaching, the method's wrapper, ``more``, and
    the gate's own measuring helpers."""
    return (*ATTACHING, *METHOD_CODE[method], *more, "adapter_parity")


def files_code(method: str, *more: str) -> tuple[str, ...]:
    """``code(method)`` plus the adapter file format the method saves to."""
    fmt = "assay.adapters.tinylora_io" if method == "tinylora" else "assay.adapters.peft_io"
    return code(method, *FILES_CODE, fmt, *more)


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
    from assay_testing.tiny import save_tiny

    paths = save_tiny("qwen2", tmp_path_factory.mktemp("qwen2"), seed=0, gguf=False)
    ids = torch.randint(0, 320, (2, 48), generator=torch.Generator().manual_seed(1))
    return Subject("qwen2", paths["hf"], ids, "all-linear")


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


@pytest.mark.parametrize("method", [*PEFT_METHODS, "tinylora"])
def test_save_and_load_restore_bitwise(gate, qwen2, tmp_path, method):
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
        code=files_code(method, "assay.adapters.perturb"),
    )
    claim.measure(restore_mismatches(qwen2, saved, tmp_path / "ok"))
    for how, name in (("drop", "save drops one tensor"), ("ulp", "one saved value one ulp off")):
        save_adapter(saved, tmp_path / how)
        damage(tmp_path / how, how)
        claim.control(name, restore_mismatches(qwen2, saved, tmp_path / how))


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


# --- Round trips through PEFT's own files and loaders, both directions -----------------------

ROUND_TRIP_METHODS = ("lora", "rslora", "dora")


@pytest.mark.parametrize("method", ROUND_TRIP_METHODS)
def test_peft_folders_round_trip_both_ways(gate, qwen2, tmp_path, method):
    """assay export --format peft -> PeftModel.from_pretrained, and PEFT save_pretrained ->
    assay's loader: logits equal the writer's, through the real files only."""
    from peft import LoraConfig, get_peft_model

    from assay.export import export

    gate.seed(SEED, 8)
    ours = randomize_adapters(qwen2.fresh(method), seed=8)
    with torch.no_grad():
        expected = ours(qwen2.ids)
    out = gate.claim(
        f"peft_files.assay_to_peft.{method}",
        f"{method} on tiny qwen2: assay's `export --format peft` folder loaded by PEFT's "
        "PeftModel.from_pretrained on transformers gives assay's logits",
        kind="correctness",
        threshold=PARITY,
        unit="max abs error",
        code=files_code(method, "assay.export", "assay.folder_manifest", "adapter_files"),
    )
    export(ours, tmp_path / "ours", "peft")
    out.measure(peft_loads_ours(qwen2, tmp_path / "ours", expected))
    for how, name in (
        ("transpose", "q_proj stored as (B^T, A^T)"),
        ("scale", "use_rslora flipped in adapter_config.json"),
        ("keys", "q_proj and o_proj tensors under each other's keys"),
    ):
        export(ours, tmp_path / how, "peft")
        rewrite_folder(tmp_path / how, how)
        out.control(name, peft_loads_ours(qwen2, tmp_path / how, expected))

    torch.manual_seed(9)
    config = LoraConfig(
        r=RANK,
        lora_alpha=ALPHA,
        target_modules=list(ours.assay_adapter_spec.targets),
        use_rslora=method == "rslora",
        use_dora=method == "dora",
        lora_dropout=0.0,
        init_lora_weights=False,  # PEFT's own random A and B, so the adapter is not a no-op
    )
    theirs = get_peft_model(copy.deepcopy(qwen2.hf), config).eval()
    with torch.no_grad():
        reference = theirs(input_ids=qwen2.ids).logits
    back = gate.claim(
        f"peft_files.peft_to_assay.{method}",
        f"{method}: a folder written by PEFT's save_pretrained (PEFT-initialised A and B), "
        "loaded by assay's load_adapter, gives PEFT's logits",
        kind="correctness",
        threshold=PARITY,
        unit="max abs error",
        code=files_code(method, "adapter_files"),
    )
    theirs.save_pretrained(tmp_path / "peft")
    back.measure(ours_loads_peft(qwen2, tmp_path / "peft", reference))
    for how, name in (
        ("transpose", "q_proj stored as (B^T, A^T)"),
        ("scale", "use_rslora flipped in adapter_config.json"),
        ("keys", "q_proj and o_proj tensors under each other's keys"),
    ):
        theirs.save_pretrained(tmp_path / f"peft-{how}")
        rewrite_folder(tmp_path / f"peft-{how}", how)
        back.control(name, ours_loads_peft(qwen2, tmp_path / f"peft-{how}", reference))


# --- Merged exports read back by transformers and the gguf package ---------------------------

EXPORT = Threshold("<=", 1e-4, tolerance=0.1)
STORAGE_CODE = {
    "float32": ("assay.storage.linear", "assay.storage.dense"),
    "bf16": ("assay.storage.linear", "assay.storage.dense"),
    "nf4": ("assay.storage.linear", "assay.storage.nf4"),
    "nf4_double_quant": ("assay.storage.linear", "assay.storage.nf4"),
}  # export.py: F32 merges are within 1e-4


def test_merged_exports_load_in_transformers_and_gguf(gate, qwen2, tmp_path):
    """Merged safetensors -> transformers.from_pretrained; merged GGUF -> gguf.GGUFReader and
    transformers' GGUF loader (a tiny mistral, so Q/K rows are permuted in the file)."""
    import json

    from assay.export import export_merged, merged_tensors
    from assay.model.gguf_export import write_gguf
    from assay_testing.tiny import save_tiny

    merged = (*code("lora", "assay.adapters.control"), "assay.export", "adapter_files")
    gate.seed(SEED, 10, 11)
    ours = randomize_adapters(qwen2.fresh("lora"), seed=10)
    with torch.no_grad():
        expected = ours(qwen2.ids)
    folder = export_merged(ours, tmp_path / "merged", format="safetensors")
    st = gate.claim(
        "export.safetensors.transformers",
        "LoRA on tiny qwen2, merged safetensors export loaded by transformers' from_pretrained: "
        "logits equal the adapted model's",
        kind="correctness",
        threshold=EXPORT,
        unit="max abs error",
        code=(*merged, "assay.model.safetensors"),
    )
    st.measure(transformers_error(folder, qwen2.ids, expected))
    weights = load_file(folder / "model.safetensors")
    for how, name in (
        ("transpose", "layers.0 o_proj stored transposed"),
        ("keys", "layers.0 gate_proj and up_proj under each other's keys"),
        ("scale", "rope_theta doubled in config.json"),
    ):
        bad = export_merged(ours, tmp_path / how, format="safetensors")
        if how == "scale":
            cfg = json.loads((bad / "config.json").read_text())
            cfg["rope_parameters"]["rope_theta"] *= 2
            (bad / "config.json").write_text(json.dumps(cfg))
        else:
            save_file(corrupt_tensors(weights, how, "model."), bad / "model.safetensors")
        st.control(name, transformers_error(bad, qwen2.ids, expected))

    mistral = save_tiny("mistral", tmp_path, seed=11, gguf=False)["hf"]
    adapted = randomize_adapters(
        attach(assay.load(mistral), "lora", rank=RANK, alpha=ALPHA, targets="all-linear"), seed=11
    )
    with torch.no_grad():
        m_expected = adapted(qwen2.ids)
    tensors = merged_tensors(adapted)
    path = export_merged(adapted, tmp_path / "merged.gguf", format="gguf")
    reader = gate.claim(
        "export.gguf.reader",
        f"LoRA on tiny mistral, merged GGUF export: gguf.GGUFReader returns every one of the "
        f"{len(tensors)} merged tensors bitwise (Q/K, permuted in the file, are checked by the "
        "transformers claim)",
        kind="correctness",
        threshold=EXACT,
        unit="tensors unequal or missing",
        code=(*merged, "assay.model.gguf_export"),
    )
    reader.measure(reader_mismatches(path, tensors))
    loader = gate.claim(
        "export.gguf.transformers",
        "the same GGUF loaded by transformers' GGUF loader: logits equal the adapted model's",
        kind="correctness",
        threshold=EXPORT,
        unit="max abs error",
        code=(*merged, "assay.model.gguf_export"),
    )
    loader.measure(transformers_error(tmp_path, qwen2.ids, m_expected, gguf_file=path.name))
    for how, name in (
        ("transpose", "layers.0 o_proj written transposed"),
        ("keys", "layers.0 gate_proj and up_proj written under each other's names"),
    ):
        bad = write_gguf(tmp_path / f"{how}.gguf", adapted.config, corrupt_tensors(tensors, how))
        reader.control(name, reader_mismatches(bad, tensors))
        loader.control(name, transformers_error(tmp_path, qwen2.ids, m_expected, bad.name))
    with defects.inject("model.gguf_export.skip_qk_permute"):
        bad = export_merged(adapted, tmp_path / "unpermuted.gguf", format="gguf")
    loader.control(
        "Q/K rows not permuted (model.gguf_export.skip_qk_permute)",
        transformers_error(tmp_path, qwen2.ids, m_expected, bad.name),
    )
    with torch.no_grad():
        symmetric = (assay.load(bad)(qwen2.ids) - m_expected).abs().max().item()
    gate.note(
        f"the unpermuted GGUF read back by assay's own loader: max abs error {symmetric:.3g} "
        "(its reader un-permutes every llama file, so it sees this defect too; a defect shared "
        "by writer and reader would only show in the transformers claim)"
    )
    gate.not_tested(
        "Llama-3 rope scaling through transformers' GGUF loader",
        "assay writes llama.cpp's rope_freqs tensor, which transformers' GGUF loader ignores "
        "(logits differ by ~2 on tiny llama3); gate-logits reads those files with assay",
    )


# --- Properties measured directly, not only through a parity with the defect as control ------


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
        code=code("lora_fa", "assay.train.build", "adapter_files"),
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
            code=code("lora", "assay.train.build", *STORAGE_CODE[storage], "adapter_files"),
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
