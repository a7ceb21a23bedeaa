"""``precision: bf16`` and ``compile: true``: each setting takes effect, a bf16 streamed run
recomputes under the forward's autocast (bitwise the resident bf16 run), a compiled run stays
within rounding of eager and resumes bit for bit, and impossible combinations are one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from assay.cli import main
from assay.errors import ConfigError
from assay.settings.loader import config_fingerprint, train_config_from_dict
from assay.train.loop import Trainer
from assay_testing.text_run import save_text_run

STEPS = 4


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    return save_text_run(tmp_path_factory.mktemp("precision"), seed=2)


def config(tmp: Path, files: dict, name: str, **extra):
    body = {
        **files,
        "storage": "float32",
        "steps": STEPS,
        "seed": 1,
        "adapter": {"method": "lora", "rank": 2, "alpha": 4, "targets": ["q_proj", "v_proj"]},
        "output": {"dir": str(tmp / name), "save_every": 2},
        **extra,
    }
    return train_config_from_dict(body, tmp / f"{name}.yaml")


def run(trainer: Trainer, steps: int = STEPS) -> tuple[list[float], dict[str, torch.Tensor]]:
    losses = [trainer.train_step().loss for _ in range(steps)]
    return losses, {n: p.detach().clone() for n, p in trainer.params.items()}


def matmul_dtypes(trainer: Trainer) -> set[torch.dtype]:
    """The dtypes the first layer's q projection produced during one step."""
    seen: set[torch.dtype] = set()
    layer = trainer.base.layers[0].self_attn.q_proj
    handle = layer.register_forward_hook(lambda _m, _a, out: seen.add(out.dtype))
    trainer.train_step()
    handle.remove()
    return seen


def test_bf16_runs_the_layers_in_bfloat16_and_float32_does_not(tmp_path, files):
    assert matmul_dtypes(Trainer(config(tmp_path, files, "f"), progress=False)) == {torch.float32}
    bf16 = Trainer(config(tmp_path, files, "b", precision="bf16"), progress=False)
    assert matmul_dtypes(bf16) == {torch.bfloat16}
    assert all(p.dtype == torch.float32 for p in bf16.params.values())  # master weights


def test_bf16_moves_the_numbers_by_rounding_only(tmp_path, files):
    eager, _ = run(Trainer(config(tmp_path, files, "f"), progress=False))
    bf16, _ = run(Trainer(config(tmp_path, files, "b", precision="bf16"), progress=False))
    assert bf16 != eager  # the setting took effect
    assert max(abs(a - b) / abs(b) for a, b in zip(bf16, eager, strict=True)) < 1e-2


@pytest.mark.parametrize("recompute", [True, False])
def test_a_streamed_bf16_run_is_bitwise_the_resident_one(tmp_path, files, recompute):
    """The streamed backward recomputes each layer; it must do so under the forward's
    autocast, or its gradients are float32 ones for a bfloat16 forward."""
    resident = run(Trainer(config(tmp_path, files, "r", precision="bf16"), progress=False))
    stream = {"tier": "ram", "buffers": 2, "recompute": recompute}
    trainer = Trainer(config(tmp_path, files, "s", precision="bf16", stream=stream), progress=False)
    streamed = run(trainer)
    assert streamed[0] == resident[0]
    assert all(torch.equal(streamed[1][n], t) for n, t in resident[1].items())


@pytest.mark.slow
def test_compiled_run_is_eager_within_rounding_and_resumes_bitwise(tmp_path, files):
    eager, _ = run(Trainer(config(tmp_path, files, "eager"), progress=False))
    straight = Trainer(config(tmp_path, files, "straight", compile=True), progress=False)
    compiled, weights = run(straight)
    assert max(abs(a - b) / abs(b) for a, b in zip(compiled, eager, strict=True)) < 1e-5
    first = Trainer(config(tmp_path, files, "split", compile=True), progress=False)
    run(first, 2)
    first.save()
    resumed = Trainer(config(tmp_path, files, "split", compile=True), progress=False)
    assert resumed.resume(tmp_path / "split") == 2
    rest, resumed_weights = run(resumed, STEPS - 2)
    assert rest == compiled[2:]
    assert all(torch.equal(resumed_weights[n], t) for n, t in weights.items())


def test_compile_with_stream_is_one_line_naming_compile(tmp_path, files, capsys):
    body = {**files, "steps": 1, "compile": True, "stream": {"tier": "ram"}}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(body))
    assert main(["train", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "compile" in err and str(path) in err, err


@pytest.mark.parametrize("cxx", ["", "/bin/false", "/nonexistent/g++"])
def test_a_compiler_that_cannot_run_is_refused_before_any_step(tmp_path, files, monkeypatch, cxx):
    """$CXX is what torch's inductor calls: set but empty, failing or missing, it is refused
    in one line naming it, not a compiler traceback at the first step."""
    monkeypatch.setenv("CXX", cxx)
    with pytest.raises(ConfigError, match=r"compile: .*no working compiler .*\$CXX="):
        Trainer(config(tmp_path, files, "c", compile=True), progress=False)


def test_compile_without_a_compiler_is_refused_before_any_step(tmp_path, files, monkeypatch):
    monkeypatch.setattr("assay.train.build.shutil.which", lambda _name: None)
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(ConfigError, match=r"compile: .*no working compiler"):
        Trainer(config(tmp_path, files, "c", compile=True), progress=False)


def test_the_defaults_leave_old_fingerprints_alone_and_the_others_change_them(tmp_path, files):
    plain = config_fingerprint(config(tmp_path, files, "a"))
    assert config_fingerprint(config(tmp_path, files, "a", precision="float32")) == plain
    assert config_fingerprint(config(tmp_path, files, "a", compile=False)) == plain
    assert config_fingerprint(config(tmp_path, files, "a", precision="bf16")) != plain
    assert config_fingerprint(config(tmp_path, files, "a", compile=True)) != plain
