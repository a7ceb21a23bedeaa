"""Generate the bad-input corpus: ``python tests/corpus/generate.py OUT_DIR``.

Nothing binary is committed: every case is derived here from a freshly built tiny model and
valid files, then broken in one way. Prints one line per case (name, file, expected locator).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from corpus_harness import Case
from corpus_inputs import checkpoint_cases, config_cases, data_cases, receipt_cases
from corpus_models import gguf_cases, safetensors_cases
from corpus_robust import robust_cases
from corpus_round3 import round3_cases
from corpus_round4 import round4_cases
from corpus_round5 import round5_cases

# The GGUF tokenizer vocabulary, so the tiny model trains with the SmolLM2 tokenizer.
VOCAB = 49152


def build_corpus(root: Path) -> list[Case]:
    """Write every case under ``root`` (which must be empty or absent); return them."""
    from assay_testing.tiny import save_tiny

    root.mkdir(parents=True, exist_ok=True)
    small = save_tiny("llama3", root / "valid", seed=1)
    trainable = save_tiny("llama3", root / "valid", seed=1, gguf=False, vocab_size=VOCAB)["hf"]
    other = save_tiny("llama3", root / "other", seed=2, gguf=False, vocab_size=VOCAB)["hf"]
    return [
        *gguf_cases(root, small["gguf"]),
        *safetensors_cases(root, small["hf"]),
        *data_cases(root, trainable),
        *config_cases(root, trainable),
        *checkpoint_cases(root, trainable),
        *receipt_cases(root),
        *robust_cases(root / "issue16", trainable),
        *round3_cases(root / "issue30", trainable),
        *round4_cases(root / "issue41", trainable),
        *round5_cases(root / "issue52", trainable, other),
    ]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: generate.py OUT_DIR", file=sys.stderr)
        return 2
    for case in build_corpus(Path(argv[0])):
        print(f"{case.name}\t{case.file}\t{case.where}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
