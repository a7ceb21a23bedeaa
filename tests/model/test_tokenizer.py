"""The GGUF tokenizer: parity with transformers, special tokens, flags, chat template, errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gguf
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Regex, pre_tokenizers

from assay.errors import ModelFileError, UnsupportedModelError
from assay.model.tokenizer import Tokenizer, load_tokenizer

# Varied inputs for parity with transformers. Whitespace runs directly before digits are left
# out here on purpose: see test_smollm_isolates_digits_like_llama_cpp.
PARITY_STRINGS = [
    "",
    "Hello, world!",
    "hello world",
    " leading space",
    "trailing space ",
    "multiple   spaces   between",
    "   ",
    "\t",
    "tabs\tand\ttabs\t\t",
    "new\nlines\n\nand\r\nCRLF\r\n",
    "\n\n\n",
    " \n \t \n",
    "mixed \t\n whitespace \t end",
    "1234567890",
    "3.14159265358979",
    "x=42; y=-7; z=1e-9",
    "Price: $1,299.99 (was $2,000)",
    "year 2024, page 17 of 300",
    "123456789012345678901234567890",
    "0x1F 0b1010 0o777",
    "naïve café résumé façade",
    "Ünïcödé Ångström",
    "日本語のテキスト",
    "中文字符测试，标点。",
    "한국어 문장",
    "😀😃😄 🎉 👨‍👩‍👧‍👦 🏳️‍🌈",
    "مرحبا بالعالم",
    "שלום עולם",
    "Ελληνικά και русский",
    "def f(x):\n    return x ** 2\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    '{"key": [1, 2, {"nested": null}]}',
    "<div class='x'>text</div>",
    "!!!???...,,,;;;:::---___",
    "'s 't 're 've 'm 'll 'd",
    "I'm can't won't they'll",
    "a<|im_start|>b",
    "<|im_start|>user\nhi<|im_end|>\n",
    "<|endoftext|><|endoftext|>",
    "text <reponame> more <file_sep>",
    "<|im_start",
    "\u200b zero width \ufeff bom",
]

# Strings with bytes the vocabulary lacks: both tokenizers must drop the same bytes.
LOSSY_STRINGS = ["a\x04b", "\U00040000 x", "\x1d\x13 end"]

CHATS = [
    [{"role": "user", "content": "What is 2+2?"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Tell me a joke 😀 in 日本語"},
    ],
]


@pytest.fixture(scope="module")
def smollm2(smollm2_path: Path) -> Tokenizer:
    return load_tokenizer(smollm2_path)


@pytest.fixture(scope="module")
def hf_tokenizer(smollm2_path: Path) -> Any:
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(
        str(smollm2_path.parent), gguf_file=smollm2_path.name
    )


# -- parity with transformers (slow: loads the HF tokenizer) ------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("text", PARITY_STRINGS + LOSSY_STRINGS)
def test_ids_match_transformers(smollm2: Tokenizer, hf_tokenizer: Any, text: str) -> None:
    expected = hf_tokenizer.encode(text, add_special_tokens=False)
    ids = smollm2.encode(text)
    assert ids == expected
    assert smollm2.decode(ids) == hf_tokenizer.decode(expected, skip_special_tokens=False)
    assert smollm2.decode(ids, skip_special_tokens=True) == hf_tokenizer.decode(
        expected, skip_special_tokens=True
    )


@pytest.mark.slow
def test_add_special_tokens_matches_transformers(smollm2: Tokenizer, hf_tokenizer: Any) -> None:
    for text in ("Hello", "<|im_start|>x"):
        assert smollm2.encode(text, add_special_tokens=True) == hf_tokenizer.encode(text)


@pytest.mark.slow
@pytest.mark.parametrize("messages", CHATS, ids=["one-turn", "multi-turn"])
@pytest.mark.parametrize("generation_prompt", [False, True])
def test_chat_template_matches_transformers(
    smollm2: Tokenizer, hf_tokenizer: Any, messages: list[dict], generation_prompt: bool
) -> None:
    expected = hf_tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=generation_prompt
    )
    rendered = smollm2.apply_chat_template(messages, add_generation_prompt=generation_prompt)
    assert rendered == expected
    assert smollm2.encode(rendered) == hf_tokenizer.encode(expected, add_special_tokens=False)


@pytest.mark.slow
def test_smollm_isolates_digits_like_llama_cpp(smollm2: Tokenizer, hf_tokenizer: Any) -> None:
    """llama.cpp splits every \\p{N} for pre 'smollm'; transformers' GGUF path does not.

    Against transformers with llama.cpp's rule put back, ids agree; against plain transformers
    they differ where whitespace runs precede digits (if this starts failing, transformers
    changed and the note in assay.model.tokenizer should be revisited).
    """
    texts = ["x  12", "   12", "a\t\t 99 and  3", "٣٤٥ ١٢", "Ⅻ Ⅷ"]
    backend = hf_tokenizer.backend_tokenizer
    plain = [backend.encode(t, add_special_tokens=False).ids for t in texts]
    original = backend.pre_tokenizer
    try:
        backend.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"), original]
        )
        fixed = [backend.encode(t, add_special_tokens=False).ids for t in texts]
    finally:
        backend.pre_tokenizer = original
    ours = [smollm2.encode(t) for t in texts]
    assert ours == fixed
    assert all(a != b for a, b in zip(ours, plain, strict=True))


# -- the real file, without transformers -----------------------------------------------------


def test_special_ids_come_from_metadata(smollm2: Tokenizer) -> None:
    assert (smollm2.bos_id, smollm2.eos_id, smollm2.pad_id, smollm2.unk_id) == (1, 2, 2, 0)
    assert smollm2.vocab_size == 49152
    assert smollm2.encode("<|im_start|>") == [smollm2.bos_id]
    assert smollm2.encode("<|im_end|>") == [smollm2.eos_id]
    assert smollm2.encode("<|endoftext|>") == [smollm2.unk_id]


def test_control_tokens_are_whole_and_skippable(smollm2: Tokenizer) -> None:
    ids = smollm2.encode("<|im_start|>user\nhi<|im_end|>")
    assert ids[0] == 1 and ids[-1] == 2
    assert smollm2.decode(ids, skip_special_tokens=True) == "user\nhi"
    assert smollm2.decode(ids) == "<|im_start|>user\nhi<|im_end|>"


def test_add_bos_flag_off_adds_nothing(smollm2: Tokenizer) -> None:
    assert smollm2.encode("hi", add_special_tokens=True) == smollm2.encode("hi")


def test_summary_is_json_and_describes_the_file(smollm2: Tokenizer) -> None:
    summary = json.loads(json.dumps(smollm2.summary()))
    assert summary["model"] == "gpt2"
    assert summary["pre"] == "smollm"
    assert summary["vocab_size"] == 49152
    assert summary["merges"] == 48900
    assert summary["special_ids"] == {"bos": 1, "eos": 2, "unk": 0, "pad": 2}
    assert summary["has_chat_template"] is True
    assert 0 < summary["build_seconds"] < 10


# SmolLM2's vocabulary has no token for these bytes (never seen in training), so encode drops
# them: control characters 0x04 0x06 0x13 0x14 0x16 0x1d, and lead bytes F1/F2 (U+40000-U+BFFFF).
SMOLLM2_MISSING_BYTES = frozenset({4, 6, 19, 20, 22, 29, 192, 193, 241, 242, *range(245, 256)})
_ENCODABLE = st.characters(
    blacklist_categories=("Cs",),
    blacklist_characters=[chr(b) for b in SMOLLM2_MISSING_BYTES if b < 0x80],
).filter(lambda c: not 0x40000 <= ord(c) < 0xC0000)


def test_missing_bytes_are_reported_and_dropped(smollm2: Tokenizer) -> None:
    assert smollm2.missing_bytes == SMOLLM2_MISSING_BYTES
    assert smollm2.encode("a\x04b") == smollm2.encode("a") + smollm2.encode("b")
    # U+40000 is F1 80 80 80: the lead byte vanishes, the three continuation bytes stay.
    ids = smollm2.encode("\U00040000")
    assert [smollm2.id_to_token(i) for i in ids] == [smollm2.id_to_token(ids[0])] * 3
    assert smollm2.decode(ids) != "\U00040000"


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.text(_ENCODABLE, max_size=80))
def test_decode_inverts_encode(smollm2: Tokenizer, text: str) -> None:
    assert smollm2.decode(smollm2.encode(text)) == text


@pytest.mark.parametrize("text", PARITY_STRINGS, ids=range(len(PARITY_STRINGS)))
def test_decode_inverts_encode_on_varied_strings(smollm2: Tokenizer, text: str) -> None:
    assert smollm2.decode(smollm2.encode(text)) == text


# Whitespace-heavy, so that runs of spaces before a digit (where GPT-2's split differs) are common.
_AROUND_DIGIT = st.text(st.sampled_from(list(" \t\n\u3000ab'.,é日😀7٣")), max_size=8)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(_AROUND_DIGIT, st.sampled_from("0123456789٣Ⅻ½"), _AROUND_DIGIT)
def test_smollm_digit_is_its_own_piece(smollm2: Tokenizer, left: str, digit: str, right: str):
    expected = smollm2.encode(left) + smollm2.encode(digit) + smollm2.encode(right)
    assert smollm2.encode(left + digit + right) == expected


# -- tiny synthetic files --------------------------------------------------------------------


def _byte_tokens() -> list[str]:
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {b: chr(b) for b in keep}
    extra = iter(range(256, 512))
    return [table.get(b) or chr(next(extra)) for b in range(256)]


TINY_MERGES = ["h e", "l l", "he ll", "Ġ h", "Ġh e"]
TINY_SPECIALS = ["<s>", "</s>", "<|im_start|>", "<|im_end|>"]
TINY_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}\n"
    "  {% if m['role'] == 'tool' %}{{ raise_exception('no tools: ' + m['content']) }}{% endif %}\n"
    "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}\n"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def write_tiny_gguf(path: Path, *, tokenizer: bool = True, **overrides: Any) -> Path:
    """A GGUF with no tensors and a byte-level vocabulary of 256 bytes + merges + specials."""
    meta: dict[str, Any] = {
        "model": "gpt2",
        "pre": "gpt2",
        "add_bos": False,
        "add_space_prefix": False,
        "template": TINY_TEMPLATE,
        "user_defined": ["<think>"],
    }
    meta.update(overrides)
    merged = [m.replace(" ", "") for m in TINY_MERGES]
    tokens = [*TINY_SPECIALS, *_byte_tokens(), *merged, *meta["user_defined"]]
    types = [gguf.TokenType.CONTROL] * len(TINY_SPECIALS)
    types += [gguf.TokenType.NORMAL] * (256 + len(merged))
    types += [gguf.TokenType.USER_DEFINED] * len(meta["user_defined"])
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_block_count(1)
    if tokenizer:
        writer.add_tokenizer_model(meta["model"])
        if meta["pre"] is not None:
            writer.add_tokenizer_pre(meta["pre"])
        writer.add_token_list(tokens)
        writer.add_token_types(meta.get("types", types))
        writer.add_token_merges(TINY_MERGES)
        writer.add_bos_token_id(0)
        writer.add_eos_token_id(1)
        writer.add_add_bos_token(meta["add_bos"])
        writer.add_add_space_prefix(meta["add_space_prefix"])
        writer.add_chat_template(meta["template"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture
def tiny(tmp_path: Path) -> Tokenizer:
    return load_tokenizer(write_tiny_gguf(tmp_path / "tiny.gguf"))


def test_tiny_merges_and_special_tokens(tiny: Tokenizer) -> None:
    hello = tiny.token_to_id("hell")
    assert tiny.encode("hell") == [hello]
    assert tiny.encode(" h") == [tiny.token_to_id("Ġh")]
    # "h e" outranks "Ġ h", so the lower-ranked merge never gets its chance.
    assert tiny.encode(" he") == [tiny.token_to_id("Ġ"), tiny.token_to_id("he")]
    assert tiny.encode("<s>hell</s>") == [0, hello, 1]
    assert (tiny.bos_id, tiny.eos_id, tiny.pad_id) == (0, 1, None)


def test_user_defined_tokens_are_whole_but_not_skipped(tiny: Tokenizer) -> None:
    think = tiny.token_to_id("<think>")
    ids = tiny.encode("<s>a<think>b")
    assert ids == [0, tiny.token_to_id("a"), think, tiny.token_to_id("b")]
    assert tiny.decode(ids, skip_special_tokens=True) == "a<think>b"


def test_add_bos_flag_prepends_bos(tmp_path: Path) -> None:
    tok = load_tokenizer(write_tiny_gguf(tmp_path / "bos.gguf", add_bos=True))
    assert tok.encode("hell", add_special_tokens=True) == [0, tok.token_to_id("hell")]
    assert tok.encode("hell") == [tok.token_to_id("hell")]


@pytest.mark.parametrize("pre", ["gpt2", "smollm"])
def test_add_space_prefix_matches_byte_level_prefix(tmp_path: Path, pre: str) -> None:
    spaced = load_tokenizer(write_tiny_gguf(tmp_path / "s.gguf", pre=pre, add_space_prefix=True))
    plain = load_tokenizer(write_tiny_gguf(tmp_path / "p.gguf", pre=pre))
    assert spaced.encode("hell") == plain.encode(" hell")
    assert spaced.encode(" hell") == plain.encode(" hell")
    assert spaced.encode("  x1") == plain.encode("  x1")
    assert spaced.encode("hell 42") == plain.encode(" hell 42")
    # Each run of text after a special token gets its prefix, as ByteLevel(add_prefix_space) does.
    assert spaced.encode("a<s>b") == plain.encode(" a<s> b")


def test_gpt2_pre_with_prefix_equals_tokenizers_byte_level(tmp_path: Path) -> None:
    spaced = load_tokenizer(write_tiny_gguf(tmp_path / "s.gguf", add_space_prefix=True))
    reference = spaced._backend.__class__.from_str(spaced._backend.to_str())
    reference.normalizer = None
    reference.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    for text in ["hell", " hell", "   x  y", "\nhe", "a<s>b<s> c", ""]:
        assert spaced.encode(text) == reference.encode(text, add_special_tokens=False).ids


def test_chat_template_renders_with_hf_whitespace_rules(tiny: Tokenizer) -> None:
    text = tiny.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    assert text == "<s><|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_chat_template_raise_exception(tiny: Tokenizer) -> None:
    with pytest.raises(ValueError, match="no tools: x"):
        tiny.apply_chat_template([{"role": "tool", "content": "x"}])


def test_chat_template_tojson_writes_plain_json(tmp_path: Path) -> None:
    template = "{{ messages | tojson }}|{{ {'k': 1} | tojson(indent=2) }}"
    tok = load_tokenizer(write_tiny_gguf(tmp_path / "json.gguf", template=template))
    messages = [{"role": "user", "content": "<a & 'b'> é"}]
    rendered, indented = tok.apply_chat_template(messages).split("|")
    assert json.loads(rendered) == messages
    assert "<a & 'b'> é" in rendered
    assert indented == '{\n  "k": 1\n}'


def test_chat_template_is_sandboxed(tmp_path: Path) -> None:
    template = "{{ messages.__class__.__mro__ }}"
    tok = load_tokenizer(write_tiny_gguf(tmp_path / "evil.gguf", template=template))
    with pytest.raises(Exception, match=r"unsafe|not safely|access"):
        tok.apply_chat_template([])


def test_missing_tokenizer_metadata_names_the_file(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "bare.gguf", tokenizer=False)
    with pytest.raises(ModelFileError, match=r"bare\.gguf.*tokenizer"):
        load_tokenizer(path)


def test_not_a_gguf_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "junk.gguf"
    path.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(ModelFileError, match=r"junk\.gguf"):
        load_tokenizer(path)


@pytest.mark.parametrize("pre", ["qwen2", "llama-bpe", "deepseek-llm", "default"])
def test_unsupported_pre_tokenizer_names_file_and_value(tmp_path: Path, pre: str) -> None:
    path = write_tiny_gguf(tmp_path / "pre.gguf", pre=pre)
    with pytest.raises(UnsupportedModelError, match=rf"pre\.gguf.*'{pre}'"):
        load_tokenizer(path)


def test_missing_pre_tokenizer_is_unsupported(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "nopre.gguf", pre=None)
    with pytest.raises(UnsupportedModelError, match=r"nopre\.gguf.*no tokenizer\.ggml\.pre"):
        load_tokenizer(path)


def test_unsupported_tokenizer_model_names_file_and_value(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "spm.gguf", model="llama")
    with pytest.raises(UnsupportedModelError, match=r"spm\.gguf.*'llama'"):
        load_tokenizer(path)


def test_token_type_count_mismatch_is_a_file_error(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "types.gguf", types=[gguf.TokenType.NORMAL] * 3)
    with pytest.raises(ModelFileError, match=r"types\.gguf.*token_type"):
        load_tokenizer(path)
