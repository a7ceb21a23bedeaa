"""A train config's memory plan and its fit verdict (no torch): what ``assay estimate``
prints and what ``assay train`` refuses by.

A configuration predicted over budget is refused, and the refusal names the knobs that would
make it fit, each with its predicted peak: streaming with 2 buffers, chunked CE, gradient
checkpointing, a smaller micro-batch (same batch through accumulation), NF4 storage, a shorter
sequence. Reading the model's shape needs only its header.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from assay.adapters.inject import projection_parts
from assay.memory.predict import SHAPE_FIELDS, Plan, Prediction, predict, shape, with_changes
from assay.model.config import ModelConfig, check_layers_held, config_from_gguf
from assay.settings import default
from assay.settings.methods import method
from assay.settings.storages import storage


def gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def header_config(path: Path) -> ModelConfig:
    """The model's config from a GGUF header or a safetensors directory's config.json: no
    weight is read."""
    if path.is_dir():
        from assay.model.safetensors import SafetensorsSource

        source = SafetensorsSource(path)  # config.json and the tensors' headers
        config, names = source.config, source.names
    else:
        from assay.model.gguf_header import read_header

        header = read_header(path)
        config = config_from_gguf(
            header.metadata,
            str(path),
            has_output="output.weight" in header.tensors,
            has_qkv_bias="blk.0.attn_q.bias" in header.tensors,
            rope_freq_divisors=None,  # rotary scaling does not change any tensor's size
        )
        names = list(header.tensors)
    check_layers_held(config, names, str(path))  # before a plan sized by the layer count
    return config


def plan_from_config(config: Any, model: ModelConfig) -> Plan:
    """A ``Plan`` for a loaded ``TrainConfig`` (assay.settings.loader)."""
    adapter = config.adapter
    tiny = method(adapter.method).svd_basis
    return Plan(
        model=shape(**{key: getattr(model, key) for key in SHAPE_FIELDS}),  # all a plan holds
        storage=config.storage,
        method=adapter.method,
        # TinyLoRA has no LoRA rank: its own r, u and sharing set its memory
        rank=adapter.r if tiny else adapter.rank or 1,
        # a fused projection (Phi-3) is sized as its parts, an adapter each: a little more than
        # its one adapter holds
        targets=projection_parts(adapter.targets),
        stream_buffers=config.stream.buffers if config.stream is not None else None,
        stream_recompute=config.stream.recompute if config.stream is not None else True,
        seq_len=config.data.seq_len,
        micro_batch=config.batch.micro_batch,
        grad_accum=config.batch.grad_accum,
        gradient_checkpointing=config.gradient_checkpointing,
        loss=config.loss.type,
        chunk_size=config.loss.chunk_size or default("loss.chunk_size", "chunked_ce"),
        **({"tiny_u": adapter.u, "tiny_sharing": adapter.sharing} if tiny else {}),
    )


def knobs(plan: Plan) -> list[tuple[str, Plan]]:
    """(label, changed plan) for each single change that lowers memory, cheapest first."""
    found: list[tuple[str, Plan]] = []
    if not plan.stream_buffers:
        found.append(("streaming with 2 buffers", with_changes(plan, stream_buffers=2)))
    if plan.loss == "ce":
        chunked = with_changes(plan, loss="chunked_ce")
        found.append((f"chunked CE (chunk {chunked.chunk_size})", chunked))
    if not plan.gradient_checkpointing and not plan.stream_buffers:
        found.append(("gradient checkpointing", with_changes(plan, gradient_checkpointing=True)))
    if not storage(plan.storage).quantized and not method(plan.method).trains_base:
        found.append(("nf4 storage", with_changes(plan, storage="nf4")))
    batch = plan.micro_batch
    while batch > 1:
        batch //= 2
        accum = plan.grad_accum * plan.micro_batch // batch
        found.append(
            (
                f"micro-batch {batch} x accumulation {accum}",
                with_changes(plan, micro_batch=batch, grad_accum=accum),
            )
        )
    seq = plan.seq_len
    while seq > 128:
        seq //= 2
        found.append((f"seq {seq}", with_changes(plan, seq_len=seq)))
    return found


def fixes(plan: Plan, budget: int) -> list[tuple[str, int]]:
    """Knobs that make ``plan`` fit ``budget``: single changes first, else cumulative ones."""
    singles = [(label, predict(p).total) for label, p in knobs(plan)]
    fitting = [(label, total) for label, total in singles if total <= budget]
    if fitting:
        return fitting
    labels: list[str]
    current, labels = plan, []
    for label, _ in singles:
        trial = next((p for lab, p in knobs(current) if lab == label), None)
        if trial is None or predict(trial).total >= predict(current).total:
            continue
        current, labels = trial, [*labels, label]
        if predict(current).total <= budget:
            return [(" + ".join(labels), predict(current).total)]
    return []


def verdict(plan: Plan, budget: int) -> dict[str, Any]:
    """The estimate as a JSON-ready dict: fits, predicted total, terms, and fixes if refused."""
    prediction: Prediction = predict(plan)
    fits = prediction.total <= budget
    return {
        "fits": fits,
        "budget_bytes": budget,
        "prediction": prediction.to_dict(),
        "plan": plan.to_dict(),
        "fixes": [] if fits else [{"knob": k, "total_bytes": t} for k, t in fixes(plan, budget)],
    }


# The setting that sizes each term of a prediction: what a refusal names as the field to change.
TERM_SETTINGS = {
    "weights": "storage",
    "adapter": "adapter.rank",
    "gradients": "adapter.rank",
    "optimizer": "adapter.rank",
    "activations": "batch.micro_batch",
    "logits_and_loss": "batch.micro_batch",
}
SHOWN_FIXES = 3


def largest_part(result: dict[str, Any]) -> tuple[str, str]:
    """(setting, 'the largest part is <term> (<GiB>)') for the biggest term of the prediction."""
    terms = result["prediction"]["terms"]
    term = max(TERM_SETTINGS, key=lambda t: terms.get(t, 0))
    setting = TERM_SETTINGS[term]
    if setting == "adapter.rank":
        chosen = method(result["plan"]["method"])
        setting = "adapter.method" if chosen.trains_base else setting
        setting = "adapter.u" if chosen.svd_basis else setting
    return setting, f"the largest part is {term.replace('_', ' ')} ({gib(terms[term])})"


def refusal_line(result: dict[str, Any], budget_name: str = "the budget") -> str:
    """One line naming the setting behind the largest term and up to three knobs that would
    fit, e.g. 'batch.micro_batch: predicted peak ... ; fits with micro-batch 4 x ...: 1.90 GiB'."""
    total, budget = result["prediction"]["total_bytes"], result["budget_bytes"]
    setting, part = largest_part(result)
    head = f"{setting}: predicted peak {gib(total)} exceeds {budget_name} {gib(budget)}; {part}"
    if not result["fixes"]:
        return head + "; no single knob searched makes it fit"
    shown = result["fixes"][:SHOWN_FIXES]
    options = "; ".join(f"{f['knob']}: {gib(f['total_bytes'])}" for f in shown)
    more = len(result["fixes"]) - len(shown)
    return f"{head}; fits with {options}" + (f" (and {more} more)" if more else "")


def host_memory_free() -> tuple[int, str] | None:
    """(bytes a CPU run may still use, the name a refusal gives them): ``MemAvailable``, or
    the memory cgroup's limit less its usage where that is tighter (the kernel kills at the
    group's limit whatever MemAvailable says); None where neither can be read."""
    from assay.memory.cgroup import group_memory

    available = memory_available()
    group = group_memory()
    if group is not None and (available is None or group.free < available):
        return group.free, (
            f"the memory cgroup's free memory ({gib(group.free)} of its {gib(group.limit)} limit)"
        )
    if available is None:
        return None
    return available, "the memory available (MemAvailable)"


def memory_available(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """Bytes the kernel says can be allocated without swapping (``MemAvailable``); None where
    the file or the field is missing (not Linux)."""
    try:
        lines = meminfo.read_text("ascii", "replace").splitlines()
    except OSError:
        return None
    for line in lines:
        key, _, rest = line.partition(":")
        if key == "MemAvailable" and rest.split() and rest.split()[0].isdigit():
            return int(rest.split()[0]) * 1024  # the file states kB
    return None
