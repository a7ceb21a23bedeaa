"""Training: data and masks, losses, checkpoints, and the loop that combines them.

Each piece stands alone and is tested on its own; ``assay.train.loop.Trainer`` (also
``assay.Trainer``) runs a config (:mod:`assay.settings`) end to end. The names below load on
first use, so a sub-module that needs no torch imports without it.
"""

from __future__ import annotations

from assay.lazy import lazy_attributes

_LAZY = {
    "Batch": "assay.train.data",
    "BatchIterator": "assay.train.data",
    "Checkpoint": "assay.train.checkpoint",
    "CheckpointError": "assay.train.checkpoint",
    "Cursor": "assay.train.data",
    "DataError": "assay.train.data",
    "Dataset": "assay.train.data",
    "chunked_cross_entropy": "assay.train.losses",
    "collate": "assay.train.data",
    "cross_entropy": "assay.train.losses",
    "dataset_fingerprint": "assay.train.data",
    "load_checkpoint": "assay.train.checkpoint",
    "load_dataset": "assay.train.data",
    "save_checkpoint": "assay.train.checkpoint",
    # kept where code written before the settings package looks for them
    "TrainConfig": "assay.settings",
    "config_fingerprint": "assay.settings.loader",
    "load_train_config": "assay.settings.loader",
    "PeakMeasurement": "assay.memory.peak",
    "measure_peak": "assay.memory.peak",
}

__all__ = sorted(_LAZY)
__getattr__ = lazy_attributes(__name__, _LAZY)
