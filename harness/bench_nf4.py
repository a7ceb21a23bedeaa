"""Benchmark NF4 storage: dequant throughput against bitsandbytes, and linear fwd+bwd cost.

Prints one JSON object; each time is the fastest of --repeats runs. Throughput is quoted beside
bitsandbytes' own ``dequantize_4bit`` on the same weights in the same run (the ceiling our tiled
decode calls into), and the NF4 linear's forward+backward time beside a frozen float32
``nn.Linear`` at SmolLM2's projection shapes.

    python harness/bench_nf4.py [--tokens 512] [--repeats 20] [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable

import bitsandbytes
import bitsandbytes.functional as bnbf
import torch

from assay.storage import FrozenLinear, NF4Weight

SHAPES = ((576, 576), (1536, 576), (576, 1536))  # (out, in): q/o, gate/up, down


def _best_seconds(fn: Callable[[], object], repeats: int, device: str) -> float:
    """Fastest of ``repeats`` timed calls: on a shared 2-core box the median mostly measures the
    neighbours (OpenMP threads stall when another process holds a core)."""
    for _ in range(3):  # warm-up (first calls pay one-off kernel and thread-pool setup)
        fn()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return min(times)


def dequant_rates(shape: tuple[int, int], repeats: int, device: str) -> dict[str, float]:
    """M params/s for bnb's whole-matrix dequant and for assay's tiled decode of the same bytes."""
    weight = torch.randn(*shape, device=device)
    packed, state = bnbf.quantize_4bit(
        weight, blocksize=64, quant_type="nf4", compress_statistics=True
    )
    store = NF4Weight(weight, double_quant=True).to(device)
    linear = FrozenLinear(store)
    n = weight.numel() / 1e6
    bnb_s = _best_seconds(lambda: bnbf.dequantize_4bit(packed, state), repeats, device)

    def tiled() -> None:
        for start in range(0, shape[0], linear.tile_rows):
            store.rows(start, min(start + linear.tile_rows, shape[0]), torch.float32)

    ours_s = _best_seconds(tiled, repeats, device)
    return {"bnb_dequant_mparams_s": n / bnb_s, "assay_dequant_mparams_s": n / ours_s}


def linear_times(
    shape: tuple[int, int], tokens: int, repeats: int, device: str
) -> dict[str, float]:
    """Best ms of forward+backward (gradient to the input) for NF4 and float32 linears."""
    dense = torch.nn.Linear(shape[1], shape[0], bias=False).to(device).requires_grad_(False)
    nf4 = FrozenLinear(NF4Weight(dense.weight, double_quant=True).to(device))
    x = torch.randn(tokens, shape[1], device=device, requires_grad=True)

    def step(layer: torch.nn.Module) -> Callable[[], None]:
        def run() -> None:
            x.grad = None
            layer(x).sum().backward()

        return run

    nf4_s = _best_seconds(step(nf4), repeats, device)
    float_s = _best_seconds(step(dense), repeats, device)
    return {
        "nf4_fwd_bwd_ms": nf4_s * 1e3,
        "float32_fwd_bwd_ms": float_s * 1e3,
        "ratio": nf4_s / float_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    results = {
        "environment": {
            "torch": torch.__version__,
            "bitsandbytes": bitsandbytes.__version__,
            "cpu": platform.processor() or platform.machine(),
            "threads": torch.get_num_threads(),
            "device": args.device,
            "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
        },
        "tokens": args.tokens,
        "repeats": args.repeats,
        "shapes": [],
    }
    for shape in SHAPES:
        entry = {"out": shape[0], "in": shape[1]}
        entry.update(dequant_rates(shape, args.repeats, args.device))
        entry.update(linear_times(shape, args.tokens, args.repeats, args.device))
        results["shapes"].append(entry)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
