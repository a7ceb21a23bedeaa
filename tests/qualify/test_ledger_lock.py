"""Concurrent writers keep one valid chain: 8 processes x 50 receipts of one gate, all at once,
end in a ledger that lists every receipt once, in a chain whose back-links all hold. The same
race with the gate folder's lock taken out (in the writers only) breaks the chain: the control
that shows this check can fail."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from assay.qualify.judging.loading import load_checked
from assay.qualify.ledger.chain import read_ledger

WRITER = """
import contextlib, json, sys
from pathlib import Path
from assay.qualify.ledger import chain
base = json.loads(Path(sys.argv[1]).read_text())
receipts, writer, count = Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
if sys.argv[5] == "unlocked":
    chain.locked = lambda *args: contextlib.nullcontext()
for i in range(count):
    chain.write_receipt({**base, "notes": [f"writer {writer} receipt {i}"]}, receipts)
"""


def _base_receipt(tmp_path: Path) -> Path:
    sys.path.insert(0, str(Path(__file__).parents[1] / "corpus"))
    from corpus_inputs import make_receipt

    data = json.loads(make_receipt(tmp_path / "seed", "seed").read_text())
    for field in ("receipt_sha256", "previous_receipt_sha256"):
        data.pop(field, None)
    path = tmp_path / "base.json"
    path.write_text(json.dumps(data))
    return path


def _race(tmp_path: Path, writers: int, count: int, mode: str) -> tuple[int, list[str]]:
    base, receipts = _base_receipt(tmp_path), tmp_path / mode
    children = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(base), str(receipts), str(w), str(count), mode]
        )
        for w in range(writers)
    ]
    codes = [child.wait(timeout=600) for child in children]
    entries, problems = read_ledger(receipts / "corpus" / "LEDGER")
    _receipts, checked = load_checked(receipts, "corpus")
    files = len(list((receipts / "corpus").glob("*.json")))
    lost = (
        [f"{files - len(entries)} receipts missing from the ledger"]
        if files != len(entries)
        else []
    )
    crashed = [f"{codes.count(c)} writers exited {c}" for c in set(codes) if c != 0]
    return len(entries), [*problems, *checked, *lost, *crashed]


def test_eight_writers_of_fifty_receipts_keep_one_valid_chain(tmp_path):
    entries, problems = _race(tmp_path, writers=8, count=50, mode="locked")
    assert problems == []
    assert entries == 400


def test_the_same_race_without_the_lock_breaks_the_chain(tmp_path):
    _entries, problems = _race(tmp_path, writers=4, count=25, mode="unlocked")
    assert problems, "the race without the lock went unnoticed: the check above cannot fail"
