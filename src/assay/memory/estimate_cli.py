"""``assay estimate CONFIG --budget B [--json]``: predicted peak, breakdown, and a fit verdict.

A configuration predicted over budget is refused (exit 1), and the refusal names the knobs
that would make it fit, each with its predicted peak: streaming with 2 buffers, chunked CE,
gradient checkpointing, a smaller micro-batch (same batch through accumulation), NF4
storage, a shorter sequence. Reading the model's dimensions needs only its header.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from assay.adapter_registry import method
from assay.memory.predict import Dims, Plan, Prediction, predict, with_changes
from assay.settings import default
from assay.storage_registry import storage

EXIT_FITS, EXIT_REFUSED = 0, 1


def gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def model_dims(path: Path) -> Dims:
    """The decoder shape from a GGUF header or a safetensors directory's config.json."""
    from assay.model.config import config_from_gguf, config_from_hf

    if path.is_dir():
        from assay.bounded import read_json_file
        from assay.errors import ModelFileError

        hf = read_json_file(path / "config.json", ModelFileError)
        config = config_from_hf(hf, str(path / "config.json"))
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
    return Dims(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_layers=config.num_layers,
        num_heads=config.num_heads,
        num_kv_heads=config.num_kv_heads,
        head_dim=config.head_dim,
        tie_word_embeddings=config.tie_word_embeddings,
    )


def plan_from_config(config: Any, dims: Dims) -> Plan:
    """A ``Plan`` for a loaded ``TrainConfig`` (assay.train.config)."""
    adapter = config.adapter
    tiny = method(adapter.method).svd_basis
    return Plan(
        model=dims,
        storage=config.storage,
        method=adapter.method,
        # TinyLoRA has no LoRA rank: its own r, u and sharing set its memory
        rank=adapter.r if tiny else adapter.rank or 1,
        targets=tuple(adapter.targets),
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


def cmd_estimate(args: argparse.Namespace) -> int:
    from assay.errors import ConfigError
    from assay.train.config import load_train_config, model_path, parse_size
    from assay.train.preflight import check_against_model

    config = load_train_config(args.config)
    check_against_model(config)
    raw = args.budget if args.budget is not None else config.budget
    if raw is None:
        raise ConfigError(f"{args.config}: no budget: pass --budget (e.g. 4GiB) or set budget")
    try:
        budget = parse_size(raw)
    except ValueError as exc:
        raise ConfigError(f"{args.config}: --budget: {exc}") from None
    result = verdict(plan_from_config(config, model_dims(model_path(config))), budget)
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        print(
            f"predicted peak {gib(result['prediction']['total_bytes'])} "
            f"(budget {gib(budget)}, peak at the {result['prediction']['peak_phase']})"
        )
        for name, value in result["prediction"]["terms"].items():
            print(f"  {name:<16}{value:>16,}")
        print("fits" if result["fits"] else "refused: " + refusal_line(result))
    return EXIT_FITS if result["fits"] else EXIT_REFUSED


def add_estimate(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``estimate`` on an argparse subparsers object; sets ``func``."""
    parser = subparsers.add_parser(
        "estimate", help="predict peak device memory of a train config and check it fits"
    )
    parser.add_argument("config", help="train config YAML")
    parser.add_argument("--budget", help="device memory budget such as 4GiB (default: config)")
    parser.add_argument("--json", action="store_true", help="print the estimate as JSON")
    parser.set_defaults(func=cmd_estimate)
    return parser
