"""A Hugging Face folder's tokenizer (issue 51): ids, decoding and chat templates equal
transformers' ``AutoTokenizer`` on folders its ``save_pretrained`` wrote, and a broken folder is
one line naming the file and the key."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from assay.errors import ModelFileError
from assay.model.tokenizer import load_tokenizer
from assay_testing.hf_tokenizers import RESAVED_CLASSES, mismatches, save_folders

pytestmark = pytest.mark.slow  # transformers loads each folder
NAMES = ("smollm2", "byte_fallback", *RESAVED_CLASSES, "template_in_config")


@pytest.fixture(scope="module")
def folders(tmp_path_factory, smollm2_path) -> dict[str, Path]:
    return save_folders(tmp_path_factory.mktemp("hf-tokenizers"), smollm2_path)


@pytest.mark.parametrize("name", NAMES)
def test_a_folder_equals_transformers(folders, name):
    from transformers import AutoTokenizer

    folder = folders[name]
    assert mismatches(load_tokenizer(folder), AutoTokenizer.from_pretrained(folder)) == []


def test_the_post_processor_decides_what_special_tokens_add(folders):
    tokenizer = load_tokenizer(folders["byte_fallback"])
    assert tokenizer.encode("hi", add_special_tokens=True)[0] == tokenizer.bos_id
    assert tokenizer.encode("hi")[0] != tokenizer.bos_id
    assert tokenizer.summary()["add_bos_token"] and not tokenizer.summary()["add_eos_token"]


def test_chat_template_jinja_wins_over_the_config(folders, tmp_path):
    folder = tmp_path / "both"
    shutil.copytree(folders["byte_fallback"], folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = "CONFIG"
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    assert load_tokenizer(folder).chat_template == (folder / "chat_template.jinja").read_text()


def _broken(folders, tmp_path, change) -> str:
    folder = tmp_path / "broken"
    shutil.copytree(folders["byte_fallback"], folder)
    change(folder)
    with pytest.raises(ModelFileError) as info:
        load_tokenizer(folder)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_a_folder_without_tokenizer_json_is_one_line(folders, tmp_path):
    message = _broken(folders, tmp_path, lambda f: (f / "tokenizer.json").unlink())
    assert message.startswith(f"{tmp_path / 'broken'}: no tokenizer.json in the folder")


def test_a_corrupt_tokenizer_json_names_the_file(folders, tmp_path):
    message = _broken(folders, tmp_path, lambda f: (f / "tokenizer.json").write_text('{"x": 1'))
    assert message.startswith(f"{tmp_path / 'broken' / 'tokenizer.json'}: not a tokenizers file")


def test_a_special_token_outside_the_vocabulary_names_the_file_and_key(folders, tmp_path):
    def change(folder: Path) -> None:
        config = json.loads((folder / "tokenizer_config.json").read_text())
        (folder / "tokenizer_config.json").write_text(json.dumps({**config, "eos_token": "<x>"}))

    message = _broken(folders, tmp_path, change)
    assert "tokenizer_config.json: eos_token '<x>' is not a token of tokenizer.json" in message


def test_a_template_of_the_wrong_type_names_the_key(folders, tmp_path):
    def change(folder: Path) -> None:
        (folder / "chat_template.jinja").unlink()
        config = json.loads((folder / "tokenizer_config.json").read_text())
        (folder / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": 3}))

    assert "chat_template must be a string" in _broken(folders, tmp_path, change)


def test_a_template_that_does_not_parse_is_refused_at_load(folders, tmp_path):
    def change(folder: Path) -> None:
        (folder / "chat_template.jinja").write_text("{% for m in messages %}")

    assert "the chat template does not parse" in _broken(folders, tmp_path, change)


def test_the_generation_tag_renders_its_body_as_transformers_does(folders, tmp_path):
    from transformers import AutoTokenizer

    folder = tmp_path / "tagged"
    shutil.copytree(folders["byte_fallback"], folder)
    (folder / "chat_template.jinja").write_text(
        "{% for m in messages %}{% if m['role'] == 'assistant' %}{% generation %}"
        "{{ m['content'] }}{% endgeneration %}{% else %}{{ m['content'] }}{% endif %}{% endfor %}"
    )
    chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]
    theirs = AutoTokenizer.from_pretrained(folder).apply_chat_template(chat, tokenize=False)
    assert load_tokenizer(folder).apply_chat_template(chat) == theirs == "HiYo"


def test_a_post_processor_id_outside_the_vocabulary_is_refused(folders, tmp_path):
    def change(folder: Path) -> None:
        data = json.loads((folder / "tokenizer.json").read_text())
        data["post_processor"]["special_tokens"]["<s>"]["ids"] = [99999]
        (folder / "tokenizer.json").write_text(json.dumps(data))

    assert "adds token id 99999, outside the vocabulary" in _broken(folders, tmp_path, change)
