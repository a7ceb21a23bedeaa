"""Which projections an adapter wraps: target groups, explicit names and a layer subset.

Targets resolve to a fixed, sorted list of qualified names (``layers.N.self_attn.q_proj``), so
the same arguments always pick the same modules in the same order and seeded initialisation
is reproducible.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from assay.errors import ConfigError

ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")
GROUPS = {"attention": ATTENTION, "mlp": MLP, "all-linear": ATTENTION + MLP}
# a fused projection (Phi-3's) and the projections it holds, in its row order
FUSED = {"qkv_proj": ATTENTION[:3], "gate_up_proj": MLP[:2]}
PARENT = {
    **dict.fromkeys((*ATTENTION, "qkv_proj"), "self_attn"),
    **dict.fromkeys((*MLP, "gate_up_proj"), "mlp"),
}
# site order within a layer: the adapters' seeded initialisation draws in this order
ORDER: tuple[str, ...]  # of any length: it grows below
ORDER = ("q_proj", "k_proj", "v_proj", "qkv_proj", "o_proj", "gate_proj", "up_proj")
ORDER += ("gate_up_proj", "down_proj")


def target_names(targets: str | Sequence[str], fused: bool = False) -> tuple[str, ...]:
    """Projection names for a group (attention, mlp, all-linear) or an explicit list, as the
    model's layers hold them: with ``fused`` (Phi-3's layout) the projections a fused one holds
    are named by it, and must be targeted all together (PEFT can only wrap it whole)."""
    if isinstance(targets, str):
        targets = GROUPS.get(targets, [targets])
    names = list(targets)
    unknown = [n for n in names if n not in PARENT]
    if unknown or not names:
        raise ConfigError(
            f"targets: unknown projection(s) {unknown or names!r}; expected a group "
            f"({', '.join(GROUPS)}) or names from {', '.join(PARENT)}"
        )
    chosen = set(names)
    for whole, held in FUSED.items():
        asked = chosen & set(held)
        if fused and asked:
            if asked != set(held):
                raise ConfigError(
                    f"targets: this model holds {', '.join(held)} in one {whole}; target all "
                    f"of them (or {whole}), not {', '.join(sorted(asked, key=ORDER.index))} alone"
                )
            chosen = (chosen - asked) | {whole}
        elif not fused and whole in chosen:
            raise ConfigError(
                f"targets: {whole} is a fused projection (Phi-3's); this model holds "
                f"{', '.join(held)} apart: name them"
            )
    return tuple(sorted(chosen, key=ORDER.index))


def projection_parts(names: Sequence[str]) -> tuple[str, ...]:
    """``names`` with each fused projection replaced by the projections it holds: the names a
    shape-only account (the memory predictor, the FLOP count) sizes."""
    out = [part for name in names for part in FUSED.get(name, (name,))]
    return tuple(sorted(set(out), key=ORDER.index))


def layer_indices(num_layers: int, layers: Iterable[int] | None) -> tuple[int, ...]:
    """Sorted unique layer indices; None means every layer."""
    if layers is None:
        return tuple(range(num_layers))
    chosen = sorted({int(i) for i in layers})
    bad = [i for i in chosen if not 0 <= i < num_layers]
    if bad or not chosen:
        raise ConfigError(f"layers: {bad or chosen!r} out of range; the model has {num_layers}")
    return tuple(chosen)


def qualified_name(layer: int, projection: str) -> str:
    return f"layers.{layer}.{PARENT[projection]}.{projection}"
