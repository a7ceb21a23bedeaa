"""Device peaks measured in a fresh interpreter on CUDA (``python -m assay_bench.cuda_peaks``).

Two measurements, each one JSON request on stdin and one JSON line on stdout:

- ``{"kind": "plan", "plan": {...}}``: a memory-model plan (``assay.memory.predict.Plan`` as
  a dict) built by ``assay.memory.measure.build_plan_run`` with CUDA as the default device;
  the device peak is static bytes + ``torch.cuda.max_memory_allocated`` of one step after a
  warm-up step (the memory model's ``cuda-allocated`` scope), NVML beside it when available.
- ``{"kind": "depth", "layers": L, "streamed": bool}``: a SmolLM2-shaped decoder of depth L
  with LoRA on attention, resident on the GPU or streamed through 2 slots from pinned RAM; the
  step's allocated peak, plus the bytes that legitimately grow with depth (adapter, grads,
  AdamW state, the layer inputs recompute keeps) so the caller can separate them.

A fresh process per measurement keeps one row's allocator state out of the next row's number.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import torch

SEQ_DEPTH = 256


def measure(request: dict[str, Any], timeout: float = 300) -> dict[str, Any]:
    """Run one request in a child interpreter; ``{"error": ...}`` if it failed."""
    proc = subprocess.run(
        [sys.executable, "-m", "assay_bench.cuda_peaks"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        return {"error": proc.stderr.strip()[-1500:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _plan_peak(plan: dict[str, Any]) -> dict[str, Any]:
    from assay.memory import measure as m

    torch.set_default_device("cuda")  # the run's tensors and optimizer state on the GPU
    step, static, facts = m.build_plan_run(plan)  # includes the warm-up step
    _, peaks = m.cuda_peaks(step)
    out: dict[str, Any] = {"static_bytes": static, **facts}
    for peak in peaks:
        out[peak.scope] = peak.peak_bytes
    out["device_peak_bytes"] = static + out["cuda-allocated"]
    return out


def _depth_peak(layers: int, streamed: bool) -> dict[str, Any]:
    import torch.nn.functional as F

    from assay.adapters import attach
    from assay.stream import StreamedModel
    from assay_testing.tiny import smollm2_shaped

    base = attach(smollm2_shaped(layers), "lora", rank=8, alpha=16, targets="attention")
    runner = StreamedModel(base, buffers=2, device="cuda") if streamed else base.to("cuda")
    params = [p for p in base.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-4)
    ids = torch.randint(0, 49152, (1, SEQ_DEPTH + 1), generator=torch.Generator().manual_seed(0))
    ids = ids.to("cuda")

    def step() -> None:
        logits = runner(ids[:, :-1])
        F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    trainable = sum(p.numel() * p.element_size() for p in params)
    hidden = base.config.hidden_size
    return {
        "layers": layers,
        "streamed": streamed,
        "peak_bytes": torch.cuda.max_memory_allocated(),
        # parameter + grad + two AdamW moments; the input of each layer recompute keeps
        "depth_state_bytes": 4 * trainable + (layers * SEQ_DEPTH * hidden * 4 if streamed else 0),
        "layer_base_bytes": sum(
            t.numel() * t.element_size() for t in base.layers[0].parameters() if not t.requires_grad
        ),
        "pinned": bool(getattr(getattr(runner, "store", None), "pinned", False)),
    }


def main() -> int:
    request = json.loads(sys.stdin.read())
    if request["kind"] == "plan":
        out = _plan_peak(request["plan"])
    elif request["kind"] == "depth":
        out = _depth_peak(int(request["layers"]), bool(request["streamed"]))
    else:
        raise SystemExit(f"unknown request kind {request['kind']!r}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
