"""``generation_config.json``: the generation defaults a Hugging Face folder ships.

assay generates greedily, so it reads what greedy decoding uses: the ids that end a
continuation (``eos_token_id``, one or a list) and ``max_new_tokens``. Sampling settings
(``do_sample``, ``temperature``, ``top_p``, ...) have no effect on a greedy decode and are left
unread. A field that is present but malformed is one ConfigError naming the file and field.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

from assay.bounded import read_json_file
from assay.errors import ConfigError

FILE = "generation_config.json"


@dataclass(frozen=True)
class GenerationDefaults:
    """What a folder's generation_config.json says about greedy decoding."""

    eos_ids: tuple[int, ...] = ()
    max_new_tokens: int | None = None


def _token_id(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def generation_defaults(model: Path) -> GenerationDefaults:
    """The defaults of ``model``'s generation_config.json; empty for a file (a GGUF) or a
    folder without one."""
    path = Path(model) / FILE
    if not Path(model).is_dir() or not path.is_file():
        return GenerationDefaults()
    data = read_json_file(path, ConfigError)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    eos = data.get("eos_token_id")
    ids = [eos] if _token_id(eos) else eos if isinstance(eos, list) else None
    if eos is not None and (ids is None or not all(_token_id(i) for i in ids)):
        raise ConfigError(f"{path}: eos_token_id: expected a token id or a list of them")
    new = data.get("max_new_tokens")
    if new is not None and not (_token_id(new) and new > 0):
        raise ConfigError(f"{path}: max_new_tokens: expected a positive integer")
    return GenerationDefaults(tuple(ids or ()), new)
