"""The ledger state machine again, on disk: each receipt written by ``write_receipt``, each
erasure a deleted file, a removed LEDGER line and a ``CORRECTIONS`` entry, records rendered by
``assay render``; then ``assay verify --json``, the record files and the site built by
``assay publish`` must agree with the oracle, as they do in memory (test_standing_model.py)."""

from __future__ import annotations

import html
import json
import re

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from ledger_model import GATE, RUN_STEP, Ledger
from ledger_oracle import oracle
from test_standing_model import FACT_WORDS

from assay.cli import main
from assay.qualify.judging.standing import gate_standing
from assay.qualify.ledger.chain import HEADER, ledger_path, read_ledger, write_receipt
from assay.qualify.ledger.history import CORRECTIONS_HEADER
from assay.qualify.ledger.receipt import receipt_filename

EXAMPLES = 100


class DiskMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        import tempfile
        from pathlib import Path

        self.root = Path(tempfile.mkdtemp(prefix="assay-ledger-model-"))
        self.records = self.root / "records"
        self.receipts = self.records / "receipts"
        self.ledger = Ledger()

    @rule(**RUN_STEP)
    def run(self, device, complete, claims, extra, corrections):
        receipt = self.ledger.add(device, complete, claims, extra, corrections)
        unsealed = {k: v for k, v in receipt.items() if k != "receipt_sha256"}
        path = write_receipt(unsealed, self.receipts)  # chains onto the same head
        assert path.name == receipt_filename(receipt)

    @rule(text_kept=st.booleans())
    def erase_newest(self, text_kept):
        if not self.ledger.receipts:
            return
        newest = self.ledger.receipts[-1]
        self.ledger.erase_newest(text_kept)
        entry = self.ledger.acknowledged[-1]
        (self.receipts / GATE / receipt_filename(newest)).unlink()
        entries, _ = read_ledger(ledger_path(self.receipts, GATE))
        lines = "".join(f"{sha} {name}\n" for sha, name in entries[:-1])
        ledger_path(self.receipts, GATE).write_text(HEADER + lines, "utf-8")
        corrections = self.receipts / GATE / "CORRECTIONS"
        if not corrections.exists():
            corrections.write_text(CORRECTIONS_HEADER, "utf-8")
        line = {
            "date": entry.date,
            "commit": entry.commit,
            "file": entry.file,
            "change": entry.change,
            "sha256": entry.sha256,
            "reason": entry.reason,
            **({"content": entry.content} if entry.content is not None else {}),
        }
        with corrections.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(line, ensure_ascii=False) + "\n")

    @invariant()
    def disk_agrees_with_the_oracle(self):
        if not self.ledger.receipts:
            return
        expected = oracle(self.ledger.runs, acknowledged=len(self.ledger.acknowledged))
        args = [f"--receipts={self.receipts}", f"--records={self.records}"]
        assert main(["render", *args]) == 0
        record = (self.records / f"{GATE}.md").read_text("utf-8")
        site = self.root / "site"
        assert main(["publish", *args, f"--html={site}"]) == 0
        page = (site / f"{GATE}.html").read_text("utf-8")
        import contextlib
        import io

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["verify", "--json", *args])
        verified = json.loads(out.getvalue())
        assert code == 0, verified["problems"]
        shown = {
            "record": re.search(r"\*\*Status: ([A-Z ]+)\*\*(.*)", record),
            "page": re.search(r"Status: ([A-Z ]+)</strong>(.*)", page),
        }
        for name, match in shown.items():
            assert match.group(1).lower() == expected.status, (name, match.group(0))
        summary = verified["standings"][GATE]["summary"]
        assert verified["standings"][GATE]["status"] == expected.status, summary
        memory, disk = self.ledger.standing(), gate_standing(self.receipts, GATE)
        assert summary == memory.summary()  # what was read is what was written
        erased = [[e.receipt["receipt_sha256"] for e in d.erased] for d in memory.devices]
        assert [[e.receipt["receipt_sha256"] for e in d.erased] for d in disk.devices] == erased
        for text in (summary, html.unescape(shown["record"].group(2).replace("\\", ""))):
            for what, key in expected.facts:
                assert FACT_WORDS[what] in text and key.rsplit("::")[-1] in text, (what, text)

    def teardown(self):
        import shutil

        shutil.rmtree(self.root, ignore_errors=True)


DiskMachine.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=5,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # shrinking on disk takes minutes
)
test_ledgers_on_disk = DiskMachine.TestCase


def test_the_disk_model_catches_a_loader_that_drops_erased_receipts(monkeypatch):
    """Control: erased receipts read back without the text their acknowledgement keeps."""
    import pytest
    from hypothesis.stateful import run_state_machine_as_test

    from assay.qualify.judging import loading

    real = loading.acknowledged
    monkeypatch.setattr(loading, "acknowledged", lambda d, g: (*real(d, g)[:1], [], real(d, g)[2]))
    quick = settings(
        max_examples=EXAMPLES,
        stateful_step_count=5,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        report_multiple_bugs=False,
        derandomize=True,  # a control must catch on every run, not on most (CI saw a miss)
    )
    with pytest.raises(AssertionError):
        run_state_machine_as_test(DiskMachine, settings=quick)
