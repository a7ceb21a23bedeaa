"""Seeded mutation fuzzing of the two header parsers, with a per-example time bound."""

from __future__ import annotations

import json
import random
import struct
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "corpus"))

from corpus_harness import _Hang, hang_guard
from corpus_models import gguf_bytes

from assay.errors import ModelFileError

PER_EXAMPLE_S = 2.0


def valid_gguf() -> bytes:
    """A small well-formed GGUF: scalars, a string, an array and two F32 tensors."""
    meta = [
        ("general.architecture", "llama"),
        ("llama.block_count", 1),
        ("x.arr", [1, 2, 3]),
        ("x.s", "hi"),
        ("x.f", 0.5),
    ]
    return gguf_bytes(meta, [("a", [4, 2], 0, 0), ("b", [8], 0, 32)], bytes(64))


def valid_safetensors() -> bytes:
    header = {
        "a": {"dtype": "F32", "shape": [2, 4], "data_offsets": [0, 32]},
        "b": {"dtype": "F16", "shape": [8], "data_offsets": [32, 48]},
    }
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + bytes(48)


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One to four random edits: byte flips, big integers, truncation, splices."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        pick = rng.random()
        at = rng.randrange(max(len(out), 1))
        if pick < 0.4 and out:
            out[at] = rng.randrange(256)
        elif pick < 0.6 and len(out) > 8:
            out[at : at + 8] = struct.pack("<Q", rng.choice([0, 1, 2**31, 2**63, 2**64 - 1]))
        elif pick < 0.8:
            del out[at:]
        else:
            out[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    return bytes(out)


def outcome(parse: Callable[[Path], object], path: Path, data: bytes) -> str:
    """``ok``, ``refused`` (ModelFileError), ``hang`` or ``crash:<type>``."""
    path.write_bytes(data)
    try:
        with hang_guard(PER_EXAMPLE_S):
            parse(path)
    except ModelFileError:
        return "refused"
    except _Hang:
        return "hang"
    except Exception as exc:
        return f"crash:{type(exc).__name__}"
    return "ok"


def fuzz(
    parse: Callable[[Path], object], seed_bytes: bytes, path: Path, n: int, seed: int
) -> dict[str, int]:
    """Counts of each outcome over ``n`` mutants of ``seed_bytes``."""
    rng = random.Random(seed)
    counts: dict[str, int] = {}
    for _ in range(n):
        result = outcome(parse, path, mutate(seed_bytes, rng))
        counts[result] = counts.get(result, 0) + 1
    return counts


def unexpected(counts: dict[str, int]) -> int:
    """Examples that neither parsed nor ended in ModelFileError."""
    return sum(v for k, v in counts.items() if k not in ("ok", "refused"))


def unchecked_take(self, n: int, what: str):  # the control: the GGUF bounds check removed
    out = self.data[self.pos : self.pos + n]
    self.pos += n
    return out
