"""`assay estimate --shape NAME`: a plan for a published shape, with nothing read or built."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assay.cli import main
from assay.model.shapes import SHAPES, named_shape, parameter_count
from assay.settings import default


@pytest.fixture
def estimate(capsys, monkeypatch):
    """Run ``assay estimate ARGS --json``: (exit code, parsed output). Reading a model file or
    header fails the test, so every answer here comes from the shape alone."""

    def no_reading(*_args, **_kwargs):
        raise AssertionError("estimate --shape read a model")

    monkeypatch.setattr("assay.cli.estimate.header_config", no_reading)
    monkeypatch.setattr("assay.train.preflight.model_config", no_reading)

    def run(*args: str) -> tuple[int, dict]:
        code = main(["estimate", *args, "--json"])
        return code, json.loads(capsys.readouterr().out)

    return run


def refused(capsys, *args: str) -> str:
    """The one stderr line of an estimate refused for bad input (exit 2, no traceback)."""
    try:
        code = main(["estimate", *args])
    except SystemExit as exited:  # argparse's refusals
        code = exited.code
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_streaming_tinyllama_needs_less_than_resident(estimate):
    _, resident = estimate("--shape", "tinyllama-1.1b")
    _, streamed = estimate("--shape", "tinyllama-1.1b", "--stream-buffers", "2")
    assert streamed["plan"]["stream_buffers"] == 2 and resident["plan"]["stream_buffers"] is None
    assert resident["prediction"]["total_bytes"] > streamed["prediction"]["total_bytes"]
    # a resident fp32 base is four bytes per parameter: the plan holds the whole shape
    params = parameter_count(named_shape("tinyllama-1.1b"))
    assert resident["prediction"]["terms"]["weights"] == 4 * params


def test_json_carries_the_shape_and_its_depth(estimate):
    code, result = estimate("--shape", "llama-3.2-3b", "--layers", "3")
    assert code == 0 and result["fits"] is None and result["budget_bytes"] is None
    assert result["shape"] == {
        "name": "llama-3.2-3b",
        "layers": 3,
        "parameters": parameter_count(named_shape("llama-3.2-3b", 3)),
        "settings": "assay train's defaults",
    }
    model = result["plan"]["model"]
    assert model["num_layers"] == 3 and model["hidden_size"] == 3072
    _, full = estimate("--shape", "llama-3.2-3b")
    assert full["shape"]["layers"] == 28
    assert full["prediction"]["total_bytes"] > result["prediction"]["total_bytes"]


def test_without_a_config_the_plan_is_assay_trains_defaults(estimate):
    _, result = estimate("--shape", "smollm2-135m")
    plan = result["plan"]
    assert plan["method"] == default("adapter.method")
    assert plan["rank"] == default("adapter.rank", "lora")
    assert tuple(plan["targets"]) == default("adapter.targets", "lora")
    assert plan["storage"] == default("storage") and plan["stream_buffers"] is None
    assert plan["seq_len"] == default("data.seq_len")
    assert plan["micro_batch"] == default("batch.micro_batch")
    assert plan["loss"] == default("loss.type")


def test_options_change_one_setting_each(estimate):
    _, base = estimate("--shape", "tinyllama-1.1b")
    _, nf4 = estimate("--shape", "tinyllama-1.1b", "--storage", "nf4")
    _, short = estimate("--shape", "tinyllama-1.1b", "--seq", "128")
    assert nf4["plan"]["storage"] == "nf4" and short["plan"]["seq_len"] == 128
    weights = base["prediction"]["terms"]["weights"]
    assert nf4["prediction"]["terms"]["weights"] < weights / 4
    activations = base["prediction"]["terms"]["activations"]
    assert short["prediction"]["terms"]["activations"] < activations


def test_a_budget_gives_the_verdict_and_the_exit_code(estimate):
    code, fits = estimate("--shape", "tinyllama-1.1b", "--stream-buffers", "2", "--budget", "8GiB")
    assert code == 0 and fits["fits"] is True and fits["budget_bytes"] == 8 * 2**30
    code, over = estimate("--shape", "tinyllama-1.1b", "--budget", "2GiB")
    assert code == 1 and over["fits"] is False
    assert any(f["knob"] == "streaming with 2 buffers" for f in over["fixes"])


def test_a_config_with_a_shape_keeps_its_settings_and_needs_no_model(tmp_path, estimate):
    config = tmp_path / "run.yaml"
    config.write_text(
        "model: missing.gguf\ndata: {train: missing.jsonl, seq_len: 128}\nsteps: 1\n"
        "adapter: {method: lora, rank: 4}\nbatch: {micro_batch: 2}\nstream: {buffers: 3}\n"
        "budget: 64GiB\n"
    )
    code, result = estimate(str(config), "--shape", "tinyllama-1.1b")
    plan = result["plan"]
    assert code == 0 and result["fits"] is True and result["budget_bytes"] == 64 * 2**30
    assert (plan["rank"], plan["seq_len"], plan["micro_batch"]) == (4, 128, 2)
    assert plan["stream_buffers"] == 3 and plan["model"]["hidden_size"] == 2048
    assert result["shape"]["settings"] == str(config)
    _, resident = estimate(str(config), "--shape", "tinyllama-1.1b", "--stream-buffers", "0")
    assert resident["plan"]["stream_buffers"] is None and resident["plan"]["rank"] == 4


def test_text_output_names_the_shape_and_the_settings(capsys):
    assert main(["estimate", "--shape", "tinyllama-1.1b", "--stream-buffers", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("tinyllama-1.1b at 22 layers (1,100,048,384 parameters)")
    assert "streamed, 2 buffers" in out and "no budget given" in out


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--shape", "tinyllama"], ["--shape", *SHAPES]),
        (
            ["--shape", "tinyllama-1.1b", "--layers", "0"],
            ["--layers", "positive integer up to 1024"],
        ),
        (
            ["--shape", "tinyllama-1.1b", "--layers", "-2"],
            ["--layers", "positive integer up to 1024"],
        ),
        (["--shape", "tinyllama-1.1b", "--budget", "4XB"], ["--budget", "4GiB"]),
        (["--shape", "tinyllama-1.1b", "--budget", "0"], ["--budget", "at least 1 byte"]),
        (
            ["--shape", "tinyllama-1.1b", "--stream-buffers", "1"],
            ["--stream-buffers", "at least 2"],
        ),
        (["--shape", "tinyllama-1.1b", "--stream-buffers", "23"], ["--stream-buffers", "2..22"]),
        (["--shape", "tinyllama-1.1b", "--seq", "4096"], ["--seq", "2..2048"]),
        (["--layers", "2"], ["--layers", "--shape"]),
        ([], ["CONFIG", "--shape"]),
    ],
)
def test_bad_input_is_one_line_naming_the_option(capsys, args, names):
    err = refused(capsys, *args)
    assert all(name in err for name in names), err


def test_help_lists_the_shapes_and_the_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["estimate", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert all(name in out for name in SHAPES)
    assert f"seq {default('data.seq_len')}" in out and "--stream-buffers N" in out


@settings(max_examples=60, deadline=None)
@given(
    option=st.sampled_from(["--layers", "--seq", "--stream-buffers", "--budget"]),
    value=st.one_of(
        st.integers(-(2**70), 2**70).map(str),
        st.integers(0, 10**30).map(lambda n: f"{n}GiB"),
        st.sampled_from(["1e400GiB", "nan", "inf", "-0", "", " 3", "2.5", "0x10"]),
    ),
    layers=st.sampled_from([None, "1", "2", "1024"]),
)
def test_any_value_is_an_answer_or_one_line(option, value, layers):
    """The rule for every numeric option: whatever the value, the command answers (0 or 1) or
    refuses with one line and exit 2, never a traceback."""
    args = ["estimate", "--shape", "smollm2-135m", option, value]
    if layers is not None and option != "--layers":
        args += ["--layers", layers]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as exited:
            code = exited.code
    text = err.getvalue()
    assert code in (0, 1, 2) and "Traceback" not in text, (args, text)
    assert code != 2 or text.count("\n") == 1, (args, text)
