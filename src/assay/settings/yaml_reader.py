"""Reading a train-config YAML file and turning schema violations into one-line errors.

YAML is parsed with a SafeLoader that (a) refuses duplicate keys, which PyYAML would silently
collapse, and (b) reads ``1e-4`` as a float (YAML 1.1 wants ``1.0e-4``; a learning rate
silently read as a string is a classic trap). Merge keys (``<<: *anchor``) are expanded, and
top-level keys starting with ``x-`` are set aside as anchor holders. Schema errors name the
file and the dotted field path; an unknown key also names the nearest valid key (difflib).
Scalars that YAML 1.1 and 1.2 read differently (``010``, ``no``, ``1:30``) are settled or
refused by key in :mod:`assay.settings.yaml_scalars`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, cast

import yaml
from jsonschema import Draft202012Validator, ValidationError

from assay.bounded import (
    CONFIG_BYTES,
    InputTooLarge,
    lone_surrogate,
    non_finite,
    read_capped,
    yaml_document,
)
from assay.errors import ConfigError
from assay.settings import yaml_scalars
from assay.settings.schema import build_schema

_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2-style floats and duplicate-key detection."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:float"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))
yaml_scalars.install(_Loader)  # ahead of the rest: 010, yes, 1:30 ... (yaml_scalars.py)


_MERGE = "tag:yaml.org,2002:merge"
EXTENSION = "x-"


def _mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    """A mapping whose own keys are plain scalars, each written once; merge keys (``<<:
    *defaults``) are expanded, and a key written beside them overrides the merged value."""
    seen: set[Any] = set()
    for key_node, _value in node.value:
        if key_node.tag == _MERGE:
            continue
        if not isinstance(key_node, yaml.ScalarNode):
            kind = "list" if isinstance(key_node, yaml.SequenceNode) else "mapping"
            raise yaml.constructor.ConstructorError(
                None, None, f"a key must be a name, not a {kind}", key_node.start_mark
            )
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    loader.flatten_mapping(node)  # SafeLoader's merge: the merged pairs first, then our own
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def read_yaml(path: Path) -> dict[str, Any]:
    """The YAML mapping in ``path``; ConfigError (file, line) for unreadable or invalid YAML."""
    try:
        text = read_capped(path, CONFIG_BYTES, "config file").decode("utf-8")
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: no such config file") from exc
    except InputTooLarge as exc:
        raise ConfigError(str(exc)) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: invalid UTF-8 at byte {exc.start}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config ({exc.strerror or exc})") from exc
    try:
        # _Loader derives from SafeLoader; aliases are counted before they are expanded.
        data = yaml_document(text, _Loader, path, ConfigError)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise ConfigError(f"{path}: {where}invalid YAML ({exc.problem or exc})") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML ({exc})") from exc
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        kind = "a scalar" if isinstance(data, yaml_scalars.Surprising) else kind
        raise ConfigError(f"{path}: expected a mapping of config keys, the file is {kind}")
    bad = lone_surrogate(data)
    if bad is not None:
        raise ConfigError(f"{path}: {bad}: lone surrogate escape is not text")
    # Top-level ``x-`` keys hold anchors for merge keys (``x-defaults: &d``, then ``<<: *d``),
    # as in Compose files; they are not settings.
    data = yaml_scalars.settle(data, path)
    return {k: v for k, v in data.items() if not (isinstance(k, str) and k.startswith(EXTENSION))}


@lru_cache(maxsize=1)
def validator() -> Draft202012Validator:
    """The validator for the schema the settings tree generates (the shipped
    ``schemas/train-config.schema.json`` is the same text; a test keeps it so), checked
    against the metaschema."""
    schema = build_schema()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _dotted(parts: Any) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _join(prefix: str, key: str) -> str:
    return key if prefix == "(top level)" else f"{prefix}.{key}"


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    # the literal's key type is inferred as ABCMeta, which type(value) is not
    return cast("dict[type, str]", {str: "string", list: "array", dict: "mapping"}).get(
        type(value), type(value).__name__
    )


def _suggest(word: str, options: list[str]) -> str:
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.5)
    return f"did you mean '{close[0]}'?" if close else f"valid: {', '.join(options)}"


def describe(error: ValidationError) -> str:
    """One line for a schema error: dotted field path, then what was expected."""
    where = _dotted(error.absolute_path)
    # jsonschema types these "Any | Unset" (a hand-made error may lack them); a validator's
    # errors always carry them
    value: Any
    rule: Any
    kind, value, rule = error.validator, error.instance, error.validator_value
    if kind == "additionalProperties":
        known = sorted(cast(Mapping[str, Any], error.schema).get("properties", {}))
        # keys may be numbers as well as names (``5: x``): order them as text
        extra = sorted((k for k in value if k not in known), key=str)[0]
        return f"{_join(where, str(extra))}: unknown key ({_suggest(str(extra), known)})"
    if kind == "required":
        missing = next(k for k in rule if k not in value)
        return f"{_join(where, missing)}: required key is missing"
    if kind == "type":
        wanted = " or ".join(rule) if isinstance(rule, list) else rule
        return f"{where}: expected {wanted}, got {_json_type(value)} {value!r}"
    if kind == "enum":
        options = [str(o) for o in rule if o is not None]
        hint = f" ({_suggest(str(value), options)})" if isinstance(value, str) else ""
        return f"{where}: {value!r} is not one of {', '.join(options)}{hint}"
    bounds = {
        "minimum": ">=",
        "exclusiveMinimum": ">",
        "maximum": "<=",
        "exclusiveMaximum": "<",
    }
    if kind in bounds:
        return f"{where}: must be {bounds[kind]} {rule}, got {value!r}"
    if kind == "minItems":
        return f"{where}: needs at least {rule} item(s), got {len(value)}"
    if kind == "maxItems":
        return f"{where}: allows at most {rule} item(s), got {len(value)}"
    if kind == "uniqueItems":
        return f"{where}: items must be unique, got {value!r}"
    if kind == "minLength":
        return f"{where}: must not be empty"
    if kind == "pattern":
        return f"{where}: {value!r} is not a size such as 4GiB, 512MiB or a byte count"
    return f"{where}: {error.message}"


def _rank(error: ValidationError) -> tuple[int, list[str]]:
    # Unknown keys first: a typo often explains the other errors at the same place.
    first = 0 if error.validator == "additionalProperties" else 1
    return first, [str(p) for p in error.absolute_path]


def check_schema(data: dict[str, Any], source: Path) -> None:
    """Raise ConfigError naming ``source`` and the first (most telling) schema violation.

    NaN and infinities are refused first, anywhere: JSON Schema bounds compare false against
    NaN only by accident, and ``.inf`` passes every ``minimum``.
    """
    bad = non_finite(data)
    if bad is not None:
        raise ConfigError(f"{source}: {bad}: must be a finite number, got NaN or infinity")
    errors = sorted(validator().iter_errors(data), key=_rank)
    if errors:
        raise ConfigError(f"{source}: {describe(errors[0])}")
