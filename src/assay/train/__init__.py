"""Training: config, data and masks, losses, checkpoints, and the loop that combines them.

Each piece stands alone and is tested on its own; ``assay.train.loop.Trainer`` (also
``assay.Trainer``) runs a config end to end.
"""

from assay.train.checkpoint import Checkpoint, CheckpointError, load_checkpoint, save_checkpoint
from assay.train.config import TrainConfig, config_fingerprint, load_train_config
from assay.train.data import (
    Batch,
    BatchIterator,
    Cursor,
    DataError,
    Dataset,
    collate,
    dataset_fingerprint,
    load_dataset,
)
from assay.train.losses import chunked_cross_entropy, cross_entropy
from assay.train.peak import PeakMeasurement, measure_peak

__all__ = [
    "Batch",
    "BatchIterator",
    "Checkpoint",
    "CheckpointError",
    "Cursor",
    "DataError",
    "Dataset",
    "PeakMeasurement",
    "TrainConfig",
    "chunked_cross_entropy",
    "collate",
    "config_fingerprint",
    "cross_entropy",
    "dataset_fingerprint",
    "load_checkpoint",
    "load_dataset",
    "load_train_config",
    "measure_peak",
    "save_checkpoint",
]
