"""One cell of the claim matrix named by what differs from the plainest run (not a gate module):
for gates that claim a single combination through the matrix's runner. Plain: tiny llama, LoRA,
float32 storage and precision, resident, one micro-batch, eager, CE, straight through, one
process."""

from __future__ import annotations

PLAIN = {
    "family": "llama",
    "method": "lora",
    "storage": "float32",
    "residency": "resident",
    "micro_batches": "1",
    "precision": "float32",
    "compile": "eager",
    "loss": "ce",
    "interruption": "straight",
    "distributed": "single",
}


def plain_cell(**changes: str) -> dict[str, str]:
    """The plain cell with ``changes`` (axis name -> value); an unknown axis is a KeyError."""
    unknown = sorted(set(changes) - set(PLAIN))
    if unknown:
        raise KeyError(f"no axis {', '.join(unknown)}; the axes are {', '.join(PLAIN)}")
    return {**PLAIN, **changes}
