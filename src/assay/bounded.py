"""Bounded reads: every config, JSON and JSONL input has a size cap and a linear-time parse.

A loader that reads a hostile file must answer quickly, so each one reads through here:

- :func:`read_capped` refuses a file larger than its cap before reading it whole (one line
  naming the file, the size and the cap), and never allocates the cap itself;
- :func:`split_lines` splits JSON Lines on ``\\n`` alone (U+2028 is legal inside JSON);
- :func:`loads_json` parses JSON with the depth error and lone-surrogate escapes turned into
  one-line errors (``\\ud800`` decodes to a str that no UTF-8 encoder or tokenizer accepts);
- :func:`parse_json` is ``json.loads`` with integers bounded to :data:`INT_DIGITS` digits (a
  longer one is a ``JSONDecodeError`` at its position, where Python's own limit would raise a
  bare ``ValueError`` that every reader catching JSON errors misses); YAML readers get the same
  bound through :func:`depth_limited`;
- :func:`count_expanded` counts the nodes a YAML document would have after its aliases are
  expanded, without expanding them, so an alias bomb is refused before construction.

The caps are far above any real config or row (a config is a few hundred bytes; the caps are
in the megabytes), and the time a capped input takes to parse is measured by gate-robustness.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assay.errors import AssayError

if TYPE_CHECKING:  # imported where used: the gate framework reads JSON here without pyyaml
    import yaml

CONFIG_BYTES = 1 << 20  # a YAML train config or a small JSON sidecar
JSON_BYTES = 16 << 20  # manifests, adapter configs, receipts
JSONL_BYTES = 4 << 30  # a data file: read line by line, each line capped below
JSONL_LINE_BYTES = 16 << 20
YAML_NODES = 2_000  # nodes after alias expansion; a real config has about a hundred
# Python's own int-to-string limit: a number this long is refused by the reader, with its place,
# and a shorter one reaches the schema, which names the field and its range.
INT_DIGITS = 4300
JSON_DEPTH = 100  # levels of nesting; a receipt has about eight, a data row four


class InputTooLarge(AssayError):
    """A file is larger than the cap its reader allows."""


READ_CHUNK = 1 << 20  # bytes asked of the OS at once when a file's size is not known


def read_capped(path: str | os.PathLike[str], cap: int, what: str) -> bytes:
    """The bytes of ``path``; InputTooLarge (one line) when it is larger than ``cap``.

    Never asks for more memory than the file holds (plus one chunk): a regular file is read at
    its size, a special file (no size) in chunks, each refused once past ``cap``. A cap of
    gigabytes therefore costs nothing under an address-space limit (``ulimit -v``).
    OSError from opening or reading propagates unchanged (the CLI prints it on one line).
    """
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > cap:
            raise InputTooLarge(f"{path}: {what} is {size:,} bytes; the limit is {cap:,} bytes")
        parts = [handle.read(size)] if size else []
        total = len(parts[0]) if parts else 0
        while True:  # a file that grew while being read, or a special file with no size
            chunk = handle.read(min(READ_CHUNK, cap + 1 - total))
            if not chunk:
                break
            parts.append(chunk)
            total += len(chunk)
            if total > cap:
                raise InputTooLarge(f"{path}: {what} is over the limit of {cap:,} bytes")
    return parts[0] if len(parts) == 1 else b"".join(parts)


def split_lines(text: str) -> list[str]:
    """The lines of a JSON Lines (or line-per-entry) text, split on ``\\n`` only.

    ``str.splitlines`` also splits on U+2028, U+2029, form feeds and other characters that
    are legal inside a JSON string, so it would cut one entry in two. A ``\\r`` before the
    ``\\n`` is dropped (a file saved with Windows line ends) and a final newline ends the last
    line rather than starting an empty one.
    """
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


class RefusedFile(OSError):
    """A file refused before it is read: not a regular file, a link that leaves its folder, or
    over its size cap. An OSError, so readers that report an unreadable file on one line report
    these the same way."""


def read_text_bounded(
    path: str | os.PathLike[str], cap: int = JSON_BYTES, within: Path | None = None
) -> str:
    """The UTF-8 text of ``path`` (UnicodeDecodeError when it is not UTF-8), read only if it is a
    regular file of at most ``cap`` bytes and, when ``within`` is given, does not resolve to a
    place outside that folder (RefusedFile, naming the file, otherwise). A LEDGER linked to
    ``/dev/zero`` is refused at once instead of read until memory runs out."""
    path = Path(path)
    if within is not None:
        target, home = path.resolve(), Path(within).resolve()
        if target != home and home not in target.parents:
            raise RefusedFile(f"{path}: links to {target}, outside {within}; not followed")
    if path.exists() and not path.is_file():
        raise RefusedFile(f"{path}: not a regular file")
    try:
        data = read_capped(path, cap, "file")
    except InputTooLarge as exc:
        raise RefusedFile(str(exc)) from None
    return data.decode("utf-8")


def read_text_refusing(path: str | os.PathLike[str], within: Path) -> str:
    """:func:`read_text_bounded` of ``path`` inside folder ``within``, with a refused file (not
    a regular file, a link out of ``within``, over the cap) raised as one-line bad input
    (AssayError, naming the file) rather than reported as a damaged file among others. Other
    OSErrors and UnicodeDecodeError pass through, for the caller to report."""
    try:
        return read_text_bounded(path, within=within)
    except RefusedFile as err:
        raise AssayError(str(err)) from None


def lone_surrogate(value: Any) -> str | None:
    """The dotted path of the first string in ``value`` holding a lone surrogate, else None."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return where or "(value)"
        elif isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str) and lone_surrogate(key) is not None:
                    return f"{where}.{key!r}" if where else repr(key)
                stack.append((f"{where}.{key}" if where else str(key), child))
        elif isinstance(item, list):
            stack.extend((f"{where}[{i}]", child) for i, child in enumerate(item))
    return None


def non_finite(value: Any, where: str = "") -> str | None:
    """The dotted path of the first NaN or infinite float in ``value``, else None."""
    if isinstance(value, float) and not math.isfinite(value):
        return where or "(value)"
    if isinstance(value, dict):
        for key, child in value.items():
            found = non_finite(child, f"{where}.{key}" if where else str(key))
            if found is not None:
                return found
    if isinstance(value, list):
        for i, child in enumerate(value):
            found = non_finite(child, f"{where}[{i}]")
            if found is not None:
                return found
    return None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")


def long_integer(digits: str) -> str | None:
    """Why ``digits`` (an integer literal) is too long to read, or None when it is not."""
    count = len(digits.lstrip("+-").replace("_", ""))
    if count > INT_DIGITS:
        return f"an integer of {count:,} digits; the limit is {INT_DIGITS:,}"
    return None


def parse_json(text: str | bytes, *, finite: bool = False) -> Any:
    """``json.loads(text)`` with integer literals bounded to :data:`INT_DIGITS` digits: a longer
    one raises ``json.JSONDecodeError`` at its position (a ``UnicodeDecodeError`` for bytes that
    are not UTF-8), so readers that turn JSON errors into one line cover it too. ``finite``
    also refuses the NaN and Infinity literals (``ValueError``)."""
    if isinstance(text, bytes | bytearray):
        text = bytes(text).decode("utf-8")

    def bounded_int(digits: str) -> int:
        why = long_integer(digits)
        if why is not None:
            raise json.JSONDecodeError(why, text, max(text.find(digits), 0))
        return int(digits)

    constants: dict[str, Any] = {"parse_constant": _refuse_constant} if finite else {}
    try:
        data = json.loads(text, parse_int=bounded_int, **constants)
    except RecursionError:  # hostile nesting: an error at the document, not a crash
        data = None
        depth = JSON_DEPTH + 1
    else:
        depth = nesting_depth(data, JSON_DEPTH)
    if depth > JSON_DEPTH:  # shallower than Python's recursion limit, deeper than any real file
        raise json.JSONDecodeError(f"nested deeper than {JSON_DEPTH} levels", text, 0)
    return data


def nesting_depth(value: Any, cap: int) -> int:
    """Levels of lists and objects in ``value`` (a scalar is 0), counted without recursion and
    stopping once past ``cap``, so a parsed hostile document can be measured safely."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            depth += 1
            deepest = max(deepest, depth)
            if deepest > cap:
                return deepest
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth) for child in children)
    return deepest


def loads_json(text: str | bytes, where: str, error: type[AssayError] = AssayError) -> Any:
    """Parse JSON; ``error`` (one line starting with ``where``) for invalid JSON, nesting too
    deep, NaN/Infinity literals or a lone surrogate escape such as ``\\ud800``."""
    try:
        data = parse_json(text, finite=True)
    except json.JSONDecodeError as exc:
        msg = f"{exc.msg} at line {exc.lineno} column {exc.colno}"
        raise error(f"{where}: invalid JSON ({msg})") from None
    except ValueError as exc:
        raise error(f"{where}: invalid JSON ({exc})") from None
    bad = lone_surrogate(data)
    if bad is not None:
        raise error(f"{where}: {bad}: lone surrogate escape (\\ud800-\\udfff) is not text")
    return data


def read_json_file(
    path: str | os.PathLike[str], error: type[AssayError], cap: int = JSON_BYTES
) -> Any:
    """:func:`loads_json` of a capped file; a missing file is ``error`` naming it."""
    try:
        raw = read_capped(path, cap, "JSON file")
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except InputTooLarge as exc:
        raise error(str(exc)) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: invalid UTF-8 at byte {exc.start}") from None
    return loads_json(text, str(path), error)


def count_expanded(node: yaml.Node, cap: int) -> int:
    """Nodes in the document under ``node`` with every alias expanded, counted up to ``cap``.

    Shared subtrees (what aliases produce) are counted once per use but walked once, so the
    count is linear in the composed graph even for a billion-laughs document. Returns a value
    above ``cap`` as soon as the count passes it.
    """
    import yaml

    memo: dict[int, int] = {}
    active: set[int] = set()

    def size(item: yaml.Node) -> int:
        key = id(item)
        if key in memo:
            return memo[key]
        if key in active:  # a recursive alias: infinite when expanded
            return cap + 1
        active.add(key)
        total = 1
        if isinstance(item, yaml.SequenceNode):
            children = item.value
        elif isinstance(item, yaml.MappingNode):
            children = [part for pair in item.value for part in pair]
        else:
            children = []
        for child in children:
            total += size(child)
            if total > cap:
                break
        active.discard(key)
        memo[key] = total
        return total

    return size(node)


YAML_DEPTH = 64  # nesting levels; a real config has three


class DepthLimit(Exception):
    """Raised by the composer past :data:`YAML_DEPTH` levels (caught in yaml_document)."""


def depth_limited(loader: type[yaml.SafeLoader]) -> type[yaml.SafeLoader]:
    """A subclass of ``loader`` whose composer refuses nesting past :data:`YAML_DEPTH`, so a
    hostile ``[[[[...`` stops after 64 levels instead of at Python's recursion limit, and whose
    integers are bounded to :data:`INT_DIGITS` digits (an error at the number's line)."""
    import yaml

    class Limited(loader):  # type: ignore[misc,valid-type]
        _depth = 0

        def construct_yaml_int(self, node):
            why = long_integer(str(node.value))
            if why is not None:
                raise yaml.constructor.ConstructorError(None, None, why, node.start_mark)
            return super().construct_yaml_int(node)

        def compose_node(self, parent, index):
            self._depth += 1
            try:
                if self._depth > YAML_DEPTH:
                    raise DepthLimit
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

    # the constructor table holds functions, not method names: the override must be registered
    Limited.add_constructor("tag:yaml.org,2002:int", Limited.construct_yaml_int)
    return Limited


def yaml_document(text: str, loader: type[yaml.SafeLoader], path: Path, error: type[AssayError]):
    """Compose, bound and construct the one YAML document in ``text``.

    Refuses (``error`` naming ``path``) a document whose alias expansion would exceed
    :data:`YAML_NODES` nodes, or one nested too deeply for the parser.
    """
    instance = depth_limited(loader)(text)
    try:
        node = instance.get_single_node()
        if node is None:
            return None
        nodes = count_expanded(node, YAML_NODES)
        if nodes > YAML_NODES:
            raise error(
                f"{path}: YAML aliases expand to over {YAML_NODES:,} nodes "
                "(an alias bomb?); write the values out or use fewer aliases"
            )
        return instance.construct_document(node)
    except (RecursionError, DepthLimit):
        raise error(f"{path}: invalid YAML (nested deeper than {YAML_DEPTH} levels)") from None
    finally:
        instance.dispose()
