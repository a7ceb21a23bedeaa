"""Imports point one way: each part of the product imports only from layers to its left, the
qualification framework imports nothing of the trainer, and ``qualify`` has no import cycle.

Every import counts, including those inside functions: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

PRODUCT = Path(__file__).resolve().parents[1] / "src" / "assay"

# Left to right; a unit may import itself and any unit of an earlier layer. `memory` sits beside
# the trainer (it models and measures it), `cli` composes everything.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "load_status"),
    ("assay", "atomic", "bounded"),
    ("folder_manifest", "adapter_registry", "storage_registry"),
    ("settings",),
    ("settings_schema",),
    ("model",),
    ("storage",),
    ("loading", "adapters"),
    ("stream",),
    ("train",),
    ("memory", "distributed", "export", "generate_cli", "status_cli"),
    ("info_cli", "train_cli"),
    ("cli",),
)
# The framework stands apart: it may use the package root, the atomic writer and the bounded
# readers, nothing else.
INDEPENDENT = {"qualify": {"assay", "errors", "atomic", "bounded", "qualify"}}
# Inside the framework, bottom to top: a part may import itself and the parts below it, so no
# sub-package of ``assay.qualify`` imports one that imports it back.
QUALIFY_LAYERS = ("core", "ledger", "judging", "publishing", "plugin", "cli_commands")
# Test machinery and benchmarks (testing/, outside the wheel): nothing in the product imports them.
OUTSIDE = {"assay_testing", "assay_bench"}


def _module(path: Path) -> str:
    parts = list(path.relative_to(PRODUCT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path = PRODUCT) -> dict[str, set[str]]:
    """module -> the assay modules (or packages) it imports anywhere in its source."""
    modules = {_module(p): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([base] if base else [])])
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                    for a in node.names
                ]
            else:
                continue
            graph[name].update(t for t in targets if t.split(".")[0] in ("assay", *OUTSIDE))
    return graph


def unit(module: str) -> str:
    """The part of the product a module belongs to: ``assay.train.loop`` -> ``train``."""
    parts = module.split(".")
    if parts[0] != "assay":
        return parts[0]
    return parts[1] if len(parts) > 1 else "assay"


def _layer(name: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if name in layer)


def wrong_way(graph: dict[str, set[str]]) -> list[str]:
    """Every import edge that points right, into the framework from outside, or into test code."""
    found = []
    for source, targets in sorted(graph.items()):
        a = unit(source)
        for target in sorted(targets):
            b = unit(target)
            if a == b or a in OUTSIDE:
                continue
            if b in OUTSIDE:
                bad = True
            elif a in INDEPENDENT:
                bad = b not in INDEPENDENT[a]
            elif b in INDEPENDENT:
                bad = a != "cli"  # only the composition root reaches the framework
            else:
                bad = _layer(b) >= _layer(a)
            if bad:
                found.append(f"{source} -> {target}")
    return found


def qualify_part(module: str) -> str | None:
    """The framework layer of a module: ``assay.qualify.ledger.chain`` -> ``ledger``."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["assay", "qualify"] and len(parts) > 2 else None


def qualify_wrong_way(graph: dict[str, set[str]]) -> list[str]:
    """Every import edge inside ``assay.qualify`` that points up its layers."""
    found = []
    for source, targets in sorted(graph.items()):
        a = qualify_part(source)
        for target in sorted(targets):
            b = qualify_part(target)
            if a is None or b is None or a == b:
                continue
            if QUALIFY_LAYERS.index(b) > QUALIFY_LAYERS.index(a):
                found.append(f"{source} -> {target}")
    return found


def cycles(graph: dict[str, set[str]], prefix: str) -> list[list[str]]:
    """Import cycles among modules under ``prefix`` (each reported once, from its least name)."""
    nodes = {m for m in graph if m.startswith(prefix)}
    found: list[list[str]] = []

    def walk(path: list[str]) -> None:
        for nxt in sorted(graph.get(path[-1], ())):
            if nxt == path[0]:
                found.append(path)
            elif nxt in nodes and nxt not in path and nxt > path[0]:
                walk([*path, nxt])

    for start in sorted(nodes):
        walk([start])
    return found


def test_every_unit_has_a_place():
    units = {unit(m) for m in import_graph()}
    placed = {u for layer in LAYERS for u in layer} | set(INDEPENDENT) | OUTSIDE
    assert sorted(units - placed) == [], "give the new part of the product a layer"


def test_imports_point_one_way():
    assert wrong_way(import_graph()) == []


def test_every_qualify_module_has_a_layer():
    parts = {qualify_part(m) for m in import_graph()} - {None}
    assert sorted(parts - set(QUALIFY_LAYERS)) == [], "give the new part of qualify a layer"


def test_qualify_layers_point_down():
    assert qualify_wrong_way(import_graph()) == []


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ({"assay.qualify.ledger.receipt": {"assay.qualify.judging.standing"}}, 1),
        ({"assay.qualify.judging.standing": {"assay.qualify.plugin.assemble"}}, 1),
        ({"assay.qualify.judging.verify": {"assay.qualify.publishing.index"}}, 1),
        ({"assay.qualify.core.threshold": {"assay.qualify.ledger.receipt"}}, 1),
        ({"assay.qualify.plugin.session": {"assay.qualify.publishing.index"}}, 0),
        ({"assay.qualify.publishing.verify": {"assay.qualify.ledger.history"}}, 0),
    ],
)
def test_the_qualify_check_catches_an_upward_import(edges, expected):
    assert len(qualify_wrong_way(edges)) == expected


def test_qualify_has_no_import_cycle():
    assert cycles(import_graph(), "assay.qualify") == []


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        (
            {"assay.model.decoder": {"assay.train.loop"}},
            ["assay.model.decoder -> assay.train.loop"],
        ),
        ({"assay.storage.nf4": {"assay.storage.apply"}}, []),
        ({"assay.train.loop": {"assay.stream.engine"}}, []),
        (
            {"assay.stream.engine": {"assay.memory.predict"}},
            ["assay.stream.engine -> assay.memory.predict"],
        ),
        (
            {"assay.qualify.plugin.gate": {"assay.model"}},
            ["assay.qualify.plugin.gate -> assay.model"],
        ),
        (
            {"assay": {"assay.qualify.plugin.child_imports"}},
            ["assay -> assay.qualify.plugin.child_imports"],
        ),
        ({"assay.train.loop": {"assay_testing.tiny"}}, ["assay.train.loop -> assay_testing.tiny"]),
        ({"assay.cli": {"assay_bench.step"}}, ["assay.cli -> assay_bench.step"]),
    ],
)
def test_the_check_catches_a_wrong_way_import(edges, expected):
    assert wrong_way(edges) == expected


def test_the_cycle_check_catches_a_cycle():
    graph = {"assay.qualify.a": {"assay.qualify.b"}, "assay.qualify.b": {"assay.qualify.a"}}
    assert cycles(graph, "assay.qualify") == [["assay.qualify.a", "assay.qualify.b"]]
