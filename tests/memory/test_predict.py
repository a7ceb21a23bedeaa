"""assay.memory.predict: pure Python, named terms, monotone in the knobs; assay estimate."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from assay.memory.plan import fixes, knobs, refusal_line, verdict
from assay.memory.predict import TERMS, Plan, predict, shape, with_changes

SMOL = shape(49152, 576, 1536, 30, 9, 3, 64, True)


def plan(**changes) -> Plan:
    return with_changes(Plan(model=SMOL, seq_len=512), **changes)


def test_predict_imports_no_torch():
    # torch is blocked: any direct or indirect import of it raises ImportError. The package
    # __init__ of assay.memory re-exports the (torch-based) accounting, so it is bypassed.
    code = textwrap.dedent(
        """
        import pathlib, sys, types
        sys.modules["torch"] = None
        import assay
        package = types.ModuleType("assay.memory")
        package.__path__ = [str(pathlib.Path(assay.__file__).parent / "memory")]
        sys.modules["assay.memory"] = package
        from assay.memory.predict import shape, Plan, predict
        p = predict(Plan(model=shape(1024, 64, 128, 2, 4, 2, 16)))
        assert p.total > 0
        print("ok", sorted(m for m in sys.modules if m.startswith("torch")))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["ok", "['torch']"]  # only the blocking placeholder


def test_torch_block_is_effective():
    # the check above would be vacuous if blocking did not stop torch-based modules
    code = 'import sys; sys.modules["torch"] = None; import assay.memory.accounting'
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode != 0 and "torch" in out.stderr


def test_terms_are_named_and_sum_to_total():
    p = predict(plan())
    assert tuple(p.terms) == TERMS
    assert sum(p.terms.values()) == p.total
    assert p.terms["allocator_slack"] == 0  # the tensor-level scope has no allocator


def test_logits_term_scales_with_vocab_times_tokens():
    small, big = predict(plan(seq_len=256)), predict(plan(seq_len=512))
    assert small.peak_phase == big.peak_phase == "loss backward"
    # log_softmax output + two [tokens, vocab] gradients, fp32, plus small per-token tensors
    per_token = (big.terms["logits_and_loss"] - small.terms["logits_and_loss"]) / 256
    assert per_token == pytest.approx(3 * 4 * 49152, rel=0.01)


def test_streaming_checkpointing_and_chunked_ce_each_lower_the_peak():
    resident = predict(plan()).total
    for change in (
        {"stream_buffers": 2},
        {"gradient_checkpointing": True},
        {"loss": "chunked_ce"},
        {"storage": "nf4"},
    ):
        assert predict(plan(**change)).total < resident, change


def test_nf4_weights_are_about_an_eighth_of_float32():
    f32, nf4 = predict(plan()).terms["weights"], predict(plan(storage="nf4")).terms["weights"]
    embed = 4 * 49152 * 576 + 4 * 576  # the tied embedding stays float32
    assert (nf4 - embed) / (f32 - embed) == pytest.approx(0.5 / 4 + 4 / 64 / 4, rel=0.02)


def test_preference_doubles_the_rows():
    assert (
        predict(plan(loss="dpo", micro_batch=1)).terms["activations"]
        == predict(plan(micro_batch=2)).terms["activations"]
    )


def test_plan_round_trips_through_a_dict():
    p = plan(stream_buffers=3, targets=("q_proj", "down_proj"))
    assert Plan.from_dict(json.loads(json.dumps(p.to_dict()))) == p


def test_refusal_names_a_knob_that_fits():
    p = plan(seq_len=2048, micro_batch=4)
    budget = 2 * 2**30
    result = verdict(p, budget)
    assert not result["fits"]
    assert result["fixes"] and all(f["total_bytes"] <= budget for f in result["fixes"])
    line = refusal_line(result)
    assert "fits with" in line and "GiB" in line
    labels = {label for label, _ in knobs(p)}
    assert {"streaming with 2 buffers", "chunked CE (chunk 1024)", "seq 1024"} <= labels


def test_fitting_plan_has_no_fixes():
    result = verdict(plan(seq_len=128), 64 * 2**30)
    assert result["fits"] and result["fixes"] == []


def test_cumulative_fix_when_no_single_knob_fits():
    p = plan(seq_len=4096, micro_batch=4)
    singles = [predict(q).total for _, q in knobs(p)]
    budget = int(min(singles) * 0.9)
    found = fixes(p, budget)
    assert len(found) == 1 and " + " in found[0][0] and found[0][1] <= budget


def test_estimate_cli_refuses_over_budget(tmp_path, smollm2_path, capsys):
    from assay.cli.dispatch import build_parser
    from assay.cli.estimate import run

    (tmp_path / "train.jsonl").write_text('{"text": "hello"}\n')
    config = tmp_path / "run.yaml"
    config.write_text(
        f"model: {smollm2_path}\ndata: {{train: train.jsonl, seq_len: 2048}}\nsteps: 1\n"
        "batch: {micro_batch: 4}\n"
    )
    args = build_parser().parse_args(["estimate", str(config), "--budget", "1GiB", "--json"])
    assert run(args) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["fits"] is False and result["fixes"]
    assert result["plan"]["model"]["num_layers"] == 30
    args = build_parser().parse_args(["estimate", str(config), "--budget", "64GiB"])
    assert run(args) == 0
    assert "fits" in capsys.readouterr().out


def test_streaming_that_keeps_activations_has_resident_activations_and_streamed_weights():
    resident = predict(plan())
    recomputing = predict(plan(stream_buffers=2))
    keeping = predict(plan(stream_buffers=2, stream_recompute=False))
    assert keeping.terms["weights"] == recomputing.terms["weights"]
    assert keeping.terms["activations"] == resident.terms["activations"]
    assert keeping.terms["activations"] > recomputing.terms["activations"]


def test_the_predictor_blocks_logsumexp_as_chunked_ce_does():
    from assay.memory import predict
    from assay.train import losses

    assert predict.LSE_ROWS == losses.LSE_ROWS
