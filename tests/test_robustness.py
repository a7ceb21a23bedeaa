"""Bad input ends in one clean line and exit 2; header parsers survive fuzzing; writes are
crash-safe under kill -9, a read-only directory and a full disk."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

HERE = Path(__file__).parent
sys.path[:0] = [str(HERE / "corpus"), str(HERE / "robustness")]

import crash  # noqa: E402
import fuzz  # noqa: E402
from corpus_harness import Case, judge_message, run_case, run_case_subprocess  # noqa: E402
from corpus_inputs import INJECTION, injection_record, live_markup  # noqa: E402
from corpus_robust import CLASSES  # noqa: E402
from corpus_round3 import CLASSES as ISSUE30  # noqa: E402
from corpus_round4 import CLASSES as ISSUE41  # noqa: E402
from corpus_round5 import CLASSES as ISSUE52  # noqa: E402
from generate import build_corpus  # noqa: E402

from assay.errors import ModelFileError  # noqa: E402
from assay.model.gguf_header import _Cursor, read_header  # noqa: E402
from assay.model.safetensors import check_safetensors_header  # noqa: E402

FORMATS = {"gguf", "safetensors", "jsonl", "yaml", "checkpoint", "receipt"}
KINDS = FORMATS | set(CLASSES) | set(ISSUE30) | set(ISSUE41) | set(ISSUE52)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[Case]:
    return build_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.mark.slow
def test_corpus_covers_every_format(corpus):
    assert len(corpus) >= 120
    assert {case.kind for case in corpus} == KINDS


@pytest.mark.slow
def test_every_corpus_case_fails_cleanly(corpus):
    dirty = [(o.case.name, o.problems) for o in map(run_case, corpus) if not o.clean]
    assert dirty == []


@pytest.mark.slow
def test_cli_exits_2_without_traceback_end_to_end(corpus):
    picked = [c for c in corpus if c.name in ("gguf.bad_magic", "yaml.full_with_nf4")]
    assert len(picked) == 2
    for case in picked:
        outcome = run_case_subprocess(case)
        assert outcome.code == 2 and outcome.clean, (case.name, outcome.problems)


def test_message_without_the_file_name_fails_the_check(tmp_path):
    case = Case("x", "gguf", ("info",), tmp_path / "m.gguf", "magic", tmp_path)
    assert judge_message(case, 2, f"assay: error: {case.file}: bad magic\n") == []
    assert judge_message(case, 2, "assay: error: bad magic\n") != []


def test_parser_without_bounds_check_crashes_on_a_truncated_header(tmp_path, monkeypatch):
    path = tmp_path / "cut.gguf"
    path.write_bytes(fuzz.valid_gguf()[:30])
    with pytest.raises(ModelFileError):
        read_header(path)
    monkeypatch.setattr(_Cursor, "take", fuzz.unchecked_take)
    assert fuzz.outcome(read_header, path, path.read_bytes()).startswith(("crash", "hang"))


def _bounded(parse, path: Path, data: bytes) -> None:
    started = time.perf_counter()
    result = fuzz.outcome(parse, path, data)
    assert result in ("ok", "refused"), result
    assert time.perf_counter() - started < fuzz.PER_EXAMPLE_S


FUZZ = settings(
    max_examples=150,
    deadline=2000,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@FUZZ
@given(seed=st.integers(0, 2**32 - 1), raw=st.binary(max_size=256))
def test_gguf_header_parser_raises_only_model_file_error(tmp_path, seed, raw):
    import random

    path = tmp_path / "f.gguf"
    _bounded(read_header, path, fuzz.mutate(fuzz.valid_gguf(), random.Random(seed)))
    _bounded(read_header, path, b"GGUF" + raw)


@FUZZ
@given(seed=st.integers(0, 2**32 - 1), raw=st.binary(max_size=256))
def test_safetensors_header_check_raises_only_model_file_error(tmp_path, seed, raw):
    import random

    path = tmp_path / "f.safetensors"
    _bounded(
        check_safetensors_header, path, fuzz.mutate(fuzz.valid_safetensors(), random.Random(seed))
    )
    _bounded(check_safetensors_header, path, raw)


def test_kill_during_receipt_writes_never_loses_the_last_receipt(tmp_path):
    report = crash.kill_trials("receipt", tmp_path / "r", kills=20, seed=5)
    assert report.kills == 20 and report.lost == 0, report


@pytest.mark.slow
def test_kill_during_checkpoint_saves_never_loses_the_last_checkpoint(tmp_path):
    report = crash.kill_trials("checkpoint", tmp_path / "c", kills=4, seed=6)
    assert report.kills == 4 and report.lost == 0, report


def test_in_place_writer_loses_data_under_the_same_kills(tmp_path):
    report = crash.kill_trials("naive", tmp_path / "n", kills=6, seed=7)
    assert report.lost > 0, report


def test_read_only_dir_and_full_disk_keep_the_last_good_state(tmp_path):
    lost = crash.fault_trials(tmp_path, crash.WRITERS)
    assert lost == dict.fromkeys(lost, 0) and len(lost) == 4


def test_in_place_writer_loses_data_on_a_full_disk(tmp_path):
    assert crash.fault_trials(tmp_path, {"naive": crash.naive_state})["naive/full_disk"] == 1


def test_markdown_injection_in_a_receipt_renders_inert(tmp_path):
    record, text = injection_record(tmp_path)
    assert record.name == "corpus.md"
    assert "Forged heading" in text  # the string is in the record, escaped
    assert live_markup(text) == []
    assert len(live_markup(INJECTION)) == 4  # the check sees the same markup when live
