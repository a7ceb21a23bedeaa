"""A rollback of the tree and its history to an earlier, consistently signed state leaves every
remaining receipt and signature intact; only a record kept outside the tree shows it. ``verify
--record-heads`` keeps that record and ``--known-heads`` checks it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gates"))

from assay.cli import main
from assay.qualify.ledger.chain import HEADER, ledger_path, read_ledger
from support.faults import tamper_cases


def _verify(ledger, *extra: str) -> int:
    return main(["verify", f"--receipts={ledger.receipts}", f"--records={ledger.records}", *extra])


def test_a_rolled_back_head_is_caught_by_the_heads_recorded_outside(tmp_path, capsys):
    ledger = tamper_cases.Ledger(tmp_path / "tree")
    heads = tmp_path / "outside" / "heads"
    heads.parent.mkdir()
    assert _verify(ledger, f"--record-heads={heads}") == 0
    assert heads.read_text().splitlines()[1].startswith(f"{tamper_cases.GATE} ")
    assert _verify(ledger, f"--known-heads={heads}") == 0
    # roll the gate back by its newest receipt: file and LEDGER line, records re-rendered
    ledger.paths[-1].unlink()
    entries, _ = read_ledger(ledger_path(ledger.receipts, tamper_cases.GATE))
    lines = "".join(f"{sha} {name}\n" for sha, name in entries[:-1])
    ledger_path(ledger.receipts, tamper_cases.GATE).write_text(HEADER + lines, "utf-8")
    ledger.rerender()
    capsys.readouterr()
    assert _verify(ledger) == 0  # nothing in the tree can show it
    assert _verify(ledger, f"--known-heads={heads}") == 1
    out = capsys.readouterr().out
    assert "is gone from the ledger (the tree or its history was rolled back)" in out
    # the rolled-back gate reads broken beside the problem, never pass
    assert f"standing: {tamper_cases.GATE}: broken" in out
    assert _verify(ledger, f"--known-heads={heads}", "--json") == 1
    report = json.loads(capsys.readouterr().out)
    assert report["standings"][tamper_cases.GATE]["status"] == "broken"


def test_a_malformed_heads_file_is_one_problem_naming_the_line(tmp_path, capsys):
    ledger = tamper_cases.Ledger(tmp_path / "tree")
    heads = tmp_path / "heads"
    heads.write_text("# ok\ndemo not-a-sha\n")
    assert _verify(ledger, f"--known-heads={heads}") == 1
    assert f"{heads}:2: expected '<gate> <receipt sha256>'" in capsys.readouterr().out
