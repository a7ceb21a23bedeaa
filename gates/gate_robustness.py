"""gate-robustness: every malformed input ends in one clean line and exit 2, the header parsers
survive fuzzing, kill -9 and write faults never cost the last good state, and nothing unpickles.

The corpus is generated in the session (tests/corpus/generate.py) from a fresh tiny model.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from assay.qualify import Threshold

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path[:0] = [str(TESTS / "corpus"), str(TESTS / "robustness")]

import crash  # noqa: E402
import fuzz  # noqa: E402
from corpus_harness import judge_message, run_case, run_case_subprocess  # noqa: E402
from corpus_inputs import INJECTION, injection_record, live_markup  # noqa: E402
from generate import build_corpus  # noqa: E402
from unsafe_scan import scan_tree, unsafe_calls  # noqa: E402

from assay.model.gguf_header import _Cursor, read_header  # noqa: E402
from assay.model.safetensors import check_safetensors_header  # noqa: E402

READERS = (
    "assay.model.gguf_header",
    "assay.model.gguf",
    "assay.model.safetensors",
    "assay.model.loader",
    "assay.train.data_rows",
    "assay.train.config",
    "assay.train.config_schema",
    "assay.train.checkpoint",
    "assay.qualify.receipt",
    "assay.qualify.render",
    "assay.cli",
)
END_TO_END = ("gguf.truncated_tensor_data", "jsonl.invalid_utf8", "yaml.full_with_nf4")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return build_corpus(tmp_path_factory.mktemp("corpus"))


def test_bad_inputs_fail_cleanly(gate, corpus, monkeypatch):
    gate.uses(*READERS)
    outcomes = [run_case(case) for case in corpus]
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
    gate.uses("assay.qualify.render", "assay.qualify.receipt")
    _, record = injection_record(tmp_path)
    claim = gate.claim(
        "receipt.injection_inert",
        "a receipt whose statement, control name and note carry a forged table cell, heading, "
        "<script> tag, javascript: link and image renders with none of them live",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="live markup kinds",
    )
    claim.measure(len(live_markup(record)) + int("Forged heading" not in record))
    claim.control("the same string pasted into a record unescaped", len(live_markup(INJECTION)))


def test_header_parsers_survive_fuzzing(gate, tmp_path, monkeypatch):
    gate.uses("assay.model.gguf_header", "assay.model.safetensors")
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
    gate.uses("assay.atomic", "assay.train.checkpoint", "assay.qualify.receipt")
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
    gate.uses(str(TESTS / "robustness" / "unsafe_scan.py"))
    claim = gate.claim(
        "load.no_pickle",
        "no pickle load/loads, no torch.load without weights_only=True and no numpy "
        "allow_pickle anywhere under src/",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="unsafe calls",
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
    from assay import faultpoints

    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen (openssh-client) is not installed: the signature case needs it")
    gate.uses(
        str(Path(__file__).with_name("tamper_cases.py")),
        "assay.qualify.chain",
        "assay.qualify.sign",
        "assay.qualify.stale",
        "assay.qualify.verify",
    )
    claim = gate.claim(
        "ledger.tamper_undetected",
        "re-sealing, deleting, reordering or inserting a receipt (records re-rendered after), a "
        "forged signature and a changed implementation file are each reported by verify",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="tamper cases unseen",
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
        with faultpoints.inject(fault):
            missed = [c for c in cases if not tamper_cases.detected(tmp_path / fault / c, c)]
        claim.control(f"verify with fault {fault} armed", len(missed))
