"""The schema refuses non-finite and out-of-range numbers and unsafe ``pkg:`` references."""

from __future__ import annotations

import pytest

from assay.errors import ConfigError
from assay.settings.loader import load_train_config, parse_size, resolve_reference

BASE = "model: m.gguf\ndata: {train: t.jsonl}\nsteps: 2\n"


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ("adapter: {alpha: .nan}", "adapter.alpha"),
        ("optim: {lr: .inf}", "optim.lr"),
        ("optim: {grad_clip: .inf}", "optim.grad_clip"),
        ("optim: {betas: [0.9, .nan]}", "optim.betas[1]"),
        ("optim: {betas: [0.9, 1.0]}", "optim.betas[1]"),
        ("neftune_alpha: .inf", "neftune_alpha"),
        (f"seed: {2**70}", "seed"),
        ("stream: {buffers: 1}", "stream.buffers"),
    ],
)
def test_bad_numbers_are_refused_naming_the_field(tmp_path, extra, field):
    path = tmp_path / "c.yaml"
    path.write_text(BASE + extra + "\n")
    with pytest.raises(ConfigError) as info:
        load_train_config(path)
    assert str(info.value).startswith(f"{path}: {field}: ")


def test_the_largest_seed_is_accepted(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(BASE + f"seed: {2**63 - 1}\n")
    assert load_train_config(path).seed == 2**63 - 1


@pytest.mark.parametrize(
    "reference", ["pkg:json/../os.py", "pkg:json//etc/passwd", "pkg:json/", "pkg:json/a/../../b"]
)
def test_pkg_references_cannot_leave_their_package(reference):
    with pytest.raises(ConfigError, match="must name a file inside the package"):
        resolve_reference(reference, "model", "c.yaml")


def test_a_pkg_reference_inside_its_package_resolves():
    assert resolve_reference("pkg:json/decoder.py", "model", "c.yaml").name == "decoder.py"


def test_size_errors_list_the_accepted_units():
    with pytest.raises(ValueError, match="units: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"):
        parse_size("4Gb")
    assert parse_size("4GiB") == 4 * 2**30
    with pytest.raises(ValueError, match="a byte count is a whole number"):
        parse_size("1.5")  # never read as 1 byte
