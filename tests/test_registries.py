"""Methods, storages and model families are asked, never named: outside their registries no code
compares a method, storage or family with one of their names; it reads the registered entry's
attributes. ``model/hf_fields.py`` is the table of config.json keys each family's transformers
config reads, by family name, so it counts as a registry here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from assay.model.families import FAMILIES, WINDOW_READINGS
from assay.model.families import NAMES as FAMILY_NAMES
from assay.settings.methods import METHODS, NAMES, from_peft_flags
from assay.settings.storages import STORAGE_ENTRIES, STORAGES

PRODUCT = Path(__file__).resolve().parents[1] / "src" / "assay"
REGISTRIES = {
    "settings/methods.py",
    "settings/storages.py",
    "model/families.py",
    "model/hf_fields.py",
}
KNOWN = set(NAMES) | set(STORAGES) | set(FAMILY_NAMES)


def _names(node: ast.AST) -> set[str]:
    """The string constants ``node`` is or holds (a tuple, list or set of them)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_names(e) for e in node.elts)) if node.elts else set()
    return set()


def name_comparisons(source: str, where: str = "<text>") -> list[str]:
    """``where:line`` of every ==, !=, in or not in between something and a method, storage or
    family name (or a collection of them)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        if any(_names(side) & KNOWN for side in sides):
            found.append(f"{where}:{node.lineno}")
    return found


def test_no_method_storage_or_family_is_compared_by_name_outside_the_registries():
    found = []
    for path in sorted(PRODUCT.rglob("*.py")):
        if path.relative_to(PRODUCT).as_posix() not in REGISTRIES:
            found += name_comparisons(path.read_text("utf-8"), str(path.relative_to(PRODUCT)))
    assert found == []


@pytest.mark.parametrize(
    "text",
    [
        'if spec.method == "full": pass',
        'x = storage != "float32"',
        'ok = method in ("lora_fa", "tinylora")',
        'ok = plan["storage"] not in {"bf16", "nf4"}',
        'if config.architecture == "gemma3_text": pass',
        'scaled = arch in ("granite",)',
    ],
)
def test_the_check_finds_a_comparison_by_name(text):
    """Control: each way of naming a method, storage or family in a comparison is caught."""
    assert name_comparisons(text) == ["<text>:1"]


def test_every_entry_is_consistent():
    for entry in METHODS.values():
        if entry.trains_base:
            assert entry.saved_as is None and not entry.peft
        if entry.svd_basis:
            assert not entry.first_factor_trains
    assert [s for s in STORAGE_ENTRIES.values() if s.keeps_parameters] == [
        STORAGE_ENTRIES["float32"]
    ]
    for family in FAMILIES.values():
        assert family.window_reading in WINDOW_READINGS
        assert family.qk_norm in (None, "per_head", "whole")
        assert family.activation in ("silu", "gelu_tanh")
        assert family.layout_of is None or family.layout_of in FAMILIES
        assert family.default_window is None or family.window_reading == "every_layer"
        assert not family.permuted_gguf or family.gguf


@pytest.mark.parametrize("name", [n for n, m in METHODS.items() if m.peft])
def test_peft_flags_read_back_to_the_method_peft_stores(name):
    """LoRA-FA and LoRA+ are stored as LoRA (which factor trains, and at what rate, is the
    optimizer's business, which adapter_config.json does not hold); every other PEFT method
    reads back as itself."""
    expected = "lora" if name in ("lora_fa", "loraplus") else name
    assert from_peft_flags(METHODS[name].peft_flags()) == expected
