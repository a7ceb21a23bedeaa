"""The tokenizer of a Hugging Face folder: ``tokenizer.json`` through the ``tokenizers`` library,
its special tokens from ``tokenizer_config.json`` (or ``special_tokens_map.json``), and its chat
template from ``chat_template.jinja`` or ``tokenizer_config.json``.

Read as transformers 5 reads a folder that its ``save_pretrained`` wrote: the file's pipeline as
written, ``chat_template.jinja`` overriding the config's template, and the file's post-processor
deciding what ``add_special_tokens`` adds (transformers 5 ignores the config's
``add_bos_token``/``add_eos_token``, and so does assay). transformers 5 rebuilds the pipeline of
some classes (``LlamaTokenizer``, ``GPT2Tokenizer``, ...) from the vocabulary; for a file that an
older version wrote the two may then differ, and assay keeps the file's, as ``tokenizers``,
vLLM and TGI do.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as _Backend

from assay.bounded import InputTooLarge, read_capped, read_json_file
from assay.errors import ModelFileError
from assay.model.tokenizer import Tokenizer

TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_FILE = "special_tokens_map.json"
TEMPLATE_FILE = "chat_template.jinja"
GENERATION_FILE = "generation_config.json"
# what a Hugging Face folder carries beside its weights for a tokenizer and generation to work:
# a merged export copies these from the folder it was loaded from
COMPANION_FILES = (TOKENIZER_FILE, CONFIG_FILE, SPECIAL_TOKENS_FILE, TEMPLATE_FILE, GENERATION_FILE)
# Gemma 3's tokenizer.json is 33 MB, the largest published; a tenfold margin
TOKENIZER_BYTES = 320 << 20
TEMPLATE_BYTES = 1 << 20
SPECIALS = ("bos", "eos", "unk", "pad")


def has_tokenizer(folder: Path) -> bool:
    """Whether ``folder`` holds a ``tokenizer.json``."""
    return (folder / TOKENIZER_FILE).is_file()


def _optional_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    data = read_json_file(path, ModelFileError)
    if not isinstance(data, dict):
        raise ModelFileError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _text(path: Path, cap: int) -> str:
    try:
        raw = read_capped(path, cap, "tokenizer file")
    except InputTooLarge as exc:
        raise ModelFileError(str(exc)) from None
    except OSError as exc:
        raise ModelFileError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ModelFileError(f"{path}: invalid UTF-8 at byte {exc.start}") from None


def _backend(path: Path) -> _Backend:
    text = _text(path, TOKENIZER_BYTES)
    try:
        return _Backend.from_str(text)
    except Exception as exc:  # the Rust parser raises plain Exception for every defect
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ModelFileError(f"{path}: not a tokenizers file ({reason})") from None


def _token_content(value: Any) -> str | None:
    """A special token as the config writes it: a string, or an AddedToken's ``content``."""
    if isinstance(value, Mapping):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _special_id(
    backend: _Backend, configs: tuple[tuple[Path, Mapping[str, Any]], ...], name: str
) -> int | None:
    """The id of the ``<name>_token`` the first config that sets it names; ModelFileError
    naming the file and key when that token is not in the vocabulary."""
    key = f"{name}_token"
    for path, config in configs:
        if config.get(key) is None:
            continue
        content = _token_content(config[key])
        token_id = backend.token_to_id(content) if content is not None else None
        if token_id is None:
            raise ModelFileError(
                f"{path}: {key} {config[key]!r} is not a token of {TOKENIZER_FILE}"
            )
        return token_id
    return None


def _chat_template(folder: Path, config: Mapping[str, Any]) -> str | None:
    """``chat_template.jinja`` if present (it wins, as in transformers), else the config's
    template (a string, or the one named ``default`` in a list of named templates)."""
    jinja = folder / TEMPLATE_FILE
    if jinja.is_file():
        return _text(jinja, TEMPLATE_BYTES)
    template = config.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, Mapping)}
        template = named.get("default")
    if template is not None and not isinstance(template, str):
        raise ModelFileError(
            f"{folder / CONFIG_FILE}: chat_template must be a string or a list of named "
            f"templates, got {type(template).__name__}"
        )
    return template


def tokenizer_from_folder(folder: Path) -> Tokenizer:
    """The tokenizer of the Hugging Face folder ``folder``.

    Raises ModelFileError naming the file and the key for a folder without ``tokenizer.json``,
    an unreadable file or a special token missing from the vocabulary.
    """
    start = time.perf_counter()
    path = folder / TOKENIZER_FILE
    if not path.is_file():
        raise ModelFileError(
            f"{folder}: no {TOKENIZER_FILE} in the folder; set tokenizer: to a GGUF file or a "
            f"folder that has one"
        )
    backend = _backend(path)
    config_path = folder / CONFIG_FILE
    config = _optional_json(config_path)
    specials_path = folder / SPECIAL_TOKENS_FILE
    configs = ((config_path, config), (specials_path, _optional_json(specials_path)))
    special_ids = {name: _special_id(backend, configs, name) for name in SPECIALS}
    # what the post-processor puts around a text, reported as the GGUF flags are
    added = backend.encode("", add_special_tokens=True).ids
    vocab = backend.get_vocab_size(with_added_tokens=True)
    outside = [i for i in added if not 0 <= i < vocab]
    if outside:
        raise ModelFileError(
            f"{path}: the post-processor adds token id {outside[0]}, outside the vocabulary "
            f"of {vocab:,}"
        )
    return Tokenizer(
        backend,
        source=str(folder),
        model=backend.model.__class__.__name__,
        pre=TOKENIZER_FILE,
        merges_count=None,  # not exposed by the tokenizers library; counted only for GGUF
        special_ids=special_ids,
        add_bos=special_ids["bos"] is not None and added[:1] == [special_ids["bos"]],
        add_eos=special_ids["eos"] is not None and added[-1:] == [special_ids["eos"]],
        add_space_prefix=False,
        chat_template=_chat_template(folder, config),
        post_processed=True,
        build_seconds=time.perf_counter() - start,
    )
