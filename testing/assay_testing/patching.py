"""Patches on scratch copies of one function's source: how controls and mutants inject a defect
without any flag inside the product.

An :class:`Edit` names a function (``"assay.storage.nf4:NF4Weight._scales"``), a piece of its
source and what that piece becomes. :func:`patched` reads the function's source from its file,
applies the edits to that copy, compiles it and swaps the compiled code into the *same*
function object, so every caller (including ``from x import f`` references and bound methods)
runs the defect; on exit the original code is put back. The product's files are never written.

Guarantees: an edit whose text is not found exactly once in the function refuses (``ValueError``
naming the function and the text), so a patch that drifted from the code fails loudly instead of
arming nothing; the patched code keeps the original's globals, closure cells and line numbers.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import textwrap
import types
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

VALUE = "$VALUE"  # in Edit.new: replaced by the setting a defect was armed with


@dataclass(frozen=True)
class Edit:
    """Replace ``old`` (text found exactly once in the target's source) with ``new``."""

    target: str
    old: str
    new: str


def resolve(target: str) -> types.FunctionType:
    """The plain function behind ``"module:Qual.name"`` (through methods, properties, wrappers)."""
    module_name, _, qualname = target.partition(":")
    owner: object = importlib.import_module(module_name)
    found: object = owner
    for part in qualname.split("."):
        owner = found
        found = vars(owner)[part] if isinstance(owner, type) else getattr(owner, part)
    if isinstance(found, (staticmethod, classmethod)):
        found = found.__func__
    if isinstance(found, property):
        found = found.fget
    found = inspect.unwrap(found)  # type: ignore[arg-type]
    if not isinstance(found, types.FunctionType):
        raise TypeError(f"{target}: not a Python function ({type(found).__name__})")
    return found


def _function_source(code: types.CodeType) -> tuple[str, int]:
    """The dedented ``def`` of ``code`` without decorators, and the file line it starts on."""
    lines, _ = inspect.findsource(code)
    block = inspect.getblock(lines[code.co_firstlineno - 1 :])
    heads = ("def ", "async def ")
    start = next(i for i, line in enumerate(block) if line.lstrip().startswith(heads))
    return textwrap.dedent("".join(block[start:])), code.co_firstlineno + start


def _compile(func: types.FunctionType, source: str, line: int, filename: str) -> types.CodeType:
    """Compile ``source`` (one def) so its code has ``func``'s free variables and line numbers."""
    freevars = func.__code__.co_freevars
    name = func.__code__.co_name
    if freevars:
        # Rebuild the enclosing scope: a variable per free name, and a class for zero-arg super().
        binds = [f"    {v} = None\n" for v in freevars if v != "__class__"]
        in_class = "__class__" in freevars
        body = textwrap.indent(source, "        " if in_class else "    ")
        scope = "    class __Scratch__:\n" if in_class else ""
        head = "def __scratch__():\n" + "".join(binds) + scope
        tail = f"    return {'__Scratch__.' if in_class else ''}{name}\n"
        source = head + body + tail
        offset = line - 1 - head.count("\n")
    else:
        offset = line - 1
    namespace: dict[str, object] = dict(func.__globals__)
    exec(compile("\n" * max(offset, 0) + source, filename, "exec"), namespace)
    made = namespace["__scratch__"]() if freevars else namespace[name]
    code = made.__code__  # type: ignore[union-attr]
    if code.co_freevars != freevars:
        raise ValueError(f"{func.__qualname__}: the edit changed the free variables {freevars}")
    return code


def patched_code(func: types.FunctionType, edits: Sequence[tuple[Edit, str]]) -> types.CodeType:
    """Code for ``func`` with every (edit, setting) applied, in order, to a copy of its source."""
    original = _originals.get(func, func.__code__)
    source, line = _function_source(original)
    for edit, setting in edits:
        count = source.count(edit.old)
        if count != 1:
            raise ValueError(
                f"{edit.target}: the text to patch is found {count} times (expected once): "
                f"{edit.old.strip()[:60]!r}"
            )
        source = source.replace(edit.old, edit.new.replace(VALUE, setting))
    return _compile(func, source, line, original.co_filename)


# function -> its unpatched code, and the edits now active on it (patches nest and stack).
_originals: dict[types.FunctionType, types.CodeType] = {}
_active: dict[types.FunctionType, list[tuple[Edit, str]]] = {}


def _swap(func: types.FunctionType) -> None:
    edits = _active.get(func)
    if edits:
        func.__code__ = patched_code(func, edits)
    else:
        _active.pop(func, None)
        func.__code__ = _originals.pop(func)


@contextlib.contextmanager
def patched(edits: Sequence[Edit], setting: str = "1") -> Iterator[None]:
    """Run the block with every target function carrying its edits; originals restored after.

    Patches nest: two defects on one function are both applied (in the order armed).
    """
    entered: list[tuple[types.FunctionType, tuple[Edit, str]]] = []
    try:
        for edit in edits:
            func = resolve(edit.target)
            _originals.setdefault(func, func.__code__)
            item = (edit, setting)
            _active.setdefault(func, []).append(item)
            entered.append((func, item))
            _swap(func)
        yield
    finally:
        for func, item in reversed(entered):
            _active[func].remove(item)
            _swap(func)
