"""Which base model an adapter was trained on: recorded beside the adapter when it is saved,
checked against the base it is loaded onto before anything else is read from the adapter.

A base is its weights (the canonical sha256 of the decoded tensors, whatever file held them)
and its numerics (:meth:`assay.model.config.ModelConfig.numerics`: every config value that
changes the forward pass). Equal weights under another config (Granite's multipliers, another
family, another rope) are another function, and an adapter trained on one is refused on the
other, naming the first value that differs.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

from assay.errors import ConfigError

SHA_KEY = "base_model_sha256"
NUMERICS_KEY = "base_model_numerics"
ROPE_KEY = "rope_inverse_frequencies"
# a rope computed from a GGUF's divisors rather than from a config's scaling parameters agrees
# to a few float32 ulps; every other value is compared exactly (both sides are float32 already)
REAL_TOLERANCE = 1e-5


def base_sha256(model: Any) -> str | None:
    """The canonical sha256 of the weights ``model`` was loaded from (None when unknown)."""
    fingerprint = getattr(model, "fingerprint", None)
    return getattr(fingerprint, "canonical_sha256", None)


def base_record(model: Any) -> dict[str, Any]:
    """The keys to save beside an adapter of ``model``: its weights' sha256 and its numerics
    (each only when known)."""
    record: dict[str, Any] = {}
    sha = base_sha256(model)
    if sha is not None:
        record[SHA_KEY] = sha
        config = getattr(model, "config", None)
        if config is not None and hasattr(config, "numerics"):
            record[NUMERICS_KEY] = config.numerics()
    return record


def _same(key: str, recorded: Any, ours: Any) -> bool:
    """Whether a recorded numerics value is ours: the same JSON kind and value, except the rope's
    frequencies, which agree within REAL_TOLERANCE (a GGUF's divisors against a config's
    scaling). Any value, however malformed, gets an answer and no exception."""
    if key == ROPE_KEY:
        return (
            isinstance(recorded, list)
            and isinstance(ours, list)
            and len(recorded) == len(ours)
            and all(
                type(r) is float and math.isclose(r, o, rel_tol=REAL_TOLERANCE)
                for r, o in zip(recorded, ours, strict=True)
            )
        )
    return type(recorded) is type(ours) and recorded == ours


def first_difference(recorded: dict[str, Any], ours: dict[str, Any]) -> str | None:
    """The first numerics key whose recorded value is not ``ours``'s (see _same), or None when
    they agree; a key only one side has differs."""
    for key in sorted(set(recorded) | set(ours)):
        if key not in recorded or key not in ours or not _same(key, recorded[key], ours[key]):
            return key
    return None


def _shown(value: Any) -> str:
    """A short view of any JSON value (a long list is cut after three items)."""
    if isinstance(value, list):
        items = ", ".join(_shown(v) for v in value[:3])
        return f"[{items}{', ...' if len(value) > 3 else ''}]"
    if type(value) is float:
        return f"{value:.6g}"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_recorded_base(
    where: Path, model: Any, recorded: dict[str, Any], named: Any = None, folder: Path | None = None
) -> None:
    """ConfigError naming ``where`` when the base model an adapter recorded (``recorded``, the
    dict saved beside it) is not ``model``: other weights, or the same weights under other
    numerics (the first differing value named, both sides shown). A one-line warning naming
    ``folder`` when the weights of either side are unknown (a folder PEFT wrote: only shapes
    can be checked). An adapter saved before numerics were recorded is checked by its weights
    alone. Called before the adapter's own fields are read against the model, so an adapter
    of another base is reported as that, not as whatever first disagrees with the model's
    shape."""
    ours = base_sha256(model)
    sha = recorded.get(SHA_KEY)
    if not isinstance(sha, str) or ours is None:
        shown = f" (it names {named!r})" if isinstance(named, str) and named else ""
        warnings.warn(
            f"{folder or where.parent}: the base model could not be verified{shown}; "
            "only shapes were checked",
            stacklevel=4,
        )
        return
    if sha != ours:
        raise ConfigError(
            f"{where}: {SHA_KEY}: trained on another base model (sha256 {sha[:12]}) than the "
            f"one given (sha256 {ours[:12]})"
        )
    numerics = recorded.get(NUMERICS_KEY)
    if numerics is None:
        return
    if not isinstance(numerics, dict):
        raise ConfigError(f"{where}: {NUMERICS_KEY}: expected an object, got {numerics!r}")
    given = base_record(model).get(NUMERICS_KEY, {})
    key = first_difference(numerics, given)
    if key is not None:
        raise ConfigError(
            f"{where}: {NUMERICS_KEY}.{key}: trained on the same weights under another config "
            f"({key} {_shown(numerics.get(key))}); the base given has {_shown(given.get(key))}"
        )
