"""assay.memory: owned-byte accounting (this package), peak prediction and measurement."""

from assay.memory.accounting import owned_bytes, packed_parameter_count

__all__ = ["owned_bytes", "packed_parameter_count"]
