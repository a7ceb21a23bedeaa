"""Faults inside writes for every file kind the product writes, and what a reader then sees.

Each ``Kind`` writes version 1 or 2 of one product file (a checkpoint, a PEFT adapter folder,
a merged safetensors export, a GGUF export, the stream disk store) through the product's own
writer, reads it back through the product's own reader, and names the file a fault targets.
``killed_write`` runs a write in a forked child with ``atomic.kill_mid_write`` armed, so the
child dies half-way through that file, as a power cut or OOM kill would leave it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from assay.errors import AssayError
from assay_testing import defects


@dataclass
class Kind:
    """One product file: ``write(version)``, ``read() -> version``, the files it leaves."""

    name: str
    write: Callable[[int], None]
    read: Callable[[], int]
    target: str  # the file name atomic.kill_mid_write matches
    files: Callable[[], list[Path]]
    through_atomic: bool = True  # False: a library writer (GGUFWriter) writes the bytes


def _version_of(value: float) -> int:
    return round(value)


def kinds(root: Path, model_dir: Path) -> list[Kind]:
    """Every writer this module exercises, each in its own directory under ``root``."""
    import assay
    from assay.adapters import attach, load_adapter, save_adapter
    from assay.adapters.export import export_merged
    from assay.train.checkpoint.directory import load_checkpoint, save_checkpoint

    base = assay.load(model_dir)

    def adapted(version: int):
        import copy

        model = attach(copy.deepcopy(base), "lora", rank=2, alpha=4, targets="attention")
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.fill_(float(version))
        return model

    run = root / "run"
    prints = {"config": "c" * 64, "dataset": "d" * 64, "model": "m" * 64}

    def write_checkpoint(version: int) -> None:
        weight = torch.full((4, 4), float(version), requires_grad=True)
        optimizer = torch.optim.AdamW([weight], lr=0.1)
        save_checkpoint(run, version, {"w": weight}, optimizer, {}, {"row": version}, prints)

    def read_checkpoint() -> int:
        return load_checkpoint(run, fingerprints=prints).step

    adapter = root / "adapter"

    def read_adapter() -> int:
        import copy

        model = load_adapter(copy.deepcopy(base), adapter)
        b = next(p for n, p in model.named_parameters() if "lora_B" in n)
        return _version_of(b.flatten()[0].item())

    merged = root / "merged"

    def write_merged(version: int) -> None:
        export_merged(adapted(version), merged, format="safetensors")

    def version_in(path: Path, projection: str) -> int:
        """B was filled with v, so the projection's merged weight moves with v: recover v from
        its change against the base, in units of the version-1 change."""
        weight = getattr(assay.load(path).layers[0].self_attn, projection).weight
        plain = getattr(base.layers[0].self_attn, projection).weight
        ref = getattr(adapted(1).layers[0].self_attn, projection).merged_weight() - plain
        delta = (weight - plain).flatten()
        return _version_of((delta @ ref.flatten() / (ref.flatten() @ ref.flatten())).item())

    def read_merged() -> int:
        # what `assay generate` and `assay train` read of a model folder: its tokenizer files
        # and generation defaults (copied from the source folder) as well as its weights
        from assay.model.generation_config import generation_defaults
        from assay.model.tokenizer import load_tokenizer

        if (merged / "tokenizer.json").is_file():
            load_tokenizer(merged)
        generation_defaults(merged)
        return version_in(merged, "q_proj")

    gguf_path = root / "model.gguf"

    def write_gguf(version: int) -> None:
        export_merged(adapted(version), gguf_path, format="gguf")

    def read_gguf() -> int:
        return version_in(gguf_path, "v_proj")

    from assay.stream.layout import LayerLayout
    from assay.stream.store import DiskStore

    layers = [{"w": torch.zeros(8, 8), "b": torch.zeros(8)} for _ in range(2)]
    layouts = [LayerLayout.of(t) for t in layers]
    cache, key = root / "stream", "0" * 64

    def write_store(version: int) -> None:
        for tensors in layers:
            for t in tensors.values():
                t.fill_(float(version))
        DiskStore(cache, key, layouts, layers)

    def read_store() -> int:
        store = DiskStore(cache, key, layouts, None)  # no tensors: read the cache or refuse
        out = torch.empty(layouts[1].nbytes, dtype=torch.uint8)
        store.read_into(1, out, non_blocking=False)
        return _version_of(layouts[1].views(out)["w"][0, 0].item())

    return [
        Kind(
            "stream disk store",
            write_store,
            read_store,
            "layer-0001.safetensors",
            lambda: sorted((cache / key[:32]).glob("layer-*")),
            False,
        ),
        Kind(
            "checkpoint",
            write_checkpoint,
            read_checkpoint,
            "latest",
            lambda: sorted(p for p in run.rglob("*") if p.is_file()),
        ),
        Kind(
            "peft adapter",
            lambda v: save_adapter(adapted(v), adapter),
            read_adapter,
            "adapter_model.safetensors",
            lambda: sorted(adapter.glob("*")),
        ),
        Kind(
            "merged safetensors",
            write_merged,
            read_merged,
            "model.safetensors",
            lambda: sorted(merged.glob("*")),
        ),
        Kind("merged gguf", write_gguf, read_gguf, "model.gguf", lambda: [gguf_path], False),
    ]


def read_outcome(kind: Kind) -> tuple[int | None, str | None]:
    """(version read, None) or (None, the error line) when the reader refused."""
    try:
        return kind.read(), None
    except AssayError as error:
        return None, str(error)
    except Exception as error:  # a refusal that is not the product's one-line error
        return None, f"UNCLEAN {type(error).__name__}: {error}"


def clean_refusal(message: str | None, path: Path) -> bool:
    """A one-line AssayError naming the file (or its directory)."""
    return (
        message is not None
        and not message.startswith("UNCLEAN")
        and "\n" not in message
        and (path.name in message or path.parent.name in message)
    )


def killed_write(kind: Kind, version: int, faults: dict[str, str], limit_s: float = 120) -> bool:
    """Write ``version`` in a forked child with ``faults`` armed; True when it died by SIGKILL."""
    pid = os.fork()
    if pid == 0:  # child: arm, write, and leave without running any of the parent's teardown
        code = 0
        try:
            with contextlib.ExitStack() as stack:
                for name, setting in faults.items():
                    stack.enter_context(defects.inject(name, setting))
                kind.write(version)
        except BaseException:
            code = 3
        os._exit(code)
    deadline = time.monotonic() + limit_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return False
        time.sleep(0.01)


def naive_read(path: Path) -> str | None:
    """Read a file with the format library alone, no product checks; the error or None."""
    import json

    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            load_file(path)
        elif path.suffix == ".gguf":
            import gguf

            gguf.GGUFReader(path)
        elif path.suffix == ".json":
            json.loads(path.read_text())
        else:
            path.read_text()
    except Exception as error:
        return f"UNCLEAN {type(error).__name__}: {error}"
    return None


def after_kill(kinds_: list[Kind], faults: dict[str, str]) -> tuple[int, list]:
    """Write version 1 of each atomic kind, then SIGKILL a child half-way through writing
    version 2 with ``faults`` armed. Returns (kinds not dying or not reading version 1, the
    product reader's refusals as (kind, error))."""
    wrong, refusals = 0, []
    for kind in (k for k in kinds_ if k.through_atomic):
        kind.write(1)
        died = killed_write(kind, 2, {**faults, "atomic.kill_mid_write": kind.target})
        version, error = read_outcome(kind)
        wrong += (not died) or version != 1
        if error is not None:
            refusals.append((kind, error))
    return wrong, refusals


def after_short(kinds_: list[Kind], faults: dict[str, str]) -> tuple[int, list]:
    """Write version 1 of each atomic kind whole (before any fault is armed), then version 2
    with ``faults`` armed. Returns (kinds not reading version 2, the product reader's refusals
    as (kind, error))."""
    wrong, refusals = 0, []
    for kind in (k for k in kinds_ if k.through_atomic):
        kind.write(1)
        with contextlib.ExitStack() as stack:
            for name, setting in faults.items():
                stack.enter_context(defects.inject(name, setting))
            kind.write(2)
            version, error = read_outcome(kind)
        wrong += version != 2
        if error is not None:
            refusals.append((kind, error))
    return wrong, refusals


def torn_cases(kinds_: list[Kind]) -> list[tuple[Path, str | None, str | None]]:
    """Each file of each kind cut to a third, in turn: (path, the product reader's error or
    "read a torn file", the format library's own error). The file is restored after each."""
    cases = []
    for kind in kinds_:
        kind.write(1)
        for path in kind.files():
            data = path.read_bytes()
            path.write_bytes(data[: max(1, len(data) // 3)])
            version, error = read_outcome(kind)
            cases.append((path, error if version is None else "read a torn file", naive_read(path)))
            path.write_bytes(data)
    return cases
