"""Training beyond one process: torchrun + torch.distributed (DDP, FSDP2), nothing home-made.

- :mod:`.context`: rank, world size and the process group (gloo on CPU, NCCL on CUDA).
- :mod:`.sampler`: each step's global rows, sliced deterministically by rank.
- :mod:`.wrap`: DDP and FSDP2 wrapping, and ``local_base_bytes``, the probe of what a rank
  really holds.
- :mod:`.state`: sharded state <-> the full, world-size-free checkpoint.
- :mod:`.trainer`: :class:`DistributedTrainer`, the loop on top of them.

Importing this package imports torch but starts nothing; ``assay train`` uses it only when
launched by torchrun.
"""

from assay.distributed.context import DistContext, init, launched
from assay.distributed.sampler import ShardedBatches, check_divisible, rank_slice
from assay.distributed.wrap import STRATEGIES, full_base_bytes, local_base_bytes

__all__ = [
    "STRATEGIES",
    "DistContext",
    "ShardedBatches",
    "check_divisible",
    "full_base_bytes",
    "init",
    "launched",
    "local_base_bytes",
    "rank_slice",
]
