"""JSON Lines are split on "\\n" alone: U+2028, U+2029 and the other characters
``str.splitlines`` breaks on are legal inside a JSON string, so every reader of a LEDGER,
CORRECTIONS, metrics.jsonl or data file keeps such an entry whole."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from assay.bounded import split_lines

# every character str.splitlines breaks on besides "\n" and "\r"
SEPARATORS = "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


@given(st.lists(st.text(alphabet=st.characters(codec="utf-8")), max_size=6))
def test_json_lines_round_trip_whatever_their_strings_hold(values):
    text = "".join(json.dumps({"v": v}, ensure_ascii=False) + "\n" for v in values)
    assert [json.loads(line)["v"] for line in split_lines(text)] == values


@pytest.mark.parametrize("separator", SEPARATORS)
def test_a_raw_separator_inside_a_string_does_not_split_the_entry(separator):
    line = json.dumps({"note": f"a{separator}b"}, ensure_ascii=False)
    assert split_lines(f"{line}\n{line}\n") == [line, line]


def test_windows_line_ends_and_a_missing_final_newline():
    assert split_lines("a\r\nb\r\nc") == ["a", "b", "c"]
    assert split_lines("") == [] and split_lines("\n") == [""]


def test_the_corrections_reader_keeps_an_entry_with_a_line_separator(tmp_path):
    from assay.qualify.ledger.corrections import CORRECTIONS, read_corrections

    entry = {
        "date": "2026-12-01",
        "commit": "0123456789ab",
        "file": "LEDGER",
        "change": "line removed",
        "sha256": "a" * 64,
        "reason": "moved\u2028here\u2029by hand",
    }
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / CORRECTIONS).write_text(
        "# corrections\n" + json.dumps(entry, ensure_ascii=False) + "\n", "utf-8"
    )
    found, problems = read_corrections(tmp_path, "g")
    assert problems == []
    assert [c.reason for c in found] == [entry["reason"]]


def test_the_ledger_reader_keeps_a_comment_with_a_line_separator(tmp_path):
    from assay.qualify.ledger.chain import read_ledger

    path = tmp_path / "LEDGER"
    path.write_text(f"# written by\u2028hand\n{'a' * 64} r.json\n", "utf-8")
    assert read_ledger(path) == ([("a" * 64, "r.json")], [])


def test_resume_keeps_metrics_lines_with_a_line_separator(tmp_path):
    import types

    from assay.train.loop import METRICS, Trainer

    lines = [json.dumps({"step": i, "note": f"x\u2028{i}"}, ensure_ascii=False) for i in (1, 2, 3)]
    (tmp_path / METRICS).write_text("".join(f"{x}\n" for x in lines), "utf-8")
    Trainer._truncate_metrics(types.SimpleNamespace(out_dir=tmp_path), 2)
    assert (tmp_path / METRICS).read_text("utf-8") == f"{lines[0]}\n{lines[1]}\n"
