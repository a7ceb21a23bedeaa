"""Structure-aware fuzzing of the YAML config loader and the JSONL row reader.

Hypothesis draws documents of the valid shape (a train config's sections and keys, TRL row
formats) whose values are hostile: NaN and infinities, integers past 2**63, lone surrogate
escapes, unknown roles, deep nesting, alias chains, long strings, wrong types. Every example
must either load or raise the loader's one-line error class, and each load is timed: the
slowest is the loaders' measured worst case, which gate-robustness compares with its bound.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# The bound gate-robustness holds every load to (seconds, on a busy 2-core machine).
LOAD_BOUND_S = 5.0

_HOSTILE_NUMBERS = st.sampled_from(
    [".nan", ".inf", "-.inf", ".NaN", str(2**70), str(-(2**64)), "1e400", "-0.0", "0", "1e-320"]
)
_HOSTILE_STRINGS = st.sampled_from(
    ['"\\ud800"', '"a\\udfffb"', '"' + "x" * 5000 + '"', '""', '"..\\/..\\/etc"', "~", "[]", "{}"]
)
_FIELDS = {
    "adapter": ["rank", "alpha", "layers", "targets", "method", "u", "r"],
    "optim": ["lr", "betas", "eps", "grad_clip", "weight_decay", "warmup_steps", "schedule"],
    "data": ["seq_len", "format", "mask", "truncate"],
    "batch": ["micro_batch", "grad_accum"],
    "loss": ["type", "beta", "chunk_size"],
    "stream": ["buffers", "tier"],
    None: ["seed", "steps", "neftune_alpha", "budget", "storage"],
}


@dataclass
class FuzzReport:
    """Examples tried, unexpected exceptions (with a sample) and the slowest load."""

    examples: int = 0
    unexpected: int = 0
    samples: list[str] = field(default_factory=list)
    worst_s: float = 0.0
    worst_input: str = ""


def _value(draw: Any) -> str:
    kind = draw(st.sampled_from(["number", "string", "list", "nested", "alias"]))
    if kind == "number":
        return draw(_HOSTILE_NUMBERS)
    if kind == "string":
        return draw(_HOSTILE_STRINGS)
    if kind == "list":
        items = draw(st.lists(_HOSTILE_NUMBERS | _HOSTILE_STRINGS, max_size=4))
        return "[" + ", ".join(items) + "]"
    if kind == "nested":
        depth = draw(st.integers(1, 3000))
        return "[" * depth + "]" * depth
    return "*bomb"


@st.composite
def config_texts(draw: Any, model: str, train: str) -> str:
    """A train config with one to four keys set to hostile values, maybe an alias bomb."""
    lines = [f"model: {json.dumps(model)}", f"data:\n  train: {json.dumps(train)}", "steps: 2"]
    sections: dict[str | None, list[str]] = {}
    for _ in range(draw(st.integers(1, 4))):
        section = draw(st.sampled_from(list(_FIELDS)))
        key = draw(st.sampled_from(_FIELDS[section]))
        sections.setdefault(section, []).append(f"{key}: {_value(draw)}")
    head = ""
    if any("*bomb" in v for vs in sections.values() for v in vs):
        levels = draw(st.integers(2, 12))
        head = "b0: &b0 [1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
            f"b{i}: &b{i} [{', '.join([f'*b{i - 1}'] * 8)}]\n" for i in range(1, levels)
        )
        head += f"bomb_root: &bomb [*b{levels - 1}]\n"
    body = []
    for section, entries in sections.items():
        keys = {e.split(":")[0] for e in entries}
        unique = [next(e for e in entries if e.startswith(k + ":")) for k in sorted(keys)]
        if section is None:
            body.extend(unique)
        elif section == "data":
            lines[1] += "".join(f"\n  {e}" for e in unique)
        else:
            body.append(f"{section}:\n" + "".join(f"  {e}\n" for e in unique).rstrip("\n"))
    return head + "\n".join(lines + body) + "\n"


_ROLES = st.sampled_from(["user", "assistant", "system", "asistant", "", "\\ud800", "tool"])
_TEXT = st.sampled_from(
    ["hi", "\\ud800", "a\\udc00b", "\\u0000", "x" * 3000, "\\n\\t", "\\ud83d\\ude00"]
)


@st.composite
def jsonl_texts(draw: Any) -> bytes:
    """One to three JSONL rows of a TRL format with hostile values."""
    rows = []
    for _ in range(draw(st.integers(1, 3))):
        fmt = draw(st.sampled_from(["text", "pc", "messages", "kto", "raw"]))
        text = draw(_TEXT)
        if fmt == "text":
            rows.append(f'{{"text": "{text}"}}')
        elif fmt == "pc":
            rows.append(f'{{"prompt": "{text}", "completion": "{draw(_TEXT)}"}}')
        elif fmt == "messages":
            turns = ", ".join(
                f'{{"role": "{draw(_ROLES)}", "content": "{draw(_TEXT)}"}}'
                for _ in range(draw(st.integers(0, 3)))
            )
            rows.append(f'{{"messages": [{turns}]}}')
        elif fmt == "kto":
            label = draw(st.sampled_from(["true", "false", "NaN", "1", '"yes"', "Infinity"]))
            rows.append(f'{{"prompt": "a", "completion": "{text}", "label": {label}}}')
        else:
            depth = draw(st.integers(1, 200_000))
            rows.append(draw(st.sampled_from(["[" * depth + "]" * depth, "NaN", "1e999", "{"])))
    return ("\n".join(rows) + "\n").encode("utf-8", "surrogatepass")


def _timed(report: FuzzReport, label: str, call: Any, expected: type[BaseException]) -> None:
    started = time.perf_counter()
    try:
        call()
    except expected:
        pass
    except Exception as exc:  # anything else is a finding
        report.unexpected += 1
        if len(report.samples) < 5:
            report.samples.append(f"{type(exc).__name__}: {str(exc)[:120]} <- {label[:200]!r}")
    elapsed = time.perf_counter() - started
    report.examples += 1
    if elapsed > report.worst_s:
        report.worst_s, report.worst_input = elapsed, label[-300:]


def fuzz_config_loader(root: Path, examples: int, seed: int) -> FuzzReport:
    """Load ``examples`` hostile configs; each must load or raise ConfigError."""
    from hypothesis import seed as fixed_seed

    from assay.errors import AssayError
    from assay.settings.loader import load_train_config

    root.mkdir(parents=True, exist_ok=True)
    train = root / "train.jsonl"
    train.write_text('{"text": "hello"}\n')
    report = FuzzReport()
    path = root / "fuzz.yaml"
    path.write_text(f"model: m\ndata: {{train: {json.dumps(str(train))}}}\nsteps: 1\n")
    load_train_config(path)  # imports and the schema compile are not a load's cost

    @fixed_seed(seed)
    @settings(
        max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(config_texts(str(root / "model.gguf"), str(train)))
    def run(text: str) -> None:
        path.write_text(text, encoding="utf-8")
        _timed(report, text, lambda: load_train_config(path), AssayError)

    run()
    return report


def fuzz_jsonl_reader(root: Path, examples: int, seed: int) -> FuzzReport:
    """Read ``examples`` hostile JSONL files; each must read or raise DataError."""
    from hypothesis import seed as fixed_seed

    from assay.train.data.rows import DataError, read_rows

    root.mkdir(parents=True, exist_ok=True)
    report = FuzzReport()
    path = root / "fuzz.jsonl"

    @fixed_seed(seed)
    @settings(
        max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(jsonl_texts())
    def run(data: bytes) -> None:
        path.write_bytes(data)
        rows = lambda: _check_rows(read_rows(path))  # noqa: E731
        _timed(report, data.decode("utf-8", "replace"), rows, DataError)

    run()
    return report


def _check_rows(rows: Any) -> None:
    """What a reader that returned must guarantee: every string encodes as UTF-8 and every
    number is finite (a tokenizer or JSON writer downstream would crash otherwise)."""
    for row in rows.rows:
        text = json.dumps(row.data, ensure_ascii=False, allow_nan=False)
        text.encode("utf-8")
        for value in row.data.values():
            if isinstance(value, float) and not math.isfinite(value):
                raise AssertionError("non-finite value accepted")
