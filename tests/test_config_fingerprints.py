"""A config's fingerprint is what lets a run resume: it must not change when the code around
it does. The values below were computed by the code before the settings package (commit
dc75320); a new setting that enters the fingerprint of configs that never set it fails here
(``assay.settings.loader.ADDED_LATER`` is where such a key is left out).
"""

from __future__ import annotations

import pytest

from assay.settings.loader import ADDED_LATER, config_fingerprint, train_config_from_dict

CASES = {
    "lora": {"adapter": {"method": "lora"}},
    "lora-dropout": {"adapter": {"method": "lora", "dropout": 0.1}},
    "rslora": {"adapter": {"method": "rslora", "rank": 16, "alpha": 8}},
    "lora_fa": {"adapter": {"method": "lora_fa"}},
    "dora-nf4": {"adapter": {"method": "dora"}, "storage": "nf4"},
    "tinylora": {"adapter": {"method": "tinylora", "u": 5, "sharing": "per_target"}},
    "full-streamed": {"adapter": {"method": "full"}, "stream": {"buffers": 2}},
    "chunked": {"loss": {"type": "chunked_ce", "chunk_size": 37}},
    "dpo": {"loss": {"type": "dpo"}, "data": {"train": "t.jsonl", "format": "preference"}},
    "kto": {"loss": {"type": "kto"}, "data": {"train": "t.jsonl", "format": "kto"}},
}

PINNED = {
    "lora": "735bd65786aa4a44e8949b455b3f554de750b57b68e804769f51f41ec8d81ade",
    "lora-dropout": "a1720ce81811529eea183e3229851ffa98de796d2712ce69beb140cc9390ab33",
    "rslora": "4b5dc1482daeeda76830e3b3828b57df3e759c6c3cbbaa22386347cf0d4aa62b",
    "lora_fa": "4e3bb6e05ddf624fd3aecbd01550eefb4dacc931f999e4b157e4ea8bd7ae2754",
    "dora-nf4": "fe673d67d6e3b9549172f6060a437010027781eb38b138dd2d32607d6615f865",
    "tinylora": "ca734e634b5885dbc66ba43732fa78a417da9b337b03e1ab5176198196684fe7",
    "full-streamed": "39b97d8e0c66049e7c7e6ebadb1e10ad8c185adcd5468eb69ad5461f5f7201c9",
    "chunked": "25f8855d4d6303710f71a4d354fc2e01412431b84a4956e00a913b076f1fd257",
    "dpo": "290260a292da35fd7a39bdeb60a03a694886d44e627861c0e64bde33df572a25",
    "kto": "3ab566c59374d03facc8c46d4de865bac780e69806d27ba2339c41e1b3160269",
}


def _fingerprint(tmp_path, extra: dict) -> str:
    (tmp_path / "t.jsonl").write_text('{"text": "x"}\n')
    raw = {"model": "m.gguf", "data": {"train": "t.jsonl"}, "steps": 10, **extra}
    return config_fingerprint(train_config_from_dict(raw, tmp_path / "c.yaml"))


@pytest.mark.parametrize("name", CASES)
def test_fingerprints_of_configs_written_before_stay(tmp_path, name):
    assert _fingerprint(tmp_path, CASES[name]) == PINNED[name]


def test_a_key_added_later_changes_the_fingerprint_once_set(tmp_path):
    """Control: the rule leaves out only the values old configs meant; setting one counts."""
    plain = _fingerprint(tmp_path, {"adapter": {"method": "lora"}})
    assert _fingerprint(tmp_path, {"adapter": {"method": "lora", "dropout": 0.1}}) != plain
    plus = {"adapter": {"method": "loraplus", "lr_ratio": 16}}
    assert _fingerprint(tmp_path, plus) != plain
    assert ("adapter", "lr_ratio") in ADDED_LATER
