"""What the settings tree generates: the train-config JSON Schema, the settings table of the
docs, the key list of ``assay train --help``, and the YAML mapping of a loaded config.

Nothing here is written by hand twice: a test regenerates the shipped schema files and
``docs/settings.md`` and fails on any difference (``python -m assay.settings.schema --write``
rewrites them).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from pathlib import Path
from typing import Any, cast

from assay.settings import SIZE_UNITS, STORAGES, Rule, TrainConfig, rules, section_class
from assay.settings.methods import NAMES as METHOD_NAMES

SCHEMA_ID = "assay.train-config/1"
SCHEMA_DESCRIPTION = (
    "One YAML file describes one training run. Relative paths are relative to the config "
    "file's directory. Omitted optional fields take the defaults named here (assay.settings.loader "
    "fills them). Generated from assay.settings; do not edit by hand."
)
SIZE_PATTERN = r"^\s*[0-9]+(\.[0-9]+)?\s*(" + "|".join(SIZE_UNITS) + r")?\s*$"
_BOUNDS = (
    ("minimum", "minimum"),
    ("exclusive_minimum", "exclusiveMinimum"),
    ("maximum", "maximum"),
    ("exclusive_maximum", "exclusiveMaximum"),
    ("min_length", "minLength"),
    ("min_items", "minItems"),
    ("max_items", "maxItems"),
)


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def default_words(found: Rule) -> str:
    """The default as the docs say it."""
    if found.default_text is not None:
        return found.default_text
    value = found.default
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _description(found: Rule) -> str:
    text = found.help
    if found.where() is not None:
        text = f"{found.where()} only: {text}"
    if not found.required and found.kind != "section":
        text += f" Default: {default_words(found)}."
    return text


def _leaf(found: Rule) -> dict[str, Any]:
    node: dict[str, Any] = {"description": _description(found)}
    if found.choices is not None:
        node["enum"] = [*found.choices, *([None] if found.nullable else [])]
    elif found.kind == "size":
        node["type"] = ["integer", "string", "null"]
        node["pattern"] = SIZE_PATTERN
    else:
        node["type"] = [found.kind, "null"] if found.nullable else found.kind
    for attr, keyword in _BOUNDS:
        if getattr(found, attr) is not None:
            node[keyword] = getattr(found, attr)
    if found.unique:
        node["uniqueItems"] = True
    if found.items is not None:
        node["items"] = dict(found.items)
    if found.default is not None and found.default_text is None and found.by_selector is None:
        node["default"] = _plain(found.default)
    return node


def _object(cls: type, found: Rule | None) -> dict[str, Any]:
    node: dict[str, Any] = {}
    if found is not None:
        node["description"] = found.help
        node["type"] = ["object", "null"] if found.nullable else "object"
    else:
        node["type"] = "object"
    node["additionalProperties"] = False
    keys = rules(cls)
    required = [k for k, r in keys.items() if r.required]
    if required:
        node["required"] = required
    node["properties"] = {
        # a section's key always has its class
        key: _object(cast(type, section_class(cls, key)), r) if r.kind == "section" else _leaf(r)
        for key, r in keys.items()
    }
    return node


def build_schema() -> dict[str, Any]:
    """The train-config JSON Schema (draft 2020-12), closed at every level."""
    body = _object(TrainConfig, None)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "assay train configuration",
        "description": SCHEMA_DESCRIPTION,
        **body,
    }


def schema_text() -> str:
    """The schema file's exact text."""
    return json.dumps(build_schema(), indent=2) + "\n"


def _rows(cls: type, prefix: str) -> list[tuple[str, Rule]]:
    found: list[tuple[str, Rule]] = []
    for key, r in rules(cls).items():
        found.append((prefix + key, r))
        if r.kind == "section":
            found += _rows(cast(type, section_class(cls, key)), f"{prefix}{key}.")
    return found


def setting_rows() -> list[tuple[str, Rule]]:
    """(dotted key, rule) for every setting and section, in the order the docs list them."""
    return _rows(TrainConfig, "")


def _allowed(found: Rule) -> str:
    if found.choices is not None:
        return " \\| ".join(str(c) for c in found.choices) + (" \\| null" if found.nullable else "")
    parts = {"size": "bytes or a size such as 4GiB"}.get(found.kind, found.kind)
    bounds = []
    for attr, sign in (
        ("minimum", ">="),
        ("exclusive_minimum", ">"),
        ("maximum", "<="),
        ("exclusive_maximum", "<"),
    ):
        if getattr(found, attr) is not None:
            bounds.append(f"{sign} {getattr(found, attr):g}")
    if found.items is not None and "enum" in found.items:
        bounds.append("of " + ", ".join(found.items["enum"]))
    text = parts + (" " + ", ".join(bounds) if bounds else "")
    return text + (", or null" if found.nullable and found.kind != "size" else "")


# How a config's YAML is read (assay.settings.yaml_scalars), under the table of docs/settings.md.
YAML_NOTES = (
    "",
    "## How values are read",
    "",
    "PyYAML reads YAML 1.1, where a few plain values mean something other than what they look",
    "like, and YAML 1.2 reads them differently again. assay never picks one of the two",
    "silently; it refuses the value with one line naming the file, the line and the key, and",
    "says what each YAML version would read and what to write instead:",
    "",
    "- integers are decimal: `steps: 010` (octal 8 in YAML 1.1, 10 in YAML 1.2) is refused, as",
    "  are `0x1F`, `0o17` and `0b101` (write 31, 15, 5); `1_000` is 1000;",
    "- `yes`, `no`, `on` and `off` are booleans only for a boolean setting (`truncate: yes` is",
    "  true); for any other setting they are refused (quote them, `model: 'no'`, for the text);",
    "- a base-60 number such as `1:30` (90 in YAML 1.1, text in YAML 1.2) and a date such as",
    "  `2026-01-01` are refused (write the number, or quote the text);",
    "- floats may be written `1e-4` (YAML 1.1 needs `1.0e-4`); `.nan` and `.inf` are refused.",
    "",
    "Quoted values are always text. Keys are read as written (`yes: 1` is the unknown key",
    "`yes`).",
)


def docs_text() -> str:
    """``docs/settings.md``: one table row per key of a train config."""
    lines = [
        "# Train-config settings",
        "",
        "Generated from `assay.settings` by `python -m assay.settings.schema --write`; a test",
        "fails when this page, the JSON Schema or the code disagree. `assay docs settings`",
        "prints the same page from the installed package.",
        "",
        "| key | accepts | default | applies to | meaning |",
        "|---|---|---|---|---|",
    ]
    for key, found in setting_rows():
        if found.kind == "section":
            kind = "section, or null" if found.nullable else "section"
            needed = "required" if found.required else ""
            lines.append(f"| **`{key}`** | {kind} | {needed} | | {found.help} |")
            continue
        default = _short_default(found)
        where = found.where() or ""
        lines.append(f"| `{key}` | {_allowed(found)} | {default} | {where} | {found.help} |")
    from assay.settings.derived import DOC_NOTES

    return "\n".join([*lines, *YAML_NOTES, *DOC_NOTES]) + "\n"


def help_lines() -> list[str]:
    """One line per top-level key or section for ``assay train --help``: key=default, with
    sections' keys separated by semicolons."""
    out = []
    for key, found in rules(TrainConfig).items():
        if found.kind != "section":
            out.append(f"  {key}: {_short_default(found)}")
            continue
        keys = rules(cast(type, section_class(TrainConfig, key)))
        inner = "; ".join(f"{k}={_short_default(r)}" for k, r in keys.items())
        out.append(f"  {key}{' (optional)' if found.nullable else ''}: {inner}")
    return out


def _short_default(found: Rule) -> str:
    return "required" if found.required else default_words(found)


def yaml_body(config: Any) -> dict[str, Any]:
    """``config`` (a loaded TrainConfig) as a mapping that validates and loads back equal:
    keys that do not apply, and absent optional values, are left out; a null with a meaning
    of its own stays."""
    return _prune(type(config), dataclasses.asdict(config))


def _prune(cls: type, body: dict[str, Any]) -> dict[str, Any]:
    out = {}
    selector = body.get(getattr(cls, "selector", ""))
    for key, found in rules(cls).items():
        value = body[key]
        if found.applies is not None and selector not in found.applies:
            continue
        if value is None and not found.keep_null:
            continue
        if found.kind == "section":
            value = _prune(cast(type, section_class(cls, key)), value)
        out[key] = json.loads(json.dumps(value))
    return out


# the repository's top-level schemas/ is a link to the packaged folder
SCHEMA_FILE = "src/assay/schemas/train-config.schema.json"
DOCS_FILE = "docs/settings.md"


COHORT_FILE = "src/assay/schemas/cohort.schema.json"


def cohort_schema_text() -> str:
    """gate-memory's cohort schema with its ``method`` and ``storage`` enums taken from the
    registries (the rest of the file is written by hand), so a new method or storage is a
    valid cohort entry without editing it."""
    text = (Path(__file__).parents[1] / "schemas" / "cohort.schema.json").read_text("utf-8")
    for key, names in (("method", METHOD_NAMES), ("storage", STORAGES)):
        enum = json.dumps({"enum": list(names)})
        text = re.sub(rf'"{key}": {{"enum": \[[^\]]*\]}}', f'"{key}": {enum}', text)
    return text


def generated_files() -> dict[str, str]:
    """Repository path -> the text the settings tree and the registries generate for it."""
    return {SCHEMA_FILE: schema_text(), DOCS_FILE: docs_text(), COHORT_FILE: cohort_schema_text()}


def main(argv: list[str] | None = None) -> int:
    """``--write`` rewrites the generated files under ``--root``; ``--check`` lists stale ones."""
    parser = argparse.ArgumentParser(prog="python -m assay.settings.schema")
    parser.add_argument("--root", default=".", help="repository root (default .)")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite the generated files")
    mode.add_argument("--check", action="store_true", help="exit 1 if any file differs")
    args = parser.parse_args(argv)
    stale = []
    for path, text in generated_files().items():
        target = Path(args.root) / path
        if target.is_file() and target.read_text("utf-8") == text:
            continue
        stale.append(path)
        if args.write:
            target.write_text(text, "utf-8")
    verb = "rewrote" if args.write else "stale"
    for path in stale:
        print(f"{verb}: {path}")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
