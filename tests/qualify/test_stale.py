"""verify --stale: records whose implementation files (per claim) or gate file changed are
listed; CI gates fail, device/quiet-machine gates are reported and carry a banner."""

from __future__ import annotations

import copy
import hashlib
import sys
from pathlib import Path

from gatekit import git

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "gates"))

from assay.cli import main  # noqa: E402
from assay.qualify.judging.stale import check_receipt, gate_needs  # noqa: E402
from assay.qualify.ledger.chain import write_receipt  # noqa: E402
from assay.qualify.publishing.index import render_all  # noqa: E402
from assay.qualify.publishing.verify import verify_all, verify_stale  # noqa: E402
from support.faults import tamper_cases  # noqa: E402


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _project(root: Path, needs: str | None = None) -> tuple[Path, Path]:
    """A tree with two implementation files and a gate file, one receipt measured on it."""
    (root / "src").mkdir(parents=True)
    (root / "gates").mkdir()
    (root / "src/a.py").write_text("A = 1\n", "utf-8")
    (root / "src/b.py").write_text("B = 1\n", "utf-8")
    header = f"GATE_NEEDS = {needs!r}\n" if needs else ""
    (root / "gates/gate_demo.py").write_text(f'"""gate-demo: a demo."""\n{header}', "utf-8")
    receipt = tamper_cases.synthetic_receipt("2026-01-01T00:00:00Z", 0.0, "0" * 64)
    second = copy.deepcopy(receipt["claims"][0])
    second["id"] = "diff_b"
    receipt["claims"].append(second)
    receipt["claims"][0]["code_files"] = [{"path": "src/a.py", "sha256": _sha(root / "src/a.py")}]
    second["code_files"] = [{"path": "src/b.py", "sha256": _sha(root / "src/b.py")}]
    receipt["code"]["files"] = [
        {"path": p, "sha256": _sha(root / p)}
        for p in ("gates/gate_demo.py", "src/a.py", "src/b.py")
    ]
    records = root / "records"
    write_receipt(_strip_unknown(receipt), records / "receipts")
    render_all(records / "receipts", records, root)
    return records / "receipts", records


def _strip_unknown(receipt: dict) -> dict:
    """Drop per-claim ``code_files`` when this schema does not know them yet (pre-merge)."""
    from assay.qualify.ledger.receipt import receipt_schema

    claim = receipt_schema()["$defs"]["claim"]["properties"]
    if "code_files" not in claim:
        for c in receipt["claims"]:
            c.pop("code_files", None)
    return receipt


def test_current_tree_is_not_stale(tmp_path):
    receipts, _ = _project(tmp_path)
    assert verify_stale(receipts, tmp_path) == ([], [])


def test_changed_file_is_listed_with_the_claims_that_used_it(tmp_path):
    receipts, records = _project(tmp_path)
    (tmp_path / "src/b.py").write_text("B = 2\n", "utf-8")
    failing, reported = verify_stale(receipts, tmp_path)
    assert reported == [] and len(failing) == 1
    assert "src/b.py changed" in failing[0] and "src/a.py" not in failing[0]
    from assay.qualify.ledger.receipt import receipt_schema

    if "code_files" in receipt_schema()["$defs"]["claim"]["properties"]:
        assert "(claims: diff_b)" in failing[0]
    dirs = ["--receipts", str(receipts), "--records", str(records), "--root", str(tmp_path)]
    # the index's stale cell is re-derived from the tree: out of date until rendered again
    assert main(["verify", *dirs]) == 1
    render_all(receipts, records, tmp_path)
    assert main(["verify", *dirs]) == 0  # staleness itself fails only when asked
    assert main(["verify", *dirs, "--stale"]) == 1


def test_claim_without_code_files_falls_back_to_the_receipt_files(tmp_path):
    receipt = tamper_cases.synthetic_receipt("2026-01-01T00:00:00Z", 0.0, "0" * 64)
    receipt["receipt_sha256"] = "1" * 64
    (tmp_path / "src").mkdir()
    (tmp_path / tamper_cases.CODE).write_text("x\n", "utf-8")
    found = check_receipt(tmp_path, receipt)
    assert found is not None and found.changed == {tamper_cases.CODE: ["diff"]}


def test_changed_gate_file_is_stale(tmp_path):
    receipts, _ = _project(tmp_path)
    with (tmp_path / "gates/gate_demo.py").open("a", encoding="utf-8") as handle:
        handle.write("# edited\n")
    failing, _ = verify_stale(receipts, tmp_path)
    assert len(failing) == 1 and "gate file gates/gate_demo.py changed" in failing[0]


def test_quiet_machine_gate_is_reported_not_failed_and_its_record_shows_a_banner(tmp_path, capsys):
    receipts, records = _project(tmp_path, needs="quiet-machine")
    assert gate_needs(tmp_path, "demo") == "quiet-machine"
    (tmp_path / "src/a.py").write_text("A = 2\n", "utf-8")
    failing, reported = verify_stale(receipts, tmp_path)
    assert failing == [] and "needs quiet-machine" in reported[0]
    dirs = ["--receipts", str(receipts), "--records", str(records), "--root", str(tmp_path)]
    render_all(receipts, records, tmp_path)
    assert main(["verify", *dirs, "--stale"]) == 0
    assert "note: stale (reported, not failing)" in capsys.readouterr().out
    record = (records / "demo.md").read_text("utf-8")
    assert "**Stale since uncommitted changes**" in record
    assert "stale since uncommitted changes (needs quiet-machine)" in (
        records / "README.md"
    ).read_text("utf-8")
    # the banner depends on the tree, and verify re-derives it
    assert verify_all(receipts, records) == []
    (tmp_path / "src/a.py").write_text("A = 1\n", "utf-8")
    assert any("out of sync" in p for p in verify_all(receipts, records))


def test_noxfile_timing_gates_and_cuda_receipts_need_special_machines(tmp_path):
    (tmp_path / "noxfile.py").write_text('TIMING_GATES = ("demo",)\n', "utf-8")
    assert gate_needs(tmp_path, "demo") == "quiet-machine"
    assert gate_needs(tmp_path, "other") is None
    assert gate_needs(tmp_path, "other", {"run": {"device": "cuda"}}) == "device"
    assert gate_needs(ROOT, "throughput") == "quiet-machine"


def test_stale_since_names_the_first_commit_that_changed_the_file(tmp_path):
    receipt = tamper_cases.synthetic_receipt("2026-01-01T00:00:00Z", 0.0, "0" * 64)
    receipt["receipt_sha256"] = "1" * 64
    (tmp_path / "src").mkdir()
    impl = tmp_path / tamper_cases.CODE
    impl.write_text("one\n", "utf-8")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "one")
    receipt["code"]["commit"] = git(tmp_path, "rev-parse", "HEAD")
    receipt["code"]["files"][0]["sha256"] = _sha(impl)
    impl.write_text("two\n", "utf-8")
    git(tmp_path, "commit", "-qam", "two")
    second = git(tmp_path, "rev-parse", "HEAD")
    impl.write_text("three\n", "utf-8")
    git(tmp_path, "commit", "-qam", "three")
    found = check_receipt(tmp_path, receipt)
    assert found is not None and found.since == second[:12]
