"""A byte-level tokenizer GGUF of 260 tokens, for tests and gates that train tiny models.

Loading SmolLM2's tokenizer takes seconds per process; a job of several processes (torchrun
ranks) pays it in each. This file holds only tokenizer metadata: ids 0-255 are the 256 bytes
(GPT-2's byte alphabet, so id == byte value), one merge ("Ġ" + "t"), then ``<|endoftext|>``
(eos, id 257), ``<|im_start|>`` (bos, id 258) and ``<|im_end|>``. It fits any model whose
vocabulary has at least 260 rows, such as the tiny models of :mod:`assay_testing.tiny`.
"""

from __future__ import annotations

from pathlib import Path

VOCAB_SIZE = 260
EOS_ID = 257
BOS_ID = 258


def save_byte_tokenizer(path: Path, swapped: str = "") -> Path:
    """Write the tokenizer-only GGUF to ``path`` and return it. ``swapped``: two characters
    whose tokens trade ids (another tokenizer that cuts every text into as many tokens)."""
    import gguf

    from assay.model.tokenizer import _byte_alphabet

    alphabet = _byte_alphabet()
    byte_tokens = [alphabet[b] for b in range(256)]
    if swapped:
        one, two = (ord(c) for c in swapped)
        byte_tokens[one], byte_tokens[two] = byte_tokens[two], byte_tokens[one]
    merged = alphabet[ord(" ")] + "t"
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt2")
    writer.add_token_list([*byte_tokens, merged, *special])
    normal, control = int(gguf.TokenType.NORMAL), int(gguf.TokenType.CONTROL)
    writer.add_token_types([normal] * 257 + [control] * len(special))
    writer.add_token_merges([f"{alphabet[ord(' ')]} t"])
    writer.add_eos_token_id(EOS_ID)
    writer.add_bos_token_id(BOS_ID)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
