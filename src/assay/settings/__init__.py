"""The settings tree: every training setting's type, default, bounds and one-line help, once.

One frozen dataclass per section of a train config (``trains``: adapter, data, loss; ``run``:
the rest). Each field carries a ``Rule`` (in its metadata) from which
``assay.settings.schema`` generates the JSON Schema, the settings table in the docs, ``assay
train --help``'s list of keys and ``config_as_yaml``'s choice of keys; ``assay.settings.loader``
fills every default from here, and the CLI's ``--storage`` and ``--strategy`` take their
choices from here. Adapter options and their defaults are the adapter registry's. It imports
no torch, so the memory predictor reads its defaults too.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from assay.settings.choices import (
    DEFAULT_TARGETS,
    FORMATS,
    LOSSES,
    PREFERENCE_LOSSES,
    PROJECTIONS,
    SIZE_UNITS,
    STORAGES,
)
from assay.settings.rule import Rule, section, setting
from assay.settings.run import (
    BatchConfig,
    DistributedConfig,
    OptimConfig,
    OutputConfig,
    StreamConfig,
    TrainConfig,
)
from assay.settings.training import AdapterConfig, DataConfig, LossConfig

__all__ = [
    "DEFAULT_TARGETS",
    "FORMATS",
    "LOSSES",
    "PREFERENCE_LOSSES",
    "PROJECTIONS",
    "SIZE_UNITS",
    "STORAGES",
    "AdapterConfig",
    "BatchConfig",
    "DataConfig",
    "DistributedConfig",
    "LossConfig",
    "OptimConfig",
    "OutputConfig",
    "Rule",
    "StreamConfig",
    "TrainConfig",
    "default",
    "rule",
    "rules",
    "section",
    "section_class",
    "setting",
]


def rules(cls: type) -> dict[str, Rule]:
    """Every setting of section ``cls`` by key, in declaration order (``source`` is none)."""
    return {f.name: f.metadata["rule"] for f in dataclasses.fields(cls) if "rule" in f.metadata}


def section_class(cls: type, key: str) -> type | None:
    """The dataclass of ``cls``'s section ``key``; None for a plain setting."""
    return next(f.metadata.get("section") for f in dataclasses.fields(cls) if f.name == key)


def rule(path: str) -> Rule:
    """The rule of the dotted key ``path`` (``"distributed.strategy"``); KeyError if unknown."""
    cls: type = TrainConfig
    *parents, leaf = path.split(".")
    for part in parents:
        found = section_class(cls, part)
        if found is None:
            raise KeyError(path)
        cls = found
    return rules(cls)[leaf]


def default(path: str, selector: str | None = None) -> Any:
    """The default of the dotted key ``path`` (under ``selector`` for selector-dependent keys)."""
    found = rule(path)
    if found.applies is None:
        return found.default
    return found.default_for(selector)
