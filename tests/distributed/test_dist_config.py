"""The ``distributed`` config section, its one-line errors, and the torchrun context."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from assay.cli import main
from assay.distributed.context import DistContext, init, launched, resolve_backend
from assay.errors import ConfigError
from assay.settings import DistributedConfig
from assay.settings.loader import (
    check_distributed,
    config_as_yaml,
    config_fingerprint,
    load_train_config,
    train_config_from_dict,
)

MINIMAL = "model: m.gguf\ndata:\n  train: d.jsonl\nsteps: 3\n"


def _error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_train_config(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(path))
    return message


def test_defaults_and_absent_section(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(MINIMAL)
    assert load_train_config(path).distributed is None
    path.write_text(MINIMAL + "distributed: {}\n")
    assert load_train_config(path).distributed == DistributedConfig("ddp", "auto")


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("distributed: {strategy: zero3}\n", "distributed.strategy: 'zero3' is not one of"),
        ("distributed: {stratgy: ddp}\n", "distributed.stratgy: unknown key (did you mean"),
        ("distributed: {backend: mpi}\n", "distributed.backend: 'mpi' is not one of"),
        (
            "distributed: {strategy: fsdp}\nstream: {tier: ram}\n",
            "distributed.strategy: fsdp cannot shard a streamed base",
        ),
        (
            "distributed: {strategy: fsdp}\nstorage: nf4\n",
            "distributed.strategy: fsdp shards parameters, and storage nf4",
        ),
        (
            "distributed: {strategy: fsdp}\nstorage: bf16\n",
            "use storage float32 or strategy ddp",
        ),
        (
            "distributed: {strategy: fsdp}\nadapter: {method: tinylora}\n",
            "distributed.strategy: fsdp shards each layer's parameters as a group of its own",
        ),
    ],
)
def test_impossible_or_misspelt_settings_are_one_line_errors(tmp_path, extra, expected):
    assert expected in _error(tmp_path, MINIMAL + extra)


def test_fsdp_trains_tinylora_with_a_vector_per_target(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(
        MINIMAL
        + "distributed: {strategy: fsdp}\nadapter: {method: tinylora, sharing: per_target}\n"
    )
    assert load_train_config(path).adapter.sharing == "per_target"


def test_ddp_composes_with_streaming_and_nf4(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(MINIMAL + "distributed: {strategy: ddp}\nstream: {tier: disk}\nstorage: nf4\n")
    config = load_train_config(path)
    assert config.distributed.strategy == "ddp" and config.stream.tier == "disk"


def test_distributed_section_is_outside_the_fingerprint_and_round_trips(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(MINIMAL)
    plain = load_train_config(path)
    path.write_text(MINIMAL + "distributed: {strategy: fsdp, backend: gloo}\n")
    sharded = load_train_config(path)
    # A checkpoint of a torchrun job resumes in a plain process with the plain config.
    assert config_fingerprint(plain) == config_fingerprint(sharded)
    body = config_as_yaml(sharded)
    assert body["distributed"] == {"strategy": "fsdp", "backend": "gloo"}
    assert "distributed" not in config_as_yaml(plain)
    assert train_config_from_dict(body, path) == sharded


def test_cli_strategy_override_is_checked_like_the_config_in_a_torchrun_job(
    tmp_path, capsys, monkeypatch
):
    path = tmp_path / "run.yaml"
    path.write_text(MINIMAL + "stream: {tier: ram}\n")
    monkeypatch.setenv("WORLD_SIZE", "2")  # as torchrun sets it; the check comes before init
    monkeypatch.setenv("RANK", "0")
    assert main(["train", str(path), "--strategy", "fsdp"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert f"{path}: distributed.strategy: fsdp cannot shard" in err


def test_a_plain_process_ignores_the_strategy_flag_as_help_says(tmp_path, monkeypatch):
    """Issue 52, rule 6: a plain process used to refuse --strategy fsdp over a storage check
    for a strategy it never runs (a legal input refused)."""
    from assay.cli.train import _with_strategy

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "run.yaml"
    path.write_text(MINIMAL + "stream: {tier: ram}\n")
    config = load_train_config(path)
    assert _with_strategy(config, "fsdp") is config


def test_cli_strategy_override_replaces_the_config_value(tmp_path, monkeypatch):
    from assay.cli.train import _with_strategy

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    path = tmp_path / "run.yaml"
    path.write_text(MINIMAL + "distributed: {strategy: ddp, backend: gloo}\n")
    config = _with_strategy(load_train_config(path), "fsdp")
    assert config.distributed == DistributedConfig("fsdp", "gloo")
    assert _with_strategy(config, None) is config


def test_rank_prefix_names_the_rank_of_a_failing_process(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    assert main(["train", str(tmp_path / "missing.yaml")]) == 2
    assert capsys.readouterr().err.startswith("assay: error: [rank 1] ")


def test_backend_choice_and_its_errors():
    assert resolve_backend("auto", "cpu") == "gloo"
    assert resolve_backend("auto", "cuda:1") == "nccl"
    assert resolve_backend("gloo", "cuda") == "gloo"
    with pytest.raises(ConfigError, match=r"^run.yaml: distributed.backend: nccl needs CUDA"):
        resolve_backend("nccl", "cpu", "run.yaml: distributed.backend")


def test_a_plain_process_gets_an_inactive_context(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert not launched()
    context = init("cpu")
    assert context == DistContext(device="cpu")
    assert context.is_main and context.all_reduce_sum([1, 2.5]) == [1.0, 2.5]
    context.barrier()
    context.close()  # nothing to close


def test_finishing_waits_for_every_rank_before_the_group_is_destroyed(monkeypatch):
    import torch.distributed as dist

    calls: list[str] = []
    monkeypatch.setattr(dist, "barrier", lambda: calls.append("barrier"))
    monkeypatch.setattr(dist, "is_initialized", lambda: "destroy" not in calls)
    monkeypatch.setattr(dist, "destroy_process_group", lambda: calls.append("destroy"))
    context = DistContext(world_size=2, active=True, owns_group=True)
    context.finish()
    context.close()  # the error path's close after a finish is a no-op
    assert calls == ["barrier", "destroy"]


def test_bad_torchrun_environment_is_a_one_line_error(monkeypatch):
    monkeypatch.setenv("RANK", "zero")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match=r"^environment: RANK='zero' is not an integer$"):
        init("cpu")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"MASTER_ADDR": None}, r"^environment: MASTER_ADDR is not set \(torchrun sets it"),
        ({"MASTER_PORT": None}, r"^environment: MASTER_PORT is not set"),
        ({"MASTER_PORT": "70000"}, r"^environment: MASTER_PORT=70000: expected a port 1..65535$"),
        ({"RANK": "2"}, r"^environment: RANK=2: expected 0..1 \(WORLD_SIZE=2\)$"),
        ({"RANK": "-1"}, r"^environment: RANK=-1: expected 0..1"),
        ({"WORLD_SIZE": "0", "RANK": "0"}, r"^environment: WORLD_SIZE=0: expected 1 or more$"),
        ({"LOCAL_RANK": "-3"}, r"^environment: LOCAL_RANK=-3: expected 0 or more$"),
        ({"ASSAY_DIST_TIMEOUT_S": "-5"}, r"^environment: ASSAY_DIST_TIMEOUT_S=-5: expected"),
        ({"ASSAY_DIST_TIMEOUT_S": "9" * 30}, r"ASSAY_DIST_TIMEOUT_S=9{30}: expected seconds 1\.\."),
    ],
)
def test_an_incomplete_or_impossible_torchrun_environment_is_refused_by_name(
    monkeypatch, changes, message
):
    env = {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29500",
        "ASSAY_DIST_TIMEOUT_S": None,
    }
    for name, value in {**env, **changes}.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=message):
        init("cpu")  # refused before any rendezvous: a mistake here would hang, not fail


def test_distributed_config_is_a_plain_dataclass():
    assert dataclasses.asdict(DistributedConfig()) == {"strategy": "ddp", "backend": "auto"}
    assert yaml.safe_dump(dataclasses.asdict(DistributedConfig("fsdp")))


def test_kto_is_refused_under_distributed_naming_the_loss(tmp_path):
    """KTO's reference KL comes from mismatched pairs of a rank's own rows: split over ranks it
    is another objective, so a distributed section (or a torchrun job) refuses it."""
    from assay_testing.text_run import save_text_run

    config = {**save_text_run(tmp_path, seed=1), "steps": 1, "loss": {"type": "kto"}}
    config["data"] = {**config["data"], "format": "kto"}
    path = tmp_path / "kto.yaml"
    path.write_text(yaml.safe_dump({**config, "distributed": {"strategy": "ddp"}}))
    with pytest.raises(ConfigError, match=r"loss\.type: kto estimates its reference KL"):
        load_train_config(path)
    path.write_text(yaml.safe_dump(config))
    plain = load_train_config(path)  # one process: fine
    with pytest.raises(ConfigError, match=r"loss\.type"):
        check_distributed(plain, launched=True)
