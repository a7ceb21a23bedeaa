"""Time importing SmolLM2 with assay's loader against transformers' from_pretrained, same run.

Usage: python harness/bench_import.py [--repeats N] [--json]
A benchmark, not a test: the numbers are printed, never asserted.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time

import torch

from assay_testing.real_model import smollm2_path


def _timed(load) -> float:
    gc.collect()
    started = time.perf_counter()
    model = load()
    elapsed = time.perf_counter() - started
    del model
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    path = smollm2_path()

    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    import assay

    hf_logging.disable_progress_bar()

    def ours():
        return assay.load(path)

    def theirs():
        return AutoModelForCausalLM.from_pretrained(
            path.parent, gguf_file=path.name, dtype=torch.float32
        )

    samples = {"assay": [], "transformers": []}
    for _ in range(args.repeats):  # interleaved so drift hits both alike
        samples["assay"].append(_timed(ours))
        samples["transformers"].append(_timed(theirs))
    result = {
        "model": path.name,
        "threads": torch.get_num_threads(),
        "seconds": {
            k: {"median": statistics.median(v), "min": min(v), "max": max(v)}
            for k, v in samples.items()
        },
    }
    result["ratio_transformers_over_assay"] = (
        result["seconds"]["transformers"]["median"] / result["seconds"]["assay"]["median"]
    )
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for name, stats in result["seconds"].items():
            print(
                f"{name:<13} median {stats['median']:.2f} s  (min {stats['min']:.2f}, "
                f"max {stats['max']:.2f}, n={args.repeats})"
            )
        print(f"assay is {result['ratio_transformers_over_assay']:.2f}x faster to import")


if __name__ == "__main__":
    main()
