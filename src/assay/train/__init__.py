"""Training: data and masks, losses, checkpoints, and the loop that combines them.

Each piece stands alone and is tested on its own; ``assay.train.loop.Trainer`` (also
``assay.Trainer``) runs a config (:mod:`assay.settings`) end to end. The names below load on
first use, so a sub-module that needs no torch imports without it.
"""

from __future__ import annotations

from assay.lazy import lazy_attributes

_LAZY = {
    "Batch": "assay.train.data.dataset",
    "BatchIterator": "assay.train.data.dataset",
    "Checkpoint": "assay.train.checkpoint.directory",
    "CheckpointError": "assay.train.checkpoint.directory",
    "Cursor": "assay.train.data.dataset",
    "DataError": "assay.train.data.dataset",
    "Dataset": "assay.train.data.dataset",
    "chunked_cross_entropy": "assay.train.losses",
    "collate": "assay.train.data.dataset",
    "cross_entropy": "assay.train.losses",
    "dataset_fingerprint": "assay.train.data.dataset",
    "load_checkpoint": "assay.train.checkpoint.directory",
    "load_dataset": "assay.train.data.dataset",
    "save_checkpoint": "assay.train.checkpoint.directory",
    # kept where code written before the settings package looks for them
    "TrainConfig": "assay.settings",
    "config_fingerprint": "assay.settings.loader",
    "load_train_config": "assay.settings.loader",
    "PeakMeasurement": "assay.memory.peak",
    "measure_peak": "assay.memory.peak",
}

__all__ = sorted(_LAZY)
__getattr__ = lazy_attributes(__name__, _LAZY)
