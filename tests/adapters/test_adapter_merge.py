"""merge / unmerge: the merged linear computes the adapted function; NF4 merge is refused."""

from __future__ import annotations

import pytest
import torch

from assay.adapters import adapter_modules, attach, disable, merge, unmerge
from assay.adapters.perturb import randomize_adapters
from assay.errors import ConfigError

TOLERANCE = 1e-4  # one fp32 rounding of W + delta W, carried through two layers


@pytest.mark.parametrize("method", ["lora", "rslora", "lora_fa", "dora", "tinylora"])
def test_merge_then_unmerge(fresh, ids, method):
    model = fresh()
    with torch.no_grad():
        base = model(ids)
        randomize_adapters(attach(model, method, rank=4, targets="all-linear"), seed=5)
        adapted = model(ids)
        merge(model)
        assert all(a.merged for _, a in adapter_modules(model))
        assert (model(ids) - adapted).abs().max() <= TOLERANCE
        with pytest.raises(ConfigError, match="cannot disable a merged adapter"):
            disable(model)
        unmerge(model)
        assert (model(ids) - adapted).abs().max() <= TOLERANCE
        disable(model)
        assert (model(ids) - base).abs().max() <= TOLERANCE


def test_merge_into_nf4_is_refused_and_leaves_nothing_merged(fresh):
    model = attach(fresh("nf4"), "lora", rank=4)
    with pytest.raises(ConfigError, match="merge needs float32 storage"):
        merge(model)
    assert not any(a.merged for _, a in adapter_modules(model))
