"""assay.stream: layer streaming from a RAM or disk tier through a few device slots."""

from assay.stream.engine import TIERS, StreamedModel
from assay.stream.pool import SlotPool, StreamError

__all__ = ["TIERS", "SlotPool", "StreamError", "StreamedModel"]
