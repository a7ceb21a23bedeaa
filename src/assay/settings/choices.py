"""The closed vocabularies of a train config: storages, projections, row formats, losses."""

from __future__ import annotations

from assay.settings.storages import STORAGES

__all__ = ["STORAGES"]  # the storage registry's names, re-exported for the settings

# the fused two (qkv_proj, gate_up_proj) are Phi-3's: a model holds either them or their parts
PROJECTIONS: tuple[str, ...]  # of any length: it grows below
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
PROJECTIONS += ("qkv_proj", "gate_up_proj")
DEFAULT_TARGETS = PROJECTIONS[:4]
# the decoder's matrix-product precision: float32, or bfloat16 under torch.autocast
PRECISIONS = ("float32", "bf16")
FORMATS = ("auto", "text", "prompt_completion", "messages", "preference", "kto")
PREFERENCE_LOSSES = ("dpo", "ipo", "orpo", "simpo")
LOSSES = ("ce", "chunked_ce", *PREFERENCE_LOSSES, "kto")
# preference losses with no reference policy; the others compare with the adapters switched off
REFERENCE_FREE_LOSSES = ("orpo", "simpo")
SIZE_UNITS = ("B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB")
