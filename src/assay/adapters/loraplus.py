"""LoRA+: LoRA whose B factor learns ``lr_ratio`` times faster than its A factor.

The forward, the files and the memory are LoRA's (it saves as a PEFT LoRA adapter). Only the
optimizer differs: ``lora_B`` sits in a parameter group whose learning rate is ``lr_ratio``
times the run's, as PEFT's ``create_loraplus_optimizer`` builds it.
"""

from __future__ import annotations

from torch import nn

from assay.adapters.lora import LoRALinear


class LoRAPlusLinear(LoRALinear):
    """A LoRA adapter that asks the optimizer for ``lr_ratio`` times the learning rate on B."""

    def __init__(self, base: nn.Module, *, lr_ratio: float, **lora: object) -> None:
        super().__init__(base, **lora)  # type: ignore[arg-type]
        self.lr_ratio = float(lr_ratio)

    @classmethod
    def wrap(cls, base, *, method, options, generator, shared):
        return cls(
            base,
            method=method,
            generator=generator,
            rank=options["rank"],
            alpha=options["alpha"],
            dropout=options["dropout"],
            lr_ratio=options["lr_ratio"],
        )

    def learning_rate_scales(self) -> dict[str, float]:
        return {"lora_B": self.lr_ratio}

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, lr_ratio={self.lr_ratio}"
