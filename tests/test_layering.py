"""The product's shape: imports point one way, nothing imports itself back, and the root
holds only what both halves share.

- Each part of the product imports only from layers to its left (model -> storage ->
  adapters -> stream -> train), the qualification framework imports nothing of the trainer,
  and ``qualify``'s own parts point down. Every import counts here, including those inside
  functions: a lazy import is still a dependency.
- No module-level import cycle anywhere in the product, and no circle between its packages
  (counting every import, as the layers do).
- The package root holds at most 8 modules beside its packages, and none of them is a command,
  a registry or a schema.
- Settings, the registries and the memory predictor import without torch.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

PRODUCT = Path(__file__).resolve().parents[1] / "src" / "assay"

# Left to right; a unit may import itself and any unit of an earlier layer. `memory` sits beside
# the trainer (it models and measures it), `cli` composes everything.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors",),
    ("assay", "atomic", "bounded", "digest", "lazy"),
    ("settings",),  # with the method and storage registries: no torch
    ("model",),
    ("storage",),
    ("adapters",),
    ("stream",),
    ("train",),
    ("memory", "distributed"),
    ("cli",),
)
# The framework stands apart: it may use the package root, the atomic writer, the bounded
# readers, the file digests and the lazy package attributes, nothing else.
INDEPENDENT = {"qualify": {"assay", "errors", "atomic", "bounded", "digest", "lazy", "qualify"}}
# Inside the framework, bottom to top: a part may import itself and the parts below it, so no
# sub-package of ``assay.qualify`` imports one that imports it back.
QUALIFY_LAYERS = ("core", "ledger", "judging", "publishing", "plugin", "cli_commands")
# At most this many modules directly in src/assay, none of them a command, a registry or a
# schema: the root holds what both halves share (errors, atomic writes, bounded reads, file
# digests).
ROOT_MODULES_AT_MOST = 8
NOT_AT_ROOT = re.compile(r"(_cli|cli|_registry|registry|_schema|schema)$")
# Test machinery and benchmarks (testing/, outside the wheel): nothing in the product imports them.
OUTSIDE = {"assay_testing", "assay_bench"}


def _module_level_imports(node: ast.AST) -> list[ast.stmt]:
    """The import statements a module runs when it is imported: at top level, and inside
    top-level ``if``/``try`` blocks, but not under ``if TYPE_CHECKING`` or in a function."""
    found: list[ast.stmt] = []
    for stmt in getattr(node, "body", []):
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            found.append(stmt)
        elif isinstance(stmt, ast.If):
            if "TYPE_CHECKING" not in ast.unparse(stmt.test):
                found += _module_level_imports(stmt) + _module_level_imports(
                    ast.Module(body=stmt.orelse, type_ignores=[])
                )
        elif isinstance(stmt, ast.Try):
            for block in (stmt.body, *(h.body for h in stmt.handlers), stmt.orelse):
                found += _module_level_imports(ast.Module(body=block, type_ignores=[]))
    return found


def _module(path: Path) -> str:
    parts = list(path.relative_to(PRODUCT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path = PRODUCT, *, module_level: bool = False) -> dict[str, set[str]]:
    """module -> the assay modules (or packages) it imports anywhere in its source (only at
    import time with ``module_level``). ``from package import name`` counts as an import of
    ``package.name`` when that is a module, else of ``package`` (whose ``__init__`` runs)."""
    modules = {_module(p): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        tree = ast.parse(path.read_text("utf-8"))
        nodes = _module_level_imports(tree) if module_level else ast.walk(tree)
        for node in nodes:
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


def test_no_module_level_import_cycle_in_the_product():
    assert cycles(import_graph(module_level=True), "assay") == []


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The import graph between the product's parts (``unit``), every import counted."""
    found: dict[str, set[str]] = defaultdict(set)
    for source, targets in graph.items():
        for target in targets:
            if unit(source) != unit(target):
                found[f"assay.{unit(source)}"].add(f"assay.{unit(target)}")
    return found


def test_no_import_circle_between_packages():
    assert cycles(package_graph(import_graph()), "assay") == []


def test_the_package_circle_check_catches_a_circle_through_modules():
    graph = {
        "assay.adapters.lora": {"assay.settings.training"},
        "assay.settings.training": {"assay.adapters.attachment"},
    }
    assert cycles(package_graph(graph), "assay") == [["assay.adapters", "assay.settings"]]


def test_module_level_imports_skip_functions_and_type_checking():
    source = (
        "import a\nif TYPE_CHECKING:\n    import b\ntry:\n    import c\nexcept E:\n"
        "    import d\ndef f():\n    import e\n"
    )
    found = [ast.unparse(n) for n in _module_level_imports(ast.parse(source))]
    assert found == ["import a", "import c", "import d"]


def root_layout(root: Path = PRODUCT) -> list[str]:
    """What is wrong with the package root: too many modules, or one that belongs in a package."""
    modules = sorted(p.stem for p in root.glob("*.py"))
    found = [f"{name}.py belongs in a package" for name in modules if NOT_AT_ROOT.search(name)]
    if len(modules) > ROOT_MODULES_AT_MOST:
        found.append(f"{len(modules)} modules at the root (at most {ROOT_MODULES_AT_MOST})")
    return found


def test_the_root_holds_only_what_both_halves_share():
    assert root_layout() == []


def test_the_root_check_catches_a_command_a_registry_and_a_crowd(tmp_path):
    for name in ("a_cli", "storage_registry", "settings_schema", *"bcdefg"):
        (tmp_path / f"{name}.py").write_text("")
    assert root_layout(tmp_path) == [
        "a_cli.py belongs in a package",
        "settings_schema.py belongs in a package",
        "storage_registry.py belongs in a package",
        "9 modules at the root (at most 8)",
    ]


# Importing these must not load torch: config checking, planning and the registries run
# without the trainer's heavy dependencies.
TORCH_FREE = (
    "assay.settings",
    "assay.settings.loader",
    "assay.settings.schema",
    "assay.settings.methods",
    "assay.settings.storages",
    "assay.memory.predict",
    "assay.memory.plan",
    "assay.model.config",
    "assay.model.shapes",
    "assay.cli.commands",
)


@pytest.mark.parametrize("module", TORCH_FREE)
def test_settings_registries_and_memory_import_without_torch(module):
    code = f"import sys, {module}; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_the_torch_free_check_sees_torch():
    code = "import sys, assay.adapters.lora; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "True"
