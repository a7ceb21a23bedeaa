"""A byte-level BPE tokenizer built from a GGUF file's metadata, with its chat template.

The GGUF carries no ``tokenizer.json``: the vocabulary, merges, token types, special ids and
chat template live under llama.cpp's ``tokenizer.*`` keys. We rebuild the tokenizer with the
``tokenizers`` library, so encoding needs no transformers, and render the chat template with a
sandboxed jinja2 environment configured the way Hugging Face renders templates.

Pre-tokenizer ``smollm`` follows llama.cpp (and SmolLM's own tokenizer.json): every digit is
isolated before GPT-2's split. transformers' GGUF loader treats ``smollm`` as plain GPT-2, so
the two disagree where whitespace runs precede digits; elsewhere ids are identical.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

import gguf
import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers
from tokenizers import Tokenizer as _Backend

from assay.errors import ModelFileError, UnsupportedModelError
from assay.model.gguf_header import read_header

# llama.cpp token types (gguf.TokenType): only these two are matched whole in running text.
_CONTROL = int(gguf.TokenType.CONTROL)
_USER_DEFINED = int(gguf.TokenType.USER_DEFINED)

# ``tokenizer.ggml.pre`` values we reproduce, mapped to the regex (if any) that isolates pieces
# before GPT-2's own byte-level split. gpt2 is checked against transformers; smollm follows
# llama.cpp, which isolates every \p{N}. "default" (and a missing key) is left out because
# llama.cpp and transformers read it differently.
_PRE_SPLITS: dict[str, str | None] = {
    "gpt2": None,
    "smollm": r"\p{N}",
}

_REQUIRED_KEYS = ("tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.merges")


@lru_cache(maxsize=1)
def _byte_alphabet() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table (256 distinct characters)."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table = {b: chr(b) for b in printable}
    shift = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + shift)
            shift += 1
    return table


def _respell(token: str, alphabet: dict[int, str], letters: frozenset[str]) -> str:
    """The token as the byte-level model spells it; tokens already spelled that way pass."""
    if all(ch in letters for ch in token):
        return token
    return "".join(alphabet[b] for b in token.encode("utf-8"))


class Tokenizer:
    """Encode, decode and chat-format text for one vocabulary: a GGUF's, or a Hugging Face
    folder's ``tokenizer.json`` (:mod:`assay.model.hf_tokenizer`).

    Built by :func:`load_tokenizer`; ids match transformers' tokenizer for the same file.
    """

    def __init__(
        self,
        backend: _Backend,
        *,
        source: str,
        model: str,
        pre: str,
        merges_count: int | None,
        special_ids: dict[str, int | None],
        add_bos: bool,
        add_eos: bool,
        add_space_prefix: bool,
        chat_template: str | None,
        post_processed: bool = False,
        build_seconds: float = 0.0,
    ) -> None:
        self._backend = backend
        self._source = source
        self._model = model
        self._pre = pre
        self._merges_count = merges_count
        self._special_ids = dict(special_ids)
        self._add_bos = add_bos
        self._add_eos = add_eos
        self._add_space_prefix = add_space_prefix
        self._chat_template = chat_template
        self._post_processed = post_processed
        # compiled now: a template that does not parse is refused at load, not at first use
        self._compiled_template = _compiled(chat_template, source)
        self._missing_bytes: frozenset[int] | None = None
        self.build_seconds = build_seconds

    # ids -------------------------------------------------------------------------------
    @property
    def bos_id(self) -> int | None:
        """Beginning-of-sequence id from the file, or None if it declares none."""
        return self._special_ids.get("bos")

    @property
    def eos_id(self) -> int | None:
        """End-of-sequence id from the file, or None if it declares none."""
        return self._special_ids.get("eos")

    @property
    def unk_id(self) -> int | None:
        """Unknown-token id from the file, or None if it declares none."""
        return self._special_ids.get("unk")

    @property
    def pad_id(self) -> int | None:
        """Padding id from the file; may equal :attr:`eos_id`, None if the file has none."""
        return self._special_ids.get("pad")

    @property
    def vocab_size(self) -> int:
        """Number of ids, equal to the length of ``tokenizer.ggml.tokens``."""
        return self._backend.get_vocab_size(with_added_tokens=True)

    @property
    def source(self) -> str:
        """The file (or folder) the vocabulary was read from."""
        return self._source

    @property
    def chat_template(self) -> str | None:
        """The file's jinja2 chat template source, or None."""
        return self._chat_template

    @property
    def missing_bytes(self) -> frozenset[int]:
        """Byte values with no token of their own; :meth:`encode` drops them, as transformers does.

        Text whose UTF-8 bytes avoid these round-trips exactly through encode and decode.
        """
        if self._missing_bytes is None:
            alphabet = _byte_alphabet()
            vocab = self._backend.get_vocab(with_added_tokens=False)
            self._missing_bytes = frozenset(b for b, ch in alphabet.items() if ch not in vocab)
        return self._missing_bytes

    def token_to_id(self, token: str) -> int | None:
        """Id of a token spelled as in the file's vocabulary (byte-level spelling)."""
        return self._backend.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        """The vocabulary spelling of an id, or None when out of range."""
        return self._backend.id_to_token(token_id)

    # text <-> ids ------------------------------------------------------------------------
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Ids of ``text``; special tokens written in it become single ids.

        Bytes listed in :attr:`missing_bytes` have no id and are dropped.

        With ``add_special_tokens`` the GGUF's ``add_bos_token``/``add_eos_token`` flags decide
        whether bos/eos are added around the text (for a folder, its ``tokenizer.json``
        post-processor decides); without it nothing is added.
        """
        if add_special_tokens and self._post_processed:
            return self._backend.encode(text, add_special_tokens=True).ids
        ids = self._backend.encode(text, add_special_tokens=False).ids
        if add_special_tokens:
            if self._add_bos and self.bos_id is not None:
                ids = [self.bos_id, *ids]
            if self._add_eos and self.eos_id is not None:
                ids = [*ids, self.eos_id]
        return ids

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """:meth:`encode` of ``text`` with nothing added, and each token's ``(start, end)``
        character span in ``text`` (a token of part of a character spans that character)."""
        found = self._backend.encode(text, add_special_tokens=False)
        return list(found.ids), [(int(a), int(b)) for a, b in found.offsets]

    def encode_batch(
        self, texts: Sequence[str], add_special_tokens: bool = False
    ) -> list[list[int]]:
        """:meth:`encode` for each text, in order (the backend may use several threads)."""
        if add_special_tokens:
            return [self.encode(t, add_special_tokens=True) for t in texts]
        return [e.ids for e in self._backend.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """Text of ``ids``; invalid UTF-8 byte runs decode to U+FFFD.

        ``decode(encode(s)) == s`` when the file adds no space prefix and no byte of ``s`` is in
        :attr:`missing_bytes`.
        """
        return self._backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    # chat ------------------------------------------------------------------------------
    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool = False,
        **extra: Any,
    ) -> str:
        """The conversation rendered by the file's chat template, as a string.

        Variables available to the template: ``messages``, ``add_generation_prompt``,
        ``bos_token``, ``eos_token``, ``unk_token``, ``pad_token`` and any ``extra``; the
        template may call ``raise_exception(message)``, which raises :class:`ValueError`.
        """
        if self._chat_template is None:
            raise ModelFileError(f"{self._source}: the tokenizer has no chat template")
        assert self._compiled_template is not None  # compiled with the template
        variables = {
            f"{name}_token": self._token_text(token_id)
            for name, token_id in self._special_ids.items()
        }
        variables.update(extra)
        return self._compiled_template.render(
            messages=messages, add_generation_prompt=add_generation_prompt, **variables
        )

    def _token_text(self, token_id: int | None) -> str | None:
        if token_id is None:
            return None
        return self._backend.decode([token_id], skip_special_tokens=False)

    # description ------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """JSON-serialisable description used by ``assay info``."""
        return {
            "model": self._model,
            "pre": self._pre,
            "vocab_size": self.vocab_size,
            "merges": self._merges_count,
            "special_ids": dict(self._special_ids),
            "add_bos_token": self._add_bos,
            "add_eos_token": self._add_eos,
            "add_space_prefix": self._add_space_prefix,
            "has_chat_template": self._chat_template is not None,
            "build_seconds": round(self.build_seconds, 4),
        }

    def __repr__(self) -> str:
        return f"Tokenizer({self._model}/{self._pre}, vocab={self.vocab_size}, {self._source})"


def _raise_exception(message: str) -> None:
    raise ValueError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, **kw: Any) -> str:
    # jinja2's own tojson HTML-escapes <, >, & and '; chat templates expect plain JSON.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, **kw)


class _GenerationTag(Extension):
    """transformers' ``{% generation %}...{% endgeneration %}``, which marks the assistant's
    text for its masks: rendered as its body, as transformers renders it."""

    # jinja2 annotates Extension.tags as an instance attribute; it reads it from the class
    tags: ClassVar[set[str]] = {"generation"}  # type: ignore[misc]

    def parse(self, parser: Any) -> list[nodes.Node]:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def _compiled(template: str | None, source: str) -> jinja2.Template | None:
    """``template`` compiled in the chat environment; ModelFileError naming ``source`` and the
    line for one that does not parse."""
    if template is None:
        return None
    try:
        return _template_environment().from_string(template)
    except jinja2.TemplateSyntaxError as exc:
        raise ModelFileError(
            f"{source}: the chat template does not parse ({exc.message} at line {exc.lineno})"
        ) from None


@lru_cache(maxsize=1)
def _template_environment() -> ImmutableSandboxedEnvironment:
    """Sandboxed jinja2 set up like Hugging Face's chat templating (trim and lstrip blocks)."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=["jinja2.ext.loopcontrols", _GenerationTag],
    )
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: time.strftime(fmt)
    env.filters["tojson"] = _tojson
    return env


def _field(meta: Mapping[str, Any], key: str) -> Any:
    return meta.get(key)


def _optional_id(meta: Mapping[str, Any], key: str, vocab: int, source: str) -> int | None:
    value = _field(meta, key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < vocab:
        raise ModelFileError(f"{source}: {key}={value!r} is not a token id below {vocab}")
    return value


def _pre_tokenizer(pre: str) -> pre_tokenizers.PreTokenizer:
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    split = _PRE_SPLITS[pre]
    if split is None:
        return byte_level
    isolate = pre_tokenizers.Split(Regex(split), behavior="isolated")
    return pre_tokenizers.Sequence([isolate, byte_level])


def _space_prefix() -> normalizers.Normalizer:
    """One leading space on each text run that lacks one (ByteLevel's add_prefix_space).

    Done as a normalizer because ByteLevel's own flag would prefix every piece that an earlier
    Split produced, not just each run of text between special tokens.
    """
    return normalizers.Sequence([normalizers.Prepend(" "), normalizers.Replace(Regex("^  "), " ")])


def tokenizer_from_reader(reader: gguf.GGUFReader, source: str) -> Tokenizer:
    """Build the tokenizer from an open ``gguf`` reader; ``source`` names the file in errors."""
    meta = {key: field.contents() for key, field in reader.fields.items()}
    return tokenizer_from_metadata(meta, source)


def tokenizer_from_metadata(meta: Mapping[str, Any], source: str) -> Tokenizer:
    """Build the tokenizer from a GGUF's decoded metadata; ``source`` names the file in errors.

    Raises ModelFileError when tokenizer metadata is missing or inconsistent and
    UnsupportedModelError for a tokenizer model or pre-tokenizer not verified here.
    """
    start = time.perf_counter()
    missing = [k for k in _REQUIRED_KEYS if k not in meta]
    if missing:
        raise ModelFileError(f"{source}: no tokenizer metadata (missing {', '.join(missing)})")
    model = _field(meta, "tokenizer.ggml.model")
    if model != "gpt2":
        raise UnsupportedModelError(
            f"{source}: tokenizer.ggml.model={model!r}; only byte-level BPE 'gpt2' is supported"
        )
    pre = _field(meta, "tokenizer.ggml.pre")
    if pre not in _PRE_SPLITS:
        stated = "no tokenizer.ggml.pre" if pre is None else f"tokenizer.ggml.pre={pre!r}"
        raise UnsupportedModelError(
            f"{source}: {stated} is not supported (supported: {', '.join(sorted(_PRE_SPLITS))})"
        )
    tokens: list[str] = _field(meta, "tokenizer.ggml.tokens")
    merges: list[str] = _field(meta, "tokenizer.ggml.merges")
    types = _field(meta, "tokenizer.ggml.token_type")
    if types is not None and len(types) != len(tokens):
        raise ModelFileError(
            f"{source}: tokenizer.ggml.token_type has {len(types)} entries, "
            f"expected one per token ({len(tokens)})"
        )
    add_space_prefix = bool(_field(meta, "tokenizer.ggml.add_space_prefix") or False)

    alphabet = _byte_alphabet()
    letters = frozenset(alphabet.values())
    spelled = [_respell(t, alphabet, letters) for t in tokens]
    vocab = {t: i for i, t in enumerate(spelled)}
    if len(vocab) != len(spelled):
        raise ModelFileError(f"{source}: tokenizer.ggml.tokens has duplicate tokens")
    pairs = []
    for n, merge in enumerate(merges):
        left, sep, right = merge.partition(" ")
        if not sep or " " in right:
            raise ModelFileError(
                f"{source}: merge {n} {merge!r} is not two tokens split by a space"
            )
        pairs.append((left, right))

    backend = _Backend(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False))
    backend.pre_tokenizer = _pre_tokenizer(pre)
    if add_space_prefix:
        backend.normalizer = _space_prefix()
    backend.decoder = decoders.ByteLevel()
    if types is not None:
        control = [t for t, k in zip(spelled, types, strict=True) if k == _CONTROL]
        user = [t for t, k in zip(spelled, types, strict=True) if k == _USER_DEFINED]
        # Control tokens are special (skippable on decode); user-defined ones stay in text.
        backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])
        backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in user])

    n = len(tokens)
    special_ids = {
        name: _optional_id(meta, f"tokenizer.ggml.{key}", n, source)
        for name, key in (
            ("bos", "bos_token_id"),
            ("eos", "eos_token_id"),
            ("unk", "unknown_token_id"),
            ("pad", "padding_token_id"),
        )
    }
    template = _field(meta, "tokenizer.chat_template")
    return Tokenizer(
        backend,
        source=source,
        model=model,
        pre=pre,
        merges_count=len(pairs),
        special_ids=special_ids,
        add_bos=bool(_field(meta, "tokenizer.ggml.add_bos_token") or False),
        add_eos=bool(_field(meta, "tokenizer.ggml.add_eos_token") or False),
        add_space_prefix=add_space_prefix,
        chat_template=template if isinstance(template, str) else None,
        build_seconds=time.perf_counter() - start,
    )


def check_fits(tokenizer: Tokenizer, model_vocab: int, model: str) -> None:
    """ModelFileError naming both files and both sizes when ``tokenizer`` can produce token ids
    that ``model`` (whose embedding has ``model_vocab`` rows) has no row for: they would index
    past the embedding in the first forward. A smaller tokenizer is fine (padded vocabularies)."""
    if tokenizer.vocab_size > model_vocab:
        raise ModelFileError(
            f"{tokenizer.source}: the tokenizer has {tokenizer.vocab_size:,} tokens, more than "
            f"the {model_vocab:,} of the model {model}: ids from {model_vocab:,} up have no "
            "embedding row; use a tokenizer of the model's vocabulary"
        )


def load_tokenizer(path: str | os.PathLike[str]) -> Tokenizer:
    """The tokenizer of a GGUF file's metadata, or of a Hugging Face folder's ``tokenizer.json``.

    Raises ModelFileError (naming the file) if it is not a readable GGUF or lacks tokenizer
    metadata, or the folder has no readable tokenizer; UnsupportedModelError for tokenizer
    kinds not supported.
    """
    if Path(path).is_dir():
        from assay.model.hf_tokenizer import tokenizer_from_folder  # it builds on this module

        return tokenizer_from_folder(Path(path))
    source = os.fspath(path)
    try:
        # assay's bounds-checked header parser: ~8x faster than gguf.GGUFReader on a 49k-token
        # vocabulary, which every training process pays.
        header = read_header(Path(source))
    except (OSError, ValueError) as exc:
        raise ModelFileError(f"{source}: not a readable GGUF file ({exc})") from exc
    return tokenizer_from_metadata(header.metadata, source)
