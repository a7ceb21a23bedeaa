"""gate-scale: a model several times larger than the memory it is given trains, and memory and
time against depth, at TinyLlama-1.1B's width.

Random-weight models of TinyLlama-1.1B's published shape (hidden 2048, intermediate 5632, 32
heads, 4 KV heads, vocab 32000, untied head) at 4, 8, 16 and 22 layers are written once per
cache (assay_testing.scale_models). LoRA r8/alpha 16 on the attention projections, seq 256,
micro-batch 1, AdamW, assay's chunked CE. "Streamed" is the disk tier with 2 buffers, loaded one
layer at a time into its shards (assay.stream.offload) and recomputing each layer in backward.

- **fits**: `assay train` runs inside a memory cgroup (the kernel kills at the limit) of 2.0
  GiB (float32) and 1.25 GiB (NF4 double-quant), with 4.4 GB of fp32 weights. Controls: the
  resident config under the same limit (the fit check refuses it) and the streamed config under
  a quarter of the limit with ``--force`` (the kernel kills it). The page cache is emptied before
  each run, so the model file's pages are charged to the run that maps or reads them. The
  resident config forced past the fit check is reported too (its fp32 weights are views of the
  mapped file, which the kernel pages in and out under the limit), and judged with the fit
  check's other answers (predict.false_fits).
- **peak / depth**: peak RSS of the step (VmHWM reset after the load; the loaded set counts) in
  a fresh process per subject and depth (assay_bench.scale_step), against transformers + PEFT
  resident fp32 and against depth. Controls: the same ratios of the resident run.
- **time**: the streamed step against depth (a line: per-layer cost between the deepest two
  depths over the shallowest two) and against the resident step with the same recomputation
  (activation checkpointing), warm page cache. Control: the streamed run with a copy engine
  that sleeps 0.04 s x the layer's index per fetch, injected from outside.
- **on a GPU** (a CUDA session, as harness/gpu_qualify.sh runs it): fits, peak and depth for
  device memory, the process held to 1 GiB of VRAM with the 22-layer model streamed from the
  RAM tier (support.scale.vram); a CUDA session measures only these, a CPU one only the rest.
- **exact / predictor**: one streamed step's gradients against the resident step's at 22
  layers (control: defect stream.pool.reuse_busy_slot); the predictor's fit decisions for the
  limits, and its peak against the same plan measured at the tensor level.

The gate runs by name (`nox -s gate-scale`), never in `nox -s gates`: about an hour on 2 cores.
"""

from __future__ import annotations

import shutil

import pytest

from assay.qualify import Threshold
from assay.qualify.plugin.environment import resolve_device
from assay_bench.scale_train import limited_train, train_config, workspace
from assay_testing.defects import reporting_children
from assay_testing.memory_limit import LimitUnavailable
from support.scale.runs import (
    DEPTHS,
    GIB,
    SHAPE,
    line_fit,
    marginal_ratio,
    models,
    plot,
    ratio_claim,
    step_run,
)
from support.scale.vram import VRAM_CLAIMS, claim_vram, vram_runs

HEADLINE = "fits.float32"
GATE_COVERAGE = False  # timing claims: no tracer in the gate or its children

LIMITS = {"float32": 2.0 * GIB, "nf4_double_quant": 1.25 * GIB}
LOADED_CODE = (
    "assay.stream",
    "assay.train.build",
    "assay.storage",
    "assay.model.loader",
    "assay.adapters.attachment",
)
STREAM_CODE = (*LOADED_CODE, "assay_bench.scale_step")
TRAIN_CODE = (
    "assay.cli.train",
    "assay.memory.plan",
    "assay.memory.cgroup",
    "assay_bench.scale_train",
    *LOADED_CODE,
)
RUN_TIMEOUT = 240  # s: a run thrashing under its limit may crawl; past this it has not completed
COPY_DELAY = 0.04  # s x layer index per fetch: the control's fetch cost grows with depth
FIGURE_SUBJECTS = ("resident-ckpt", "stream-ram", "stream-disk", "peft")


def _gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def measuring_device(config) -> str:
    """The device this gate session measures on (``--gate-device``, resolved)."""
    return resolve_device(config.getoption("gate_device", None) or config.getini("gate_device"))


@pytest.fixture(scope="module")
def scale(tmp_path_factory, pytestconfig):
    if measuring_device(pytestconfig) == "cuda":
        pytest.skip("a CUDA session of gate-scale measures device memory only (test_vram_*)")
    root = tmp_path_factory.mktemp("scale")
    found = {"models": models(), "space": workspace(root / "workspace"), "cache": root / "cache"}
    with reporting_children():  # the measuring children report the code they ran
        yield found
    shutil.rmtree(root / "cache", ignore_errors=True)  # several GB of stream shards


# (name, streamed, --force, fraction of the limit): the user's streamed config; the resident
# config (the fit check refuses it) and the same forced; the streamed config under a quarter of
# the limit, below what its process needs without its weights (the fit check's answer), and the
# same forced, which the kernel must kill.
# (the run asked, the run that shows what happens, its fraction of the limit) of each fit decision
DECISIONS = (
    ("streamed", "streamed", 1.0),
    ("resident", "resident-forced", 1.0),
    ("streamed-quarter", "streamed-quarter-forced", 0.25),
)
LIMITED_RUNS = (
    ("streamed", True, False, 1.0),
    ("resident", False, False, 1.0),
    ("resident-forced", False, True, 1.0),
    ("streamed-quarter", True, False, 0.25),
    ("streamed-quarter-forced", True, True, 0.25),
)


@pytest.fixture(scope="module")
def limited(scale):
    """`assay train` under each limit, for every entry of LIMITED_RUNS."""
    model, space, cache = scale["models"][DEPTHS[-1]], scale["space"], scale["cache"]
    runs = {}
    for storage, limit in LIMITS.items():
        for name, streamed, force, fraction in LIMITED_RUNS:
            config = train_config(
                space, model, f"{name}-{storage}", storage=storage, streamed=streamed
            )
            try:
                found = limited_train(
                    config, int(limit * fraction), cache=cache, force=force, timeout=RUN_TIMEOUT
                )
            except LimitUnavailable as why:
                pytest.skip(f"no memory cgroup can be made here: {why}")
            run = found["run"]
            found["refused"] = run.returncode != 0 and "--force to run anyway" in run.stderr
            runs[(storage, name)] = found
    return runs


def _ended(found: dict) -> str:
    run = found["run"]
    if found["refused"]:
        return "refused by the fit check"
    if run.oom_killed:
        return f"killed at the limit (peak RSS {_gib(run.max_rss_bytes)})"
    if run.wall_s >= RUN_TIMEOUT:
        peak = _gib(run.max_rss_bytes)
        return (
            f"stopped after {RUN_TIMEOUT} s, {found['steps']} steps: thrashing at the "
            f"limit (peak RSS {peak}, {run.major_faults:,} major faults)"
        )
    seconds = ", ".join(f"{s:.1f}" for s in found["step_seconds"]) or "none"
    return (
        f"exit {run.returncode}, {found['steps']} steps ({seconds} s), peak RSS "
        f"{_gib(run.max_rss_bytes)}, {run.major_faults:,} major page faults"
    )


def test_fits_under_a_hard_limit(gate, scale, limited):
    model = scale["models"][DEPTHS[-1]]
    gate.input("model", model / "model.safetensors")
    weights = (model / "model.safetensors").stat().st_size
    for storage, limit in LIMITS.items():
        streamed = limited[(storage, "streamed")]
        run = streamed["run"]
        claim = gate.claim(
            f"fits.{storage}",
            f"{SHAPE} shape, {DEPTHS[-1]} layers ({weights / 1e9:.1f} GB of fp32 weights, "
            f"{weights / limit:.1f}x the limit), {storage} storage, LoRA r8 attention, seq 256, "
            f"micro-batch 1, disk tier with 2 buffers and layer recompute in backward "
            f"(stream.recompute: true): `assay train` completes 2 optimizer steps inside a "
            f"memory cgroup limited to {_gib(limit)} (peak RSS, file pages included, "
            f"{_gib(run.max_rss_bytes)}; {run.wall_s:.0f} s with the load)",
            kind="memory",
            threshold=Threshold(">=", 2),
            unit=f"steps completed, {weights / 1e9:.1f} GB of weights under {_gib(limit)}",
            code=TRAIN_CODE,
        )
        claim.measure(streamed["steps"])
        claim.ran_on("cpu")
        claim.control(
            "the resident config under the same limit", limited[(storage, "resident")]["steps"]
        )
        claim.control(
            "the same streamed config under a quarter of the limit, --force",
            limited[(storage, "streamed-quarter-forced")]["steps"],
        )
        lines = [f"- {name}: {_ended(limited[(storage, name)])}" for name, *_ in LIMITED_RUNS]
        cache = streamed["page_cache"] or "emptied before each run, so every page counts"
        gate.note(
            f"{storage} under {_gib(limit)} ({run.controller}; quarter runs under "
            f"{_gib(limit / 4)}; page cache {cache}):\n\n" + "\n".join(lines)
        )


@pytest.fixture(scope="module")
def matrix(scale):
    """(subject -> depth -> scale_step result), the delayed control series and a cold run."""
    rows: dict[str, dict[int, dict]] = {subject: {} for subject in FIGURE_SUBJECTS}
    delayed: dict[int, dict] = {}
    cache = scale["cache"]
    for depth in DEPTHS:
        model = scale["models"][depth]
        for subject in FIGURE_SUBJECTS:
            rows[subject][depth] = step_run(subject, model, cache=cache)
        delayed[depth] = step_run(
            "stream-disk",
            model,
            cache=cache,
            steps=1,
            extra=("--copy-delay-per-layer", str(COPY_DELAY)),
        )
    cold = step_run(
        "stream-disk", scale["models"][DEPTHS[-1]], cache=cache, steps=1, extra=("--drop-caches",)
    )
    return {"rows": rows, "delayed": delayed, "cold": cold}


def test_peak_against_the_peer_and_depth(gate, matrix):
    rows = matrix["rows"]
    disk, resident, peft = rows["stream-disk"], rows["resident-ckpt"], rows["peft"]
    deep, shallow = DEPTHS[-1], DEPTHS[0]

    def peak(row: dict) -> int:
        return row["step_peak_bytes"]

    load = "load_peak_bytes"
    for claim_id, statement, unit, (num, den), control in (
        (
            "peak.vs_peft",
            f"Peak RSS of the step, 22 layers: assay streamed from disk {_gib(peak(disk[deep]))} "
            f"against transformers + PEFT resident fp32 {_gib(peak(peft[deep]))} (same model, "
            "seq, rank; each in its own process, VmHWM reset after the load)",
            "x PEFT's peak",
            (peak(disk[deep]), peak(peft[deep])),
            ("assay resident (every layer in RAM)", peak(resident[deep]) / peak(peft[deep])),
        ),
        (
            "depth.step_peak_flat",
            f"Streamed-disk step peak at {deep} layers over {shallow} layers "
            f"({_gib(peak(disk[deep]))} / {_gib(peak(disk[shallow]))})",
            "x the 4-layer peak",
            (peak(disk[deep]), peak(disk[shallow])),
            ("assay resident: the same ratio", peak(resident[deep]) / peak(resident[shallow])),
        ),
        (
            "depth.load_peak_flat",
            f"Loading into the disk tier: peak RSS of the load at {deep} layers over {shallow} "
            f"layers ({_gib(disk[deep][load])} / {_gib(disk[shallow][load])}): one layer is "
            "decoded at a time",
            "x the 4-layer load peak",
            (disk[deep][load], disk[shallow][load]),
            ("assay resident load: the same ratio", resident[deep][load] / resident[shallow][load]),
        ),
    ):
        bound = 0.30 if claim_id == "peak.vs_peft" else 1.10
        ratio_claim(
            gate,
            claim_id,
            statement,
            bound=bound,
            unit=unit,
            measured=num / den,
            control=control,
            code=STREAM_CODE,
            device="cpu",
        )
    gate.figure(
        plot(rows),
        "Peak RSS of the step and seconds per step against depth "
        "(TinyLlama-1.1B width, seq 256, LoRA r8 attention)",
    )
    table = [
        "| subject | " + " | ".join(f"{d} layers" for d in DEPTHS) + " |",
        "|---|" + "---|" * len(DEPTHS),
    ]
    for subject, by_depth in rows.items():
        cells = [
            f"{_gib(by_depth[d]['step_peak_bytes'])}, {by_depth[d]['median_step_s']:.1f} s"
            for d in DEPTHS
        ]
        table.append(f"| {subject} | " + " | ".join(cells) + " |")
    gate.note("Peak RSS of the step and median step time:\n\n" + "\n".join(table))


def test_time_against_depth(gate, matrix):
    rows, delayed, cold = matrix["rows"], matrix["delayed"], matrix["cold"]
    disk, resident = rows["stream-disk"], rows["resident-ckpt"]
    seconds = [disk[d]["median_step_s"] for d in DEPTHS]
    fit = line_fit(list(DEPTHS), seconds)
    linear = gate.claim(
        "time.linear_in_depth",
        f"Streamed-disk step time against depth {list(DEPTHS)}: "
        f"{', '.join(f'{s:.1f}' for s in seconds)} s; line R² {fit['r2']:.4f}, slope "
        f"{fit['slope']:.2f} s per layer; judged by the per-layer cost between the two deepest "
        f"runs over that between the two shallowest (1 on a line)",
        kind="performance",
        threshold=Threshold("<=", 1.20),
        unit="x the shallow per-layer cost",
        code=STREAM_CODE,
    )
    linear.measure(round(marginal_ratio(list(DEPTHS), seconds), 4))
    linear.ran_on("cpu")
    slow = [delayed[d]["median_step_s"] for d in DEPTHS]
    linear.control(
        f"fetch delayed {COPY_DELAY} s x layer index", round(marginal_ratio(list(DEPTHS), slow), 4)
    )
    deep = DEPTHS[-1]
    ratio = disk[deep]["median_step_s"] / resident[deep]["median_step_s"]
    cost = gate.claim(
        "time.streamed_over_resident",
        f"22 layers, warm page cache: streamed-disk step {disk[deep]['median_step_s']:.1f} s "
        f"against the resident step with the same recomputation (activation checkpointing) "
        f"{resident[deep]['median_step_s']:.1f} s",
        kind="performance",
        threshold=Threshold("<=", 1.30),
        unit="x the resident step",
        code=STREAM_CODE,
    )
    cost.measure(round(ratio, 4))
    cost.ran_on("cpu")
    cost.control(
        f"fetch delayed {COPY_DELAY} s x layer index",
        round(delayed[deep]["median_step_s"] / resident[deep]["median_step_s"], 4),
    )
    peft = rows["peft"][deep]["median_step_s"]
    cold_line = (
        f"cold page cache (dropped after the load): {cold['median_step_s']:.1f} s per step, "
        f"{cold['median_step_s'] / resident[deep]['median_step_s']:.2f}x the resident step"
        if cold["page_cache_dropped"]
        else f"cold page cache not measured: {cold['page_cache_note']}"
    )
    gate.note(
        f"Line fit of the streamed-disk step time: R² {fit['r2']:.4f}, slope "
        f"{fit['slope']:.3f} s/layer, intercept {fit['intercept']:.2f} s. At 22 layers: "
        f"{cold_line}; streamed RAM {rows['stream-ram'][deep]['median_step_s']:.1f} s; "
        f"transformers + PEFT (resident, no recomputation) {peft:.1f} s. Threads: "
        f"{disk[deep]['threads']}."
    )


def test_streamed_gradients_exact_at_scale(gate, scale):
    from support.scale.runs import child

    model = scale["models"][DEPTHS[-1]]
    env = {"ASSAY_CACHE": str(scale["cache"])}
    clean = child("assay_bench.scale_exact", str(model), env=env)
    claim = gate.claim(
        "exact.gradients_22_layers",
        f"22 layers, fp32: one streamed-disk step's {clean['gradients']} trainable gradients "
        f"torch.equal the resident step's (loss equal: {clean['loss_equal']})",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="unequal gradients",
        code=(*LOADED_CODE, "assay_bench.scale_exact"),
    )
    claim.measure(clean["unequal_gradients"])
    claim.ran_on("cpu")
    broken = child(
        "assay_bench.scale_exact", str(model), "--defect", "stream.pool.reuse_busy_slot", env=env
    )
    claim.control("defect stream.pool.reuse_busy_slot", broken["unequal_gradients"])


def test_predictor_at_scale(gate, scale, limited):
    from assay.memory.measure import measure_in_subprocess
    from assay.memory.plan import header_config, plan_from_config
    from assay.memory.predict import predict, with_changes
    from assay.settings.loader import load_train_config

    header = header_config(scale["models"][DEPTHS[-1]])
    cases, control = [], []
    for storage, limit in LIMITS.items():
        for asked, outcome, fraction in DECISIONS:
            let_through = not limited[(storage, asked)]["refused"]
            completed = limited[(storage, outcome)]["steps"] >= 2
            cases.append((storage, asked, let_through, completed))
            plan = plan_from_config(load_train_config(limited[(storage, asked)]["config"]), header)
            found = predict(plan)
            weightless = found.total - found.terms["weights"]
            control.append(weightless <= limit * fraction and not completed)
    false_fits = sum(through and not done for _, _, through, done in cases)
    refusals = [f"{s} {a}" for s, a, through, done in cases if not through and done]
    answers = [
        f"{s} {a}: {'let through' if t else 'refused'}, "
        f"{'completes' if d else 'does not complete'} when forced"
        for s, a, t, d in cases
    ]
    also = f". Refused yet completed when forced: {', '.join(refusals)}" if refusals else ""
    fit = gate.claim(
        "predict.false_fits",
        "`assay train`'s fit check (the predictor against what the memory cgroup has left) "
        f"lets no run through that the kernel then kills: {'; '.join(answers)}{also}",
        kind="memory",
        threshold=Threshold("==", 0),
        unit="runs let through and killed",
        code=("assay.memory.predict", "assay.memory.plan", "assay.memory.cgroup"),
    )
    fit.measure(false_fits)
    fit.ran_on("cpu")
    fit.control("the predictor without its weights term", sum(control))
    plan = plan_from_config(load_train_config(limited[("float32", "streamed")]["config"]), header)
    predicted = predict(plan).total
    measured = measure_in_subprocess(plan.to_dict(), timeout=3600)["device_peak_bytes"]
    error = gate.claim(
        "predict.peak_error",
        f"Streamed-disk fp32 plan at {DEPTHS[-1]} layers: predicted peak {_gib(predicted)} "
        f"against the tensor-level peak measured for the same plan {_gib(measured)}",
        kind="memory",
        threshold=Threshold("<=", 0.05),
        unit="relative error",
        code=("assay.memory.predict", "assay.memory.measure"),
    )
    error.measure(round(abs(predicted - measured) / measured, 4))
    error.ran_on("cpu")
    one = predict(with_changes(plan, stream_buffers=1)).total
    error.control(
        "the predictor counting one stream buffer", round(abs(one - measured) / measured, 4)
    )


def test_vram_claims_on_a_gpu(gate, tmp_path):
    """Claims 1 to 3 for device memory (support.scale.vram): only a CUDA session measures them."""
    if gate.device != "cuda":
        for claim in VRAM_CLAIMS:
            gate.not_tested(claim, f"gate device is {gate.device}: harness/gpu_qualify.sh runs it")
        pytest.skip("no CUDA device")
    with reporting_children():
        runs = vram_runs(tmp_path / "cache")
    claim_vram(gate, runs)
