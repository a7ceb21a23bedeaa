"""gate-robustness: every malformed input ends in one clean line and exit 2, the header parsers
survive fuzzing, kill -9 and write faults never cost the last good state, and nothing unpickles.

The corpus is generated in the session (tests/corpus/generate.py) from a fresh tiny model.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from assay.qualify import Threshold, Tolerance

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path[:0] = [str(TESTS / "corpus"), str(TESTS / "robustness")]

import crash  # noqa: E402
import export_faults  # noqa: E402
import fuzz  # noqa: E402
import fuzz_loaders  # noqa: E402
from corpus_harness import judge_message, run_case, run_case_subprocess  # noqa: E402
from corpus_inputs import INJECTION, injection_record, live_markup  # noqa: E402
from corpus_robust import CLASSES  # noqa: E402
from corpus_run import run_all  # noqa: E402
from generate import build_corpus  # noqa: E402
from unsafe_scan import scan_tree, unsafe_calls  # noqa: E402

from assay.model.gguf_header import _Cursor, read_header  # noqa: E402
from assay.model.safetensors import check_safetensors_header  # noqa: E402

# the claim a reader looks at first (the index and every record lead with it)
HEADLINE = "corpus.clean_errors"

# every writer whose files the write-fault claims tear, cut short or kill mid-write, and the
# trials that do it
WRITE_CODE = (
    "assay.atomic",
    "assay.train.checkpoint",
    "assay.adapters.peft_io",
    "assay.export",
    "assay.model.gguf_export",
    "assay.model.loader",
    "assay.stream.store",
    "assay.train.loop",
    "torn_writes",
)
EXPORT_CODE = ("assay.export", "assay.folder_manifest", "assay.atomic", "assay.adapters.peft_io")
READERS = (
    "assay.model.gguf_header",
    "assay.model.gguf",
    "assay.model.safetensors",
    "assay.model.loader",
    "assay.train.data_rows",
    "assay.train.config",
    "assay.train.config_schema",
    "assay.settings",
    "assay.settings_schema",
    "assay.train.checkpoint",
    "assay.qualify.receipt",
    "assay.qualify.render",
    "assay.cli",
    "assay.train_cli",
)
END_TO_END = ("gguf.truncated_tensor_data", "jsonl.invalid_utf8", "yaml.full_with_nf4")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return build_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def corpus_runs(corpus):
    """(outcomes, seconds per case) of every corpus case, run once in a few processes."""
    return run_all(corpus)


def test_bad_inputs_fail_cleanly(gate, corpus, corpus_runs, monkeypatch):
    outcomes = list(corpus_runs[0])
    outcomes += [run_case_subprocess(c) for c in corpus if c.name in END_TO_END]
    crashes = sum(o.crashed or o.hung for o in outcomes)
    unclean = [o for o in outcomes if not o.clean]
    kinds = sorted({c.kind for c in corpus})
    claim = gate.claim(
        "corpus.clean_errors",
        f"{len(corpus)} malformed inputs across {', '.join(kinds)} (and {len(END_TO_END)} of "
        "them again as real processes): each ends in exit 2 with one stderr line naming the "
        "file and the field, row or offset, no traceback, nothing on stdout, no file changed",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="cases not clean",
        code=[*READERS, "corpus_harness", "corpus_run", "generate"],
    )
    claim.measure(len(unclean))
    gate.note(
        f"corpus: {len(outcomes)} cases tried, {len(outcomes) - len(unclean)} clean errors, "
        f"{crashes} crashes or hangs; not clean: {[o.case.name for o in unclean] or 'none'}"
    )
    truncated = [c for c in corpus if c.kind == "gguf" and "truncated" in c.name]
    monkeypatch.setattr(_Cursor, "take", fuzz.unchecked_take)
    broken = [run_case(case) for case in truncated]
    monkeypatch.undo()
    claim.control(
        f"the {len(truncated)} truncated-GGUF cases against a parser with its bounds check removed",
        sum(not o.clean for o in broken),
    )
    nameless = [
        judge_message(o.case, o.code, o.stderr.replace(str(o.case.file), "the file"))
        for o in outcomes
        if o.clean
    ]
    claim.control(
        "the same error lines with the file name removed, judged by the 'names the file' check",
        sum(bool(p) for p in nameless),
    )


def test_markdown_injection_renders_inert(gate, tmp_path):
    _, record = injection_record(tmp_path)
    claim = gate.claim(
        "receipt.injection_inert",
        "a receipt whose statement, control name and note carry a forged table cell, heading, "
        "<script> tag, javascript: link and image renders with none of them live",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="live markup kinds",
        code=["assay.qualify.render", "assay.qualify.receipt", "corpus_inputs"],
    )
    claim.measure(len(live_markup(record)) + int("Forged heading" not in record))
    claim.control("the same string pasted into a record unescaped", len(live_markup(INJECTION)))


def test_header_parsers_survive_fuzzing(gate, tmp_path, monkeypatch):
    gate.seed(11, 12)
    n = 400
    gguf = fuzz.fuzz(read_header, fuzz.valid_gguf(), tmp_path / "f.gguf", n, 11)
    st = fuzz.fuzz(check_safetensors_header, fuzz.valid_safetensors(), tmp_path / "f.st", n, 12)
    claim = gate.claim(
        "fuzz.header_parsers",
        f"{n} mutants each of a GGUF and a safetensors header (byte flips, huge integers, "
        f"truncations, splices): every one parses or raises ModelFileError within "
        f"{fuzz.PER_EXAMPLE_S:g} s",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="other exceptions or hangs",
        code=["assay.model.gguf_header", "assay.model.safetensors", "fuzz"],
    )
    claim.measure(fuzz.unexpected(gguf) + fuzz.unexpected(st))
    gate.note(f"fuzz outcomes: gguf {gguf}; safetensors {st}")
    monkeypatch.setattr(_Cursor, "take", fuzz.unchecked_take)
    control = fuzz.fuzz(read_header, fuzz.valid_gguf(), tmp_path / "c.gguf", n, 11)
    claim.control(
        "the GGUF mutants against the parser with its bounds check removed",
        fuzz.unexpected(control),
    )
    gate.note(f"fuzz control outcomes: {control}")


def test_kill_and_write_faults_never_lose_the_last_good_state(gate, tmp_path):
    gate.seed(21, 22, 23)
    reports = [
        crash.kill_trials("checkpoint", tmp_path / "ckpt", kills=10, seed=21),
        crash.kill_trials("receipt", tmp_path / "receipt", kills=12, seed=22),
    ]
    faults = crash.fault_trials(tmp_path / "faults", crash.WRITERS)
    kills = sum(r.kills for r in reports)
    lost = sum(r.lost for r in reports) + sum(faults.values())
    claim = gate.claim(
        "crash.last_good_state",
        f"{kills} kill -9s, each at a random fsync/rename/link event of a process writing "
        "checkpoints or receipts in a loop, plus a read-only directory and a full disk "
        "(ENOSPC half-way through a write) for each writer: the last good state always loads",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="states lost",
        code=["assay.atomic", "assay.train.checkpoint", "assay.qualify.receipt", "crash"],
    )
    claim.measure(lost)
    for r in reports:
        gate.note(f"{r.mode}: {r.kills} kills, {r.lost} lost, step after each kill {r.steps}")
    gate.note(f"write faults (1 = lost): {faults}")
    naive = crash.kill_trials("naive", tmp_path / "naive", kills=6, seed=23)
    naive_faults = crash.fault_trials(tmp_path / "naive-faults", {"naive": crash.naive_state})
    claim.control("a writer that rewrites its file in place, under 6 of the same kills", naive.lost)
    claim.control("the in-place writer on a full disk", naive_faults["naive/full_disk"])
    gate.note(f"in-place control: {naive.lost} of {naive.kills} kills lost the state")
    gate.not_tested(
        "a real power cut",
        "kill -9 leaves the page cache; fsync ordering is "
        "checked by the design, not by pulling power",
    )


def test_nothing_unpickles(gate):
    src = Path(__file__).resolve().parents[1] / "src"
    claim = gate.claim(
        "load.no_pickle",
        "no pickle load/loads, no torch.load without weights_only=True and no numpy "
        "allow_pickle anywhere under src/",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="unsafe calls",
        code=[str(TESTS / "robustness" / "unsafe_scan.py")],
    )
    found = scan_tree(src)
    claim.measure(len(found))
    claim.control(
        "the scanner on `torch.load(f)` and `pickle.loads(b)`",
        len(unsafe_calls("torch.load(f)\npickle.loads(b)\n")),
    )


def test_tampered_ledgers_are_detected(gate, tmp_path):
    import shutil

    import tamper_cases  # gates/tamper_cases.py: an honest ledger and six ways to forge it
    from assay_testing import defects

    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen (openssh-client) is not installed: the signature case needs it")
    claim = gate.claim(
        "ledger.tamper_undetected",
        "re-sealing, deleting, reordering or inserting a receipt (records re-rendered after), a "
        "forged signature and a changed implementation file are each reported by verify",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="tamper cases unseen",
        code=[
            str(Path(__file__).with_name("tamper_cases.py")),
            "assay.qualify.chain",
            "assay.qualify.sign",
            "assay.qualify.stale",
            "assay.qualify.standing",  # verify's receipt and chain checks run here
            "assay.qualify.verify",
        ],
    )
    unseen = [c for c in tamper_cases.CASES if not tamper_cases.detected(tmp_path / c, c)]
    claim.measure(len(unseen))
    gate.note(f"tamper cases: {', '.join(tamper_cases.CASES)}; unseen: {unseen or 'none'}")
    controls = {
        "qualify.chain.unchained": ["re-seal", "delete", "reorder", "insert"],
        "qualify.sign.accept_any": ["forged signature"],
        "qualify.stale.ignore": ["stale code file"],
    }
    for fault, cases in controls.items():
        with defects.inject(fault):
            missed = [c for c in cases if not tamper_cases.detected(tmp_path / fault / c, c)]
        claim.control(f"verify with fault {fault} armed", len(missed))


def test_faults_inside_writes(gate, tmp_path):
    """Kills half-way through a file, short writes, and torn files, for every file kind the
    product writes: the last good version survives and a torn file is refused in one line."""
    import torn_writes

    from assay_testing.tiny import save_tiny

    model_dir = save_tiny("qwen2", tmp_path, seed=0, gguf=False)["hf"]

    def fresh(tag: str) -> list:
        return torn_writes.kinds(tmp_path / tag, model_dir)

    total = len([k for k in fresh("count") if k.through_atomic])
    kill = gate.claim(
        "writes.kill_mid_write",
        f"{total} file kinds (checkpoint, PEFT adapter, merged safetensors): a process "
        "SIGKILLed half-way through writing the newer version leaves the older one readable",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="kinds not reading the last good version",
        code=WRITE_CODE,
    )
    measured, _ = torn_writes.after_kill(fresh("kill"), {})
    kill.measure(measured)
    control, in_place_refusals = torn_writes.after_kill(
        fresh("kill-in-place"), {"atomic.in_place": "1"}
    )
    kill.control("written in place, without temp + rename (atomic.in_place)", control)

    short = gate.claim(
        "writes.short_writes",
        f"{total} file kinds written while every os.write takes at most 7 bytes: each reads "
        "back as the version written",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="kinds not reading what was written",
        code=WRITE_CODE,
    )
    short.measure(torn_writes.after_short(fresh("short"), {"atomic.short_write": "7"})[0])
    control, short_refusals = torn_writes.after_short(
        fresh("short-ignored"), {"atomic.short_write": "7", "atomic.ignore_short_write": "1"}
    )
    short.control("one short write trusted (atomic.ignore_short_write)", control)

    cases = torn_writes.torn_cases(fresh("torn"))
    torn = gate.claim(
        "writes.torn_refused",
        f"{len(cases)} torn files (each file of {len(fresh('n'))} kinds cut to a third, GGUF "
        "and the stream disk store included): the product's reader refuses each with a "
        "one-line error naming the file",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="torn files not refused cleanly",
        code=WRITE_CODE,
    )
    unclean = [(p, e) for p, e, _ in cases if not torn_writes.clean_refusal(e, p)]
    torn.measure(len(unclean))
    torn.control(
        "the same files read by the format libraries alone (safetensors, gguf, json)",
        sum(not torn_writes.clean_refusal(n, p) for p, _, n in cases),
    )
    for path, error in unclean:
        gate.note(f"not refused cleanly: {path.name}: {str(error)[:160]}")
    gate.note(
        "refusals met by the controls: "
        + "; ".join(f"{k.name}: ...{e[-110:]}" for k, e in [*in_place_refusals, *short_refusals])
    )
    gate.not_tested(
        "kill and short writes inside GGUF export and the stream disk store",
        "gguf's GGUFWriter and safetensors' save_file write those bytes themselves (assay "
        "renames their temp files into place); torn files of both are in writes.torn_refused",
    )
    gate.not_tested(
        "receipts",
        "receipts are written by assay.qualify's own atomic writer, which these fault points "
        "do not reach",
    )


def test_torn_metrics_line_dropped_on_resume(gate, tmp_path):
    """metrics.jsonl is appended a line per step: a kill mid-append leaves a torn last line,
    which a resume must drop while keeping every complete line up to the checkpoint step."""
    import json
    import types

    from assay.train.loop import METRICS, Trainer

    def metrics_after_resume(cut: int, reader) -> int:
        """Complete lines lost (or a refusal, counted as all 6) after resuming at step 5."""
        run = tmp_path / f"metrics-{cut}-{reader.__name__}"
        run.mkdir()
        lines = "".join(json.dumps({"step": i, "loss": 1.0 / i}) + "\n" for i in range(1, 8))
        cut_at = len(lines) - cut
        (run / METRICS).write_text(lines[:cut_at])
        try:
            reader(types.SimpleNamespace(out_dir=run), 5)
            kept = [json.loads(x)["step"] for x in (run / METRICS).read_text().splitlines()]
        except ValueError:
            return 6
        return sum(step not in kept for step in range(1, 6)) + sum(step > 5 for step in kept)

    def unguarded(trainer, step: int) -> None:
        """A resume that parses every line and keeps those up to ``step``."""
        path = trainer.out_dir / METRICS
        kept = [x for x in path.read_text().splitlines() if json.loads(x)["step"] <= step]
        path.write_text("".join(f"{x}\n" for x in kept))

    cuts = (5, 17, 30)  # bytes missing from the end: each tears the 7th line at a new place
    metrics = gate.claim(
        "writes.metrics_torn_line",
        f"metrics.jsonl with its last line torn at {len(cuts)} places, resumed at step 5: every "
        "complete line of steps 1-5 kept, the torn line and later steps dropped",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="lines wrongly kept or lost",
        code=["assay.train.loop"],
    )
    metrics.measure(sum(metrics_after_resume(c, Trainer._truncate_metrics) for c in cuts))
    metrics.control(
        "resume that parses every line (no torn-line guard)",
        sum(metrics_after_resume(c, unguarded) for c in cuts),
    )


ISSUE16_READERS = (
    "assay.bounded",
    "assay.train.preflight",
    "assay.train.checkpoint_check",
    "assay.train.run_dir",
    "assay.folder_manifest",
    "assay.export",
    "assay.adapters.peft_io",
    "assay.train.data_rows",
)


def _control_run(cases, fault: str, hang_s: float):
    """The cases again with ``fault`` armed (the guard removed), cut off after ``hang_s``."""
    import corpus_harness

    from assay_testing import defects

    previous = corpus_harness.HANG_SECONDS
    corpus_harness.HANG_SECONDS = hang_s
    try:
        with defects.inject(fault):
            return [run_case(case) for case in cases]
    finally:
        corpus_harness.HANG_SECONDS = previous


# class -> (fault point that removes its guard, case-name filter) for a product control.
PRODUCT_CONTROLS = {
    "bounds": ("bounded.unbounded_aliases", "alias_bomb"),
    "surrogate": ("train.data_rows.allow_surrogates", "text_value"),
}


def test_issue16_classes_refused_per_class(gate, corpus, corpus_runs):
    outcomes = corpus_runs[0]
    for kind, label in CLASSES.items():
        mine = [o for o in outcomes if o.case.kind == kind]
        claim = gate.claim(
            f"corpus.{kind}",
            f"issue 16 item {label}: each of {len(mine)} cases exits 2 with one stderr line "
            "naming the file and the field, row or offset, no traceback, nothing on stdout, "
            "no file changed (a class with no cases counts as one failure)",
            kind="correctness",
            threshold=Threshold("==", 0),
            unit="cases not clean",
            code=[*ISSUE16_READERS, "corpus_robust", "corpus_outputs", "corpus_run"],
        )
        claim.measure(sum(not o.clean for o in mine) + (0 if mine else 1))
        stripped = [
            judge_message(
                o.case, o.code, o.stderr.replace(str(o.case.file), "F").replace(o.case.where, "W")
            )
            for o in mine
        ]
        claim.control(
            "the same error lines with the file and the field or offset removed",
            sum(bool(p) for p in stripped),
        )
        if kind in PRODUCT_CONTROLS:
            fault, pick = PRODUCT_CONTROLS[kind]
            broken = _control_run([o.case for o in mine if pick in o.case.name], fault, 4.0)
            claim.control(
                f"the {pick} cases with fault {fault} armed (guard removed)",
                sum(not o.clean for o in broken),
            )
        bad = [f"{o.case.name}: {o.problems}" for o in mine if not o.clean]
        gate.note(f"{kind}: {len(mine)} cases, not clean: {bad or 'none'}")
    gate.note(f"corpus total: {len(corpus)} cases")


def test_loaders_fuzzed_within_bounds(gate, tmp_path, corpus_runs):
    gate.seed(31, 32, 33)
    n = 150
    config = fuzz_loaders.fuzz_config_loader(tmp_path / "config", n, 31)
    rows = fuzz_loaders.fuzz_jsonl_reader(tmp_path / "rows", n, 32)
    claim = gate.claim(
        "fuzz.loaders",
        f"{n} Hypothesis train configs of the valid shape with hostile values (NaN, infinities, "
        "integers past 2**63, lone surrogates, deep nesting, alias chains) and {n} JSONL files "
        "of TRL rows with hostile values: each loads, or raises the loader's one-line error; "
        "a loaded row holds only encodable text and finite numbers",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="other exceptions",
        code=[
            "assay.bounded",
            "assay.train.config_schema",
            "assay.train.data_rows",
            "fuzz_loaders",
        ],
    )
    claim.measure(config.unexpected + rows.unexpected)
    gate.note(f"fuzz config: {config.examples} examples, samples {config.samples or 'none'}")
    gate.note(f"fuzz jsonl: {rows.examples} examples, samples {rows.samples or 'none'}")
    from assay_testing import defects

    with defects.inject("train.data_rows.allow_surrogates"):
        control = fuzz_loaders.fuzz_jsonl_reader(tmp_path / "rows-control", n, 32)
    claim.control("the JSONL examples with the lone-surrogate check removed", control.unexpected)

    bounds = {o.case.name: s for o, s in zip(*corpus_runs, strict=True) if o.case.kind == "bounds"}
    worst_case = max(bounds, key=bounds.get)
    worst = max(config.worst_s, rows.worst_s, bounds[worst_case])
    timing = gate.claim(
        "load.worst_case_s",
        f"the slowest of those loads and of the hostile-size corpus cases (alias bombs, a "
        f"config past 1 MiB, nesting past the depth cap, a JSONL line past its cap) answers "
        f"within {fuzz_loaders.LOAD_BOUND_S:g} s",
        kind="performance",
        # wall time on a shared machine: regression means drifting a tenth of the bound, not
        # any slowdown of a 0.2 s measurement
        threshold=Threshold(
            "<=", fuzz_loaders.LOAD_BOUND_S, tolerance=Tolerance.threshold_scaled(0.1)
        ),
        unit="s",
        code=[
            "assay.bounded",
            "assay.train.config_schema",
            "assay.train.data_rows",
            "fuzz_loaders",
        ],
    )
    timing.measure(worst)
    gate.note(
        f"worst load: config fuzz {config.worst_s:.3f} s, jsonl fuzz {rows.worst_s:.3f} s, "
        f"corpus {worst_case} {bounds[worst_case]:.3f} s"
    )
    bomb = next(c for c in corpus_runs[0] if c.case.name == "bounds.alias_bomb_targets").case
    started = time.perf_counter()
    _control_run([bomb], "bounded.unbounded_aliases", fuzz_loaders.LOAD_BOUND_S + 1)
    timing.control(
        "the alias-bomb config with alias counting removed (cut off 1 s past the bound)",
        time.perf_counter() - started,
    )


def test_export_complete_or_absent_under_faults(gate, tmp_path):
    gate.seed(41, 42)
    kills = export_faults.kill_trials(tmp_path / "out", kills=8, seed=41)
    faults = export_faults.fault_trials(tmp_path / "faults")
    claim = gate.claim(
        "export.complete_or_absent",
        f"{kills.kills} kill -9s at random fsync/rename events of a process exporting PEFT "
        "adapters in a loop (--force over the last), plus a read-only destination and a full "
        "disk: the folder is always one whole export (manifest verifies, config and weights "
        "from the same step) or absent, never mixed",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="mixed or lost folders",
        code=[*EXPORT_CODE, "export_faults"],
    )
    claim.measure(kills.mixed + sum(faults.values()))
    gate.note(f"export kills: {kills}; write faults (1 = lost): {faults}")
    naive = export_faults.kill_trials(tmp_path / "naive", kills=6, seed=42, in_place=True)
    claim.control("an export written straight into --out (fault export.in_place)", naive.mixed)
    gate.note(f"in-place control: {naive}")
