"""Hugging Face tokenizer folders written by transformers' ``save_pretrained``, and the corpus
that compares assay's reading of them with ``AutoTokenizer`` (issue 51).

Two folders: SmolLM2's byte-level BPE (converted by transformers from the bundled GGUF, with its
chat template as ``chat_template.jinja``) and a Llama-style BPE with byte fallback, a Metaspace
pre-tokenizer, a post-processor that adds ``<s>``, added and special tokens and a chat template
in ``tokenizer_config.json``, trained here on a few lines so nothing is downloaded.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

CORPUS = (
    "",
    "Hello, world!",
    " leading space",
    "trailing space ",
    "multiple   spaces   between",
    "tabs\tand\ttabs\t\t",
    "new\nlines\n\nand\r\nCRLF\r\n",
    "1234567890 and 3.14159",
    "naïve café résumé",
    "日本語のテキスト",
    "中文字符测试，标点。",
    "한국어 문장",
    "مرحبا بالعالم",
    "Ελληνικά και русский",
    "😀😃 🎉 👨‍👩‍👧‍👦",
    "\u200b zero width \ufeff bom",
    "control \x07 bell \x1b escape",
    "def f(x):\n    return x ** 2\n",
    "a<|im_start|>b",
    "<|im_start|>user\nhi<|im_end|>\n",
    "<s>text</s>",
    "added <extra_token> in text",
    "<|im_start",
)
CHATS = (
    [{"role": "user", "content": "What is 2+2?"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Tell me a joke 😀 in 日本語"},
    ],
)
LLAMA_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}<<SYS>>{{ m['content'] }}"
    "<</SYS>>\n{% else %}[{{ m['role'] | upper }}] {{ m['content'] | trim }}{{ eos_token }}\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}[ASSISTANT]{% endif %}"
)
TRAINING_TEXT = (
    "The quick brown fox jumps over the lazy dog.",
    "Training a tokenizer on a handful of lines keeps the vocabulary small.",
    "Numbers 0123456789 and punctuation, too!",
    "Some words repeat: words words words, lines lines.",
)


def save_smollm2_folder(gguf: Path, folder: Path) -> Path:
    """SmolLM2's tokenizer as transformers converts it from ``gguf`` and saves it."""
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(folder)
    return folder


def save_byte_fallback_folder(folder: Path) -> Path:
    """A Llama-style tokenizer (byte fallback, Metaspace, ``<s>`` added by its post-processor),
    trained on :data:`TRAINING_TEXT` and saved by transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    backend.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", *byte_tokens],
    )
    backend.train_from_iterator(TRAINING_TEXT, trainer)
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", backend.token_to_id("<s>"))]
    )
    wrapped: Any = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="</s>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
        chat_template=LLAMA_TEMPLATE,
    )
    wrapped.add_tokens(["<extra_token>"])
    wrapped.save_pretrained(folder)
    return folder


# transformers 5 classes that rebuild a tokenizer's pipeline from its vocabulary
RESAVED_CLASSES = ("LlamaTokenizer", "GPT2Tokenizer", "Qwen2Tokenizer")


def save_folders(root: Path, gguf: Path) -> dict[str, Path]:
    """name -> tokenizer folder under ``root``: SmolLM2's (from ``gguf``), the byte-fallback
    one, that one saved again through each of :data:`RESAVED_CLASSES`, and one with its chat
    template in tokenizer_config.json instead of chat_template.jinja."""
    from transformers import AutoTokenizer

    made = {
        "smollm2": save_smollm2_folder(gguf, root / "smollm2"),
        "byte_fallback": save_byte_fallback_folder(root / "byte_fallback"),
    }
    for name in RESAVED_CLASSES:
        staged = root / f"staged-{name}"
        shutil.copytree(made["byte_fallback"], staged)
        config = json.loads((staged / "tokenizer_config.json").read_text())
        (staged / "tokenizer_config.json").write_text(
            json.dumps({**config, "tokenizer_class": name})
        )
        made[name] = root / name
        AutoTokenizer.from_pretrained(staged).save_pretrained(made[name])
    inline = root / "template_in_config"
    shutil.copytree(made["byte_fallback"], inline)
    config = json.loads((inline / "tokenizer_config.json").read_text())
    (inline / "chat_template.jinja").unlink()
    (inline / "tokenizer_config.json").write_text(
        json.dumps({**config, "chat_template": LLAMA_TEMPLATE})
    )
    made["template_in_config"] = inline
    return made


def mismatches(ours: Any, theirs: Any) -> list[str]:
    """What differs between assay's tokenizer ``ours`` and transformers' ``theirs`` over
    :data:`CORPUS` (ids with and without special tokens, decoding with and without skipping
    them) and :data:`CHATS` (rendering with and without a generation prompt)."""
    wrong = []
    for text in CORPUS:
        for special in (False, True):
            ids = theirs.encode(text, add_special_tokens=special)
            if ours.encode(text, add_special_tokens=special) != ids:
                wrong.append(f"ids{'+special' if special else ''} {text!r}")
            for skip in (False, True):
                if ours.decode(ids, skip_special_tokens=skip) != theirs.decode(
                    ids, skip_special_tokens=skip
                ):
                    wrong.append(f"decode{'-skip' if skip else ''} {text!r}")
    for n, chat in enumerate(CHATS):
        for prompt in (False, True):
            expected = theirs.apply_chat_template(
                chat, tokenize=False, add_generation_prompt=prompt
            )
            if ours.apply_chat_template(chat, add_generation_prompt=prompt) != expected:
                wrong.append(f"chat {n} generation_prompt={prompt}")
    return wrong
