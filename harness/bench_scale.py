"""Train a random model of a published shape, larger than its memory limit, inside a cgroup.

`assay train` on the model, streamed from disk, inside a memory cgroup; prints how it ended and
the step time.

Usage: python harness/bench_scale.py [--shape llama-3.2-3b] [--layers N] [--limit 3GiB]
       [--storage float32] [--steps 2] [--json]

The model (random fp32 weights, written once to $ASSAY_CACHE/scale-models, about 4 bytes per
parameter: 12.9 GB for llama-3.2-3b), the byte tokenizer and the rows come from the test
machinery (assay_testing.scale_models, assay_bench.scale_train); the config is LoRA r8 on
attention, seq 256, micro-batch 1, disk tier with 2 buffers recomputing each layer in
backward. Needs root and a cgroup memory controller (v1 or v2). This is a bench row, not a
gate claim: gate-scale judges the TinyLlama-1.1B shape. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from assay.errors import AssayError
    from assay.model.shapes import SHAPES, named_shape, parameter_count
    from assay.settings.loader import parse_size

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="llama-3.2-3b")
    parser.add_argument("--layers", type=int, default=None, help="another depth, same width")
    parser.add_argument("--limit", default="3GiB", help="the cgroup's memory limit")
    parser.add_argument("--storage", default="float32", help="frozen-base storage")
    parser.add_argument("--steps", type=int, default=2, help="optimizer steps to train")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    try:
        limit = parse_size(args.limit)
        config = named_shape(args.shape, args.layers)
    except (ValueError, AssayError) as error:
        parser.error(str(error))
    from assay_bench.scale_train import limited_train, train_config, workspace
    from assay_testing.memory_limit import LimitUnavailable
    from assay_testing.scale_models import random_model

    started = time.perf_counter()

    def progress(line: str) -> None:
        print(f"[{time.perf_counter() - started:6.0f} s] {line}", file=sys.stderr, flush=True)

    progress(f"writing (or reusing) the random {args.shape} model, {config.num_layers} layers")
    model = random_model(args.shape, args.layers)
    root = Path(tempfile.mkdtemp(prefix="assay-bench-scale-"))
    space = workspace(root / "workspace")
    path = train_config(
        space, model, "streamed", storage=args.storage, streamed=True, steps=args.steps
    )
    progress(f"assay train under a {args.limit} memory cgroup")
    try:
        found = limited_train(path, limit, cache=root / "cache")
    except LimitUnavailable as why:
        print(f"bench_scale: {why}", file=sys.stderr)
        return 2
    run = found["run"]
    weights = (model / "model.safetensors").stat().st_size
    result = {
        "shape": args.shape,
        "layers": config.num_layers,
        "parameters": parameter_count(config),
        "weights_bytes": weights,
        "storage": args.storage,
        "limit_bytes": limit,
        "completed_steps": found["steps"],
        "step_seconds": found["step_seconds"],
        "max_rss_bytes": run.max_rss_bytes,
        "exit": run.returncode,
        "oom_killed": run.oom_killed,
        "wall_s": run.wall_s,
        "controller": run.controller,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        steps = ", ".join(f"{s:.1f}" for s in found["step_seconds"]) or "none"
        print(
            f"{args.shape} ({config.num_layers} layers, {weights / 1e9:.1f} GB fp32) under "
            f"{limit / 2**30:.2f} GiB: {found['steps']} of {args.steps} steps "
            f"(exit {run.returncode}{', killed at the limit' if run.oom_killed else ''}); "
            f"peak RSS {run.max_rss_bytes / 2**30:.2f} GiB; step seconds {steps}"
        )
    return 0 if found["steps"] == args.steps else 1


if __name__ == "__main__":
    raise SystemExit(main())
