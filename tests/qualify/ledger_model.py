"""A gate's ledger built in memory from real receipts, for the state machine over ledgers: each
step appends a run, retires or corrects a claim, or erases the newest receipt under an
acknowledged correction; the same steps are recorded as :class:`ledger_oracle.Run`s."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st
from ledger_oracle import Run

from assay.qualify.core.status import derive_status
from assay.qualify.core.threshold import judge
from assay.qualify.judging.standing import Standing, standing_of
from assay.qualify.ledger.corrections import Correction
from assay.qualify.ledger.receipt import SCHEMA_ID, dump_receipt, problems_in, seal

GATE = "g"
CLAIMS = ("a", "b", "c")
# what a claim measured: each against an upper bound, tight (1e-3) or loose (1e-2)
VALUES = {"pass": 0.0, "tight-fails": 5e-3, "fail": 0.5, "nan": math.nan, "no control": 0.0}
BOUNDS = {"tight": 1e-3, "loose": 1e-2}

# one run of the gate, as both state machines (in memory and on disk) draw it
RUN_STEP = dict(
    device=st.sampled_from(["cpu", "cuda"]),
    complete=st.booleans(),
    claims=st.dictionaries(
        st.sampled_from(CLAIMS),
        st.tuples(st.sampled_from(sorted(VALUES)), st.sampled_from(sorted(BOUNDS))),
        max_size=3,
    ),
    extra=st.sampled_from([None, "passed", "failed"]),
    corrections=st.lists(st.sampled_from(CLAIMS), max_size=2, unique=True),
)
TOLERANCE = {"mode": "absolute", "value": 0}
ENVIRONMENT = {
    "python": "CPython 3.11.7",
    "os": "Linux",
    **dict.fromkeys(("torch", "cuda", "cudnn", "bitsandbytes", "transformers", "gpu")),
    "cpu": {"model": "model cpu", "threads": 2, "torch_threads": None},
    "env": {},
}


def claim(cid: str, value: str, bound: str) -> dict[str, Any]:
    """A judged receipt claim that measured ``value`` against the ``bound``."""
    measured = VALUES[value]
    measurement: dict[str, Any] = {"value": measured, "unit": ""}
    if math.isnan(measured):
        measurement = {"value": None, "unit": "", "non_finite": "nan"}
    controls = [] if value == "no control" else [{"name": "broken", "measured": 1.0}]
    data = {
        "id": cid,
        "statement": f"claim {cid} holds",
        "kind": "correctness",
        "measurement": measurement,
        "threshold": {
            "op": "<=",
            "value": BOUNDS[bound],
            "tolerance": {"mode": "absolute", "value": 0},
        },
        "controls": controls,
    }
    judged = judge(data)
    return {**data, **judged, "test": f"gate_g.py::test_{cid}"}


@dataclass
class Ledger:
    """Kept receipts in ledger order, erased ones with their acknowledgement, and the runs the
    oracle reads."""

    receipts: list[dict[str, Any]] = field(default_factory=list)
    erased: list[tuple[dict[str, Any], Correction]] = field(default_factory=list)
    acknowledged: list[Correction] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    written: list[dict[str, Any]] = field(default_factory=list)  # every receipt, run order
    clock: int = 0

    def add(
        self,
        device: str,
        complete: bool,
        claims: dict[str, tuple[str, str]],
        extra: str | None,
        corrections: list[str],
    ) -> dict[str, Any]:
        """Append one run: ``claims`` id -> (value, bound); ``extra`` a test with no claim that
        passed, failed, or did not run (None); ``corrections`` claims this run corrects: one it
        lacks is retired (citing the last run holding it), one it holds cites its newest
        failure."""
        self.clock += 1
        judged = [claim(cid, value, bound) for cid, (value, bound) in sorted(claims.items())]
        tests = [{"nodeid": f"gate_g.py::test_{cid}", "outcome": "passed"} for cid in claims]
        run: dict[str, Any] = {
            "argv": [],
            "nox_session": None,
            "seeds": [],
            "duration_s": 1.0,
            "device": device,
            "tests": tests,
        }
        if extra is not None:
            tests.append({"nodeid": "gate_g.py::test_extra", "outcome": extra})
        if extra == "failed":
            run["failures"] = [{"nodeid": "gate_g.py::test_extra", "when": "call", "message": "x"}]
        if not complete:
            run.update(partial=True, partial_reason="stopped early")
        cites = [(cid, self._cite(cid, cid in claims)) for cid in corrections]
        cites = [(cid, at) for cid, at in cites if at is not None]
        receipt = {
            "schema": SCHEMA_ID,
            "gate": GATE,
            "receipt_id": f"00000000-0000-4000-8000-{self.clock:012d}",
            "created": f"2026-01-01T00:{self.clock // 60:02d}:{self.clock % 60:02d}Z",
            "status": "pending",
            "claims": judged,
            "corrects": [
                {"receipt_sha256": self._sha(at), "claim_id": cid, "reason": "model"}
                for cid, at in cites
            ],
            "not_tested": [],
            "inputs": [],
            "figures": [],
            "notes": [],
            "code": {"commit": None, "dirty": None, "package_version": None, "files": []},
            "environment": ENVIRONMENT,
            "run": run,
            "baseline": None,
            "previous_receipt_sha256": self.receipts[-1]["receipt_sha256"]
            if self.receipts
            else None,
        }
        receipt["status"] = derive_status(receipt)
        receipt = seal(receipt)
        self.receipts.append(receipt)
        self.written.append(receipt)
        self.runs.append(
            Run(
                device,
                complete,
                {c["id"]: (c["verdict"], c["threshold"]["value"]) for c in judged},
                failed_tests={"gate_g.py::test_extra"} if extra == "failed" else set(),
                passed_tests={t["nodeid"] for t in tests if t["outcome"] == "passed"},
                corrects=cites,
            )
        )
        return receipt

    def _sha(self, run_index: int) -> str:
        return self.written[run_index]["receipt_sha256"]

    def _cite(self, cid: str, holds: bool) -> int | None:
        """The run a correction of ``cid`` cites: its newest failure when this run holds the
        claim (a bound loosened after it), else the last run holding it (a retirement)."""
        for i in range(len(self.runs) - 1, -1, -1):
            if self.runs[i].erased and not self.runs[i].erased_text_kept:
                continue  # nothing left to cite: a correction must name a receipt it can read
            verdict = self.runs[i].claims.get(cid)
            if verdict is not None and (not holds or verdict[0] == "fail"):
                return i
        return None

    def erase_newest(self, text_kept: bool) -> None:
        """Delete the newest kept receipt and acknowledge it in CORRECTIONS."""
        receipt = self.receipts.pop()
        content = dump_receipt(receipt).decode("utf-8")
        index = next(i for i, r in enumerate(self.written) if r is receipt)
        self.runs[index].erased = True
        self.runs[index].erased_text_kept = text_kept
        entry = Correction(
            GATE,
            len(self.acknowledged) + 2,
            "2026-01-02",
            "0" * 40,
            f"{receipt['receipt_sha256'][:12]}.json",
            "deleted",
            hashlib.sha256(content.encode("utf-8")).hexdigest(),
            "erased by the model",
            content if text_kept else None,
        )
        self.acknowledged.append(entry)
        if text_kept:
            self.erased.append((receipt, entry))

    def standing(self) -> Standing:
        return standing_of(
            GATE, self.receipts, [], erased=self.erased, acknowledged=self.acknowledged
        )

    def check_receipts(self) -> None:
        for receipt in self.receipts:
            assert problems_in(receipt) == [], problems_in(receipt)[:2]
