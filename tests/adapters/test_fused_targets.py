"""Targets on Phi-3's fused layout: a fused projection (qkv_proj, gate_up_proj) is wrapped whole,
as PEFT wraps it, named by itself or by all of its parts; a part alone is refused, naming the
projection that holds it; and a fused name is refused on a model that holds the parts apart."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from assay.adapters.inject import FUSED, ORDER, projection_parts, target_names
from assay.errors import ConfigError


def test_groups_resolve_to_the_fused_projections():
    assert target_names("attention", fused=True) == ("qkv_proj", "o_proj")
    assert target_names("mlp", fused=True) == ("gate_up_proj", "down_proj")
    assert target_names("all-linear", fused=True) == (
        "qkv_proj",
        "o_proj",
        "gate_up_proj",
        "down_proj",
    )
    assert target_names(["v_proj", "k_proj", "q_proj"], fused=True) == ("qkv_proj",)
    assert target_names(["qkv_proj", "q_proj", "k_proj", "v_proj"], fused=True) == ("qkv_proj",)


def test_a_part_alone_is_refused_naming_its_fused_projection():
    with pytest.raises(ConfigError, match=r"one qkv_proj.*not q_proj, v_proj alone"):
        target_names(["q_proj", "v_proj"], fused=True)
    with pytest.raises(ConfigError, match=r"one gate_up_proj.*not up_proj alone"):
        target_names(["up_proj"], fused=True)


def test_a_fused_name_is_refused_where_the_parts_are_apart():
    with pytest.raises(ConfigError, match="qkv_proj is a fused projection"):
        target_names(["qkv_proj"])
    assert target_names("all-linear") == (*ORDER[:3], "o_proj", "gate_proj", "up_proj", "down_proj")


@given(st.sets(st.sampled_from(ORDER), min_size=1), st.booleans())
def test_every_target_set_resolves_to_modules_of_its_layout_or_is_refused(names, fused):
    """The invariant: a resolved name is a module the layout holds, each part asked for is
    covered, and nothing is wrapped that was not asked for (a fused projection only when all
    of its parts, or itself, were named)."""
    try:
        resolved = target_names(sorted(names), fused)
    except ConfigError:
        partial = any(0 < len(names & set(parts)) < len(parts) for parts in FUSED.values())
        assert (fused and partial) or (not fused and names & set(FUSED))
        return
    held = set(ORDER) - (set(sum(FUSED.values(), ())) if fused else set(FUSED))
    assert set(resolved) <= held
    assert set(projection_parts(resolved)) == set(projection_parts(sorted(names)))
