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
PARENT = {**dict.fromkeys(ATTENTION, "self_attn"), **dict.fromkeys(MLP, "mlp")}


def target_names(targets: str | Sequence[str]) -> tuple[str, ...]:
    """Projection names for a group (attention, mlp, all-linear) or an explicit list."""
    if isinstance(targets, str):
        if targets in GROUPS:
            return GROUPS[targets]
        targets = [targets]
    names = list(targets)
    unknown = [n for n in names if n not in PARENT]
    if unknown or not names:
        raise ConfigError(
            f"targets: unknown projection(s) {unknown or names!r}; expected a group "
            f"({', '.join(GROUPS)}) or names from {', '.join(PARENT)}"
        )
    order = ATTENTION + MLP
    return tuple(sorted(set(names), key=order.index))


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
