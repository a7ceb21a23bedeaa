"""Training-step throughput: assay against transformers+PEFT and transformers+bitsandbytes,
streamed against resident, all against the same-session fp32 GEMM ceiling.

Usage: python harness/bench_step.py [--model GGUF|DIR | --shape NAME [--layers N]]
       [--seq 256 512] [--steps 5] [--warmup 1] [--json] [--profile [SUBJECT ...]]
       [--subjects SUBJECT ...] [--all-seq] [--assay-loss ce] [--rss]

One optimizer step (forward, next-token CE, backward, fused AdamW, zero_grad) of LoRA
r8/alpha 16 on the attention projections of a model, batch 1: a GGUF file or an HF
safetensors folder (--model; the bundled SmolLM2 by default), or random fp32 weights of a
published shape (--shape tinyllama-1.1b, any of assay.model.shapes; --layers N keeps its width
at N layers), written once to $ASSAY_CACHE/scale-models by assay_testing.scale_models. The CE
is assay's
fused chunked CE for assay subjects (--assay-loss ce: full logits, as the peers) and
F.cross_entropy over full fp32 logits for the transformers peers. Subjects run interleaved,
in a rotating order; the median of the timed steps after warm-up gives tokens/s. Subjects
other than assay, assay+ckpt and peft run at the first --seq only unless --all-seq. GFLOP/s
use the FLOP model of assay.model.flops (4 P tokens for a frozen base, plus adapters and
causal attention; recomputation never counts). --profile runs one extra profiled step per
subject (all of them when no names follow) and prints where the time goes; with the peers
profiled it adds the Amdahl bound (peer median step / the peer's GEMMs replayed alone, see
assay_bench.report) and the top ops by self CPU time. --rss then measures the peak resident
memory of a step above the loaded model at the first --seq, each subject in its own process
(assay_bench.rss). Progress goes to stderr; results to stdout. Targets are printed, never
asserted.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from assay.model.shapes import SHAPES
from assay_bench.report import format_table, run_benchmark
from assay_bench.step import LOSSES
from assay_bench.subjects import SUBJECTS
from assay_testing.real_model import smollm2_path

# the opt-in subjects: name them with --subjects
DEFAULT_SUBJECTS = tuple(s for s in SUBJECTS if not s.endswith(("-compiled", "-bf16")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--model", type=Path, default=None, help="a GGUF file or HF folder (default: SmolLM2)"
    )
    source.add_argument(
        "--shape", choices=tuple(SHAPES), help="random fp32 weights of this published shape"
    )
    parser.add_argument("--layers", type=int, default=None, help="with --shape: decoder layers")
    parser.add_argument("--seq", type=int, nargs="+", default=[256, 512])
    parser.add_argument("--steps", type=int, default=5, help="timed steps (at least 5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    parser.add_argument(
        "--subjects",
        nargs="+",
        choices=SUBJECTS,
        default=list(DEFAULT_SUBJECTS),
        help="default: all but the compiled and bf16 ones (a compile costs about 30 s each; "
        "bf16 runs ~19x slower than fp32 on a CPU without native bf16); gate-throughput runs all",
    )
    parser.add_argument(
        "--profile", nargs="*", choices=SUBJECTS, default=None, help="profile these (or all)"
    )
    parser.add_argument("--all-seq", action="store_true", help="every subject at every --seq")
    parser.add_argument(
        "--assay-loss",
        choices=LOSSES,
        default="chunked_ce",
        help="loss of the assay subjects (peers always use ce)",
    )
    parser.add_argument("--rss", action="store_true", help="peak RSS per subject, own process")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    if args.steps < 5:
        parser.error("--steps must be at least 5")
    profile = [] if args.profile is None else (args.profile or args.subjects)
    missing = [name for name in profile if name not in args.subjects]
    if missing:
        parser.error(f"--profile names subjects not in --subjects: {', '.join(missing)}")
    if args.layers is not None and (args.shape is None or args.layers < 1):
        parser.error("--layers needs --shape and a positive number of layers")
    started = time.perf_counter()

    def progress(line: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {line}", file=sys.stderr, flush=True)

    depth = None
    if args.shape is not None:
        from assay_testing.scale_models import random_model

        depth = args.layers or SHAPES[args.shape].num_layers
        progress(f"random {args.shape} at {depth} layers (written once, then cached)")
        model = random_model(args.shape, args.layers)
    else:
        model = args.model or smollm2_path()
        if not (model.is_file() or (model / "config.json").is_file()):
            parser.error(f"--model {model}: expected a GGUF file or an HF safetensors folder")
    result, _ = run_benchmark(
        model,
        args.subjects,
        seqs=args.seq,
        steps=args.steps,
        warmup=args.warmup,
        profile=profile,
        all_seq=args.all_seq,
        assay_loss=args.assay_loss,
        progress=progress,
    )
    if args.rss:
        from assay_bench.rss import in_subprocess

        for name in args.subjects:
            progress(f"peak RSS of {name} at seq {args.seq[0]} (own process)")
            result["peak_rss"][name] = in_subprocess(name, args.seq[0], model, args.assay_loss)
    result["model"] = {"path": str(model), "shape": args.shape, "layers": depth}
    result["wall_s"] = time.perf_counter() - started
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        shape = f" (random {args.shape}, {depth} layers)" if args.shape else ""
        print(f"model {model}{shape}\n{format_table(result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
