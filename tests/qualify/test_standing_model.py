"""A state machine over a gate's ledger: runs complete and partial, on two devices, with claims
that pass, fail, fail only a tight bound, measure NaN or lack a control; retirements, corrections
citing a failure, bounds that move, and receipts erased under an acknowledged correction (with
or without their text). After every step the standing and every view of it (the record, the
index row, the site's gate page and index row, ``verify``'s JSON, ``attest --verify``'s lines)
agree with the oracle written from the invariants alone (ledger_oracle.py). The two index rows
show the standing in brief: the oracle's status word, and every fact's word unless the brief was
cut (``…``); the record, the page and verify show every fact with its claim."""

from __future__ import annotations

import html
import json
import re

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from ledger_model import RUN_STEP, Ledger
from ledger_oracle import oracle

from assay.qualify.judging.standing import BRIEF_LIMIT, Standing
from assay.qualify.publishing.attest import attest_line
from assay.qualify.publishing.index import index_row
from assay.qualify.publishing.render import render_standing
from assay.qualify.publishing.site import gate_page, index_entry, index_page
from assay.qualify.publishing.verify import Report

EXAMPLES = 2000
# Views that show the standing in brief, linking to the page that holds it whole.
BRIEF = ("index", "site index")
FACT_WORDS = {
    "retired after failing": "retired after failing",
    "retired": "retired",
    "loosened after failing": "loosened after failing",
    "removed after failing": "removed after failing",
    "bound changed": "bound changed",
    "acknowledged ledger rewrite": "acknowledged ledger rewrite",
    "text is not kept": "text is not kept",
    "correction": "correction",
}


def views(standing: Standing) -> dict[str, tuple[str, str]]:
    """Every view's (status word, status text) for the gate, rendered in memory."""
    record = render_standing(standing)
    head = re.search(r"\*\*Status: ([A-Z ]+)\*\*(?: · (.*?))? · \d+ receipt", record)
    row = index_row(standing, root=_NOWHERE).split(" | ")[3]
    page = gate_page(standing)
    page_status = re.search(r"Status: ([A-Z ]+)</strong>(?: · (.*?))? · \d+ receipt", page)
    site_row = index_page([index_entry(standing, _NOWHERE)])
    site_cell = re.search(r'<td class="([a-z ]+)">(.*?)</td>', site_row)
    verified = Report([], [], [standing]).as_json()["standings"][standing.gate]
    found = {
        "record": (head.group(1).lower(), head.group(2) or head.group(1).lower()),
        "index": (row.split(":")[0].strip(), row),
        "page": (page_status.group(1).lower(), page_status.group(2) or ""),
        "site index": (site_cell.group(1), site_cell.group(2)),
        "verify": (verified["status"], verified["summary"]),
    }
    for receipt in standing.receipts[-1:]:  # attest --verify on the newest receipt
        line = attest_line(_attested(receipt, standing))
        found["attest"] = (line.split("gate standing now: ")[1].split(":")[0].split(" (")[0], line)
    return found


def _attested(receipt: dict, standing: Standing) -> dict:
    heads = {d.head["receipt_sha256"] for d in standing.devices if d.head is not None}
    return {
        "ok": True,
        "file": "x.intoto.json",
        "gate": receipt["gate"],
        "receipt_sha256": receipt["receipt_sha256"],
        "status": receipt["status"],
        "subject": {"name": "code"},
        "signer": "alice",
        "keyid": "SHA256:x",
        "standing": standing.summary(),
        "shown": receipt["receipt_sha256"] in heads,
    }


_NOWHERE = __import__("pathlib").Path("/nonexistent-project-root")


class LedgerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ledger = Ledger()

    @rule(**RUN_STEP)
    def run(self, device, complete, claims, extra, corrections):
        self.ledger.add(device, complete, claims, extra, corrections)

    @rule(text_kept=st.booleans())
    def erase_newest(self, text_kept):
        if self.ledger.receipts:
            self.ledger.erase_newest(text_kept)

    @invariant()
    def every_view_agrees_with_the_oracle(self):
        if not self.ledger.runs:
            return
        expected = oracle(self.ledger.runs, acknowledged=len(self.ledger.acknowledged))
        standing = self.ledger.standing()
        assert standing.status == expected.status, (standing.summary(), expected)
        if not standing.receipts:
            return  # nothing left to render: every receipt was erased
        for name, (word, shown) in views(standing).items():
            text = html.unescape(shown.replace("\\", ""))  # as a reader sees it
            assert word == expected.status, (name, word, text, expected)
            if name in BRIEF:
                # the status word and at most BRIEF_LIMIT characters of why, every fact's
                # word among them unless they were cut (the page holds the rest)
                why = text.strip().removeprefix(word).removeprefix(": ")
                assert len(why) <= BRIEF_LIMIT + 3, (name, text)
                if not why.endswith("…"):
                    assert all(FACT_WORDS[what] in why for what, _ in expected.facts), (
                        name,
                        text,
                        expected,
                    )
                continue
            for what, key in expected.facts:
                assert FACT_WORDS[what] in text and key.rsplit("::")[-1] in text, (
                    name,
                    what,
                    key,
                    text,
                )
        plain = expected.status == "pass" and not expected.facts
        assert standing.plain_pass() == plain, (standing.summary(), expected)


LedgerMachine.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=6,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_ledgers = LedgerMachine.TestCase


def test_the_model_builds_valid_receipts():
    ledger = Ledger()
    ledger.add("cpu", True, {"a": ("nan", "tight"), "b": ("no control", "loose")}, "failed", [])
    ledger.add("cuda", False, {"c": ("pass", "tight")}, None, ["a"])
    ledger.check_receipts()
    assert json.dumps(ledger.standing().summary())


DEFECTS = {
    "failures in partial runs ignored": (
        "assay.qualify.judging.device.standing_failures",
        lambda real: lambda entries: real([e for e in entries if e.complete]),
    ),
    "erased receipts forgotten": (
        "assay.qualify.judging.standing.with_erased",
        lambda real: lambda receipts, erased: real(receipts, []),
    ),
    "a looser bound clears a failure": (
        "assay.qualify.judging.evidence.same_or_stricter",
        lambda real: lambda new, old: True,
    ),
    "retirements hidden from the status cell": (
        "assay.qualify.judging.device.DeviceStanding.qualifiers",
        lambda real: lambda self: [q for q in real(self) if "retired" not in q],
    ),
    "acknowledged rewrites hidden": (
        "assay.qualify.judging.standing.Standing.qualifiers",
        lambda real: lambda self: [q for q in real(self) if "acknowledged" not in q],
    ),
}


@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_the_model_catches_a_defect_in_the_standing(monkeypatch, defect):
    """Control: each defect, patched in from outside, is found by the same state machine."""
    import importlib

    from hypothesis.stateful import run_state_machine_as_test

    target, make = DEFECTS[defect]
    module_name, _, attr = target.rpartition(".")
    try:
        owner = importlib.import_module(module_name)
    except ModuleNotFoundError:  # a method: module.Class.method
        module_name, _, cls = module_name.rpartition(".")
        owner = getattr(importlib.import_module(module_name), cls)
    monkeypatch.setattr(owner, attr, make(getattr(owner, attr)))
    quick = settings(
        max_examples=EXAMPLES,
        stateful_step_count=6,
        deadline=None,
        database=None,
        phases=[Phase.generate],  # found is enough: no shrinking
        report_multiple_bugs=False,
        derandomize=True,  # a control must catch on every run, not on most
    )
    with pytest.raises(AssertionError):
        run_state_machine_as_test(LedgerMachine, settings=quick)
