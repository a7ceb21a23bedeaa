"""Gradients of one streamed-disk step against the resident step on the same model folder, in
its own process: how many trainable gradients (and logits) are not ``torch.equal``.

Both sides are built by ``assay.train.build.build_runner`` (LoRA r8/alpha 16 on the attention
projections, the same storage and seed), their adapters randomized alike (so A's gradients are
not zero), and take one forward and backward of assay's chunked CE on the same ids.
``--defect NAME`` runs the streamed side under a defect of the catalog
(``assay_testing.defects``), applied from outside: the control.

usage: python -m assay_bench.scale_exact MODEL [--storage S] [--seq 256] [--defect NAME]
"""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path
from typing import Any

from assay_bench.scale_train import ATTENTION


def _gradients(model: Path, storage: str, ids, streamed: bool):
    import torch

    from assay.adapters.perturb import randomize_adapters
    from assay.settings import StreamConfig
    from assay.train.build import build_runner
    from assay_bench.step import step_loss

    stream = StreamConfig(tier="disk", buffers=2, recompute=True) if streamed else None
    runner, base = build_runner(
        model,
        storage=storage,
        method="lora",
        seed=0,
        adapter_options={"rank": 8, "alpha": 16, "targets": ATTENTION},
        stream=stream,
    )
    randomize_adapters(base, seed=3)
    loss = step_loss(runner, ids, "chunked_ce")
    loss.backward()
    grads = {n: p.grad.clone() for n, p in base.named_parameters() if p.requires_grad}
    return float(loss.detach()), grads, torch.get_num_threads()


def compare(model: Path, *, storage: str, seq: int, defect: str | None) -> dict[str, Any]:
    import torch

    from assay.model.loader import open_source

    vocab = open_source(model).config.vocab_size
    ids = torch.randint(0, vocab, (1, seq), generator=torch.Generator().manual_seed(0))
    loss, resident, threads = _gradients(model, storage, ids, streamed=False)
    if defect is None:
        injected = contextlib.nullcontext()
    else:
        from assay_testing.defects import inject

        injected = inject(defect)
    with injected:
        s_loss, streamed, _ = _gradients(model, storage, ids, streamed=True)
    unequal = sum(not torch.equal(resident[n], streamed[n]) for n in resident)
    return {
        "storage": storage,
        "seq": seq,
        "defect": defect,
        "gradients": len(resident),
        "unequal_gradients": unequal,
        "loss_equal": loss == s_loss,
        "threads": threads,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path, help="an HF safetensors folder")
    parser.add_argument("--storage", default="float32")
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--defect", default=None, help="a defect of assay_testing.defects")
    args = parser.parse_args(argv)
    print(json.dumps(compare(args.model, storage=args.storage, seq=args.seq, defect=args.defect)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
