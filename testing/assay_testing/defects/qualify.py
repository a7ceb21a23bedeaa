"""Defects in assay.qualify: the verdict, the ledger, staleness and signatures."""

from __future__ import annotations

from assay_testing.defects import Defect
from assay_testing.patching import Edit

DEFECTS: tuple[Defect, ...] = (
    Defect(
        "qualify.plugin.gate.reach_from_process",
        "a claim's declared modules are checked against what the process has imported, so a "
        "gate passes after another gate imported its modules and errors when run alone",
        (
            Edit(
                "assay.qualify.plugin.gate:Gate.stale_code",
                "reached = reach(Path(self._root), packages).modules(self._module_path)",
                'reached = frozenset(__import__("sys").modules)',
            ),
        ),
    ),
    Defect(
        "qualify.plugin.child_imports.reports_for_every_gate",
        "what any child of the process reported counts for every later gate test, so a gate "
        "passes after another gate's child imported its modules and errors when run alone",
        (
            Edit(
                "assay.qualify.plugin.child_imports:ChildImports.names",
                "return set().union(*(self._names.get(c, set()) for c in contexts))",
                "return set().union(*self._names.values())",
            ),
        ),
    ),
    Defect(
        "qualify.plugin.imports.loaded_first_left_out",
        "a module whose top level ran under a test is left out of that claim's import_files, so "
        "a claim's imports depend on which gate imported a package first",
        (
            Edit(
                "assay.qualify.plugin.imports:import_closure",
                "return sorted(reached)",
                "return sorted(reached - set(files))",
            ),
        ),
    ),
    Defect(
        "qualify.plugin.imports.beside_scripts_unresolved",
        "the imports a gate module makes from its own folder (a helper package beside it) are "
        "not resolved, so a claim lists the helper only when its test imported it first",
        (
            Edit(
                "assay.qualify.plugin.imports:import_closure",
                "ProjectModules(root, packages, files, _beside_scripts(root, files))",
                "ProjectModules(root, packages, files)",
            ),
        ),
    ),
    Defect(
        "qualify.publishing.compare.changes.flip_unseen",
        "compare never reports a claim as flipped to fail (it shows as regressed at most)",
        (
            Edit(
                "assay.qualify.publishing.compare.changes:claim_change",
                'if before["verdict"] == "pass" and (after["verdict"] != "pass" '
                "or fails_old_bound):",
                "if False:",
            ),
        ),
    ),
    Defect(
        "qualify.publishing.compare.changes.noise_counted",
        "compare judges a float moved in its last bits as moved for real (no noise floor)",
        (
            Edit(
                "assay.qualify.publishing.compare.changes:float_noise",
                "    return abs(b - a) <= FLOAT_NOISE * max(abs(a), abs(b))",
                "    return False",
            ),
        ),
    ),
    Defect(
        "qualify.publishing.compare.changes.timings_always_compared",
        "compare compares timings whatever machine and load measured them",
        (
            Edit(
                "assay.qualify.publishing.compare.changes:timing_difference",
                '    a, b = old["environment"], new["environment"]\n',
                '    return None\n    a, b = old["environment"], new["environment"]\n',
            ),
        ),
    ),
    Defect(
        "qualify.publishing.compare.changes.passing_regression_fails",
        "compare fails a regression of a claim that still passes on both sides (no warning)",
        (
            Edit(
                "assay.qualify.publishing.compare.changes:claim_change",
                'found.append(WARNING if both_pass else "regressed")',
                'found.append("regressed")',
            ),
        ),
    ),
    Defect(
        "qualify.publishing.compare.changes.vanished_gate_unseen",
        "a gate whose receipts are gone from NEW is listed as unpaired and its claims are not "
        "counted, so deleting a failing gate compares clean",
        (
            Edit(
                "assay.qualify.publishing.compare.changes:compare_sides",
                'for claim in before.get(device, {}).get("claims", []) if only == "OLD" else []:',
                "for claim in []:",
            ),
        ),
    ),
    Defect(
        "qualify.core.identifier.lookalikes_accepted",
        "claim ids with surrounding whitespace, invisible characters or look-alike letters (not "
        "NFKC-normal) are accepted, so two claims read as one",
        (
            Edit(
                "assay.qualify.core.identifier:id_problem",
                "if value != value.strip():",
                "return None\n    if value != value.strip():",
            ),
        ),
    ),
    Defect(
        "qualify.publishing.history.valueless_runs_dropped",
        "a run whose value is NaN (null) or that lacks the claim has no mark in the claim's "
        "figure or sparkline, which then end on the run before it",
        (
            Edit(
                "assay.qualify.publishing.history:claim_points",
                "            claim = held.get(cid)\n",
                "            claim = held.get(cid)\n"
                "            if claim is None or not _finite(claim['measurement'].get('value')):\n"
                "                continue\n",
            ),
        ),
    ),
    Defect(
        "qualify.ledger.history.uncommitted_unnoted",
        "receipts on disk that no commit holds pass verification without the note that their "
        "history is unchecked",
        (
            Edit(
                "assay.qualify.ledger.history:check_history",
                "notes.extend(_uncommitted_receipts(receipts_dir, tracked, committed))",
                "pass",
            ),
        ),
    ),
    Defect(
        "qualify.ledger.archive.figure_in_receipts_place",
        "import-gpu writes a receipt's last figure's bytes in the receipt's place (the figure "
        "loop reuses the receipt's variable)",
        (
            Edit(
                "assay.qualify.ledger.archive:_plan",
                '                image = members.get(figure["path"])',
                '                image = data = members.get(figure["path"])',
            ),
        ),
    ),
    Defect(
        "qualify.ledger.chain.refused_ledger_listed",
        "a LEDGER that is a device or links out of its folder is listed as one problem among "
        "every receipt it then fails to hold (exit 1, a line per receipt), not refused as bad "
        "input in one line",
        (
            Edit(
                "assay.qualify.ledger.chain:read_ledger",
                "read_text_refusing(",
                '__import__("assay.bounded").bounded.read_text_bounded(',
            ),
        ),
    ),
    Defect(
        "qualify.ledger.chain.unchained",
        "verify ignores the LEDGER and the receipts' back-links",
        (
            Edit(
                "assay.qualify.ledger.chain:check_chain",
                "    path = Path(gate_dir) / LEDGER\n",
                "    return []\n    path = Path(gate_dir) / LEDGER\n",
            ),
        ),
    ),
    Defect(
        "qualify.core.threshold.controls_ignored",
        "a claim passes on its measurement alone, whatever its controls",
        (
            Edit(
                "assay.qualify.core.threshold:judge",
                'verdict = "pass" if conclusive else "inconclusive"',
                'verdict = "pass"',
            ),
        ),
    ),
    Defect(
        "qualify.ledger.receipt.hash_skips_claims",
        "receipt_sha256 does not cover the claims",
        (
            Edit(
                "assay.qualify.ledger.receipt:receipt_sha256",
                "if k != SHA_FIELD}",
                'if k not in (SHA_FIELD, "claims")}',
            ),
        ),
    ),
    Defect(
        "qualify.ledger.receipt.controls_not_judged",
        "validation does not re-judge the controls' failed flags",
        (
            Edit(
                "assay.qualify.ledger.receipt:_consistency",
                'if [c["failed"] for c in judged["controls"]] != flags:',
                "if False:",
            ),
        ),
    ),
    Defect(
        "qualify.ledger.sign.accept_any",
        "a signature is reported good without being checked",
        (
            Edit(
                "assay.qualify.ledger.sign:signature_state",
                "    if trusted is None or not Path(trusted).is_file():\n",
                '    return Signature(path, "unchecked", "signed", "good signature")\n'
                "    if trusted is None or not Path(trusted).is_file():\n",
            ),
        ),
    ),
    Defect(
        "qualify.judging.stale.ignore",
        "staleness is never reported: every record counts as current",
        (
            Edit(
                "assay.qualify.judging.stale:check_receipt",
                '    gate = receipt["gate"]\n',
                "    return None\n",
            ),
        ),
    ),
    Defect(
        "qualify.publishing.verify.newest_receipt_only",
        "verify checks only the newest receipt of a gate",
        (
            Edit(
                "assay.qualify.publishing.verify:verify_tree",
                "        problems.extend(standing.problems)\n",
                "        heads = [r['receipt_sha256'][:12] for r in standing.receipts[-1:]]\n"
                "        problems.extend(p for p in standing.problems if all(h in p for h in heads))\n",  # noqa: E501
            ),
        ),
    ),
    Defect(
        "qualify.publishing.verify.record_not_compared",
        "verify does not compare a record with a fresh render",
        (
            Edit(
                "assay.qualify.publishing.verify:record_problems",
                "    if standing.receipts and text",
                "    if False and text",
            ),
        ),
    ),
    # assay.qualify.judging.select
    Defect(
        "qualify.judging.select.stale_code_current",
        "--gate-select=stale takes a gate whose claims read a changed file as current",
        (
            Edit(
                "assay.qualify.judging.select:why_run",
                "if found.stale is not None:",
                "if found.stale is not None and False:",
            ),
        ),
    ),
    Defect(
        "qualify.judging.select.failing_record_current",
        "--gate-select=stale takes a gate whose record stands at fail as current",
        (
            Edit(
                "assay.qualify.judging.select:why_run",
                'if found.status != "pass":',
                'if found.status not in ("pass", "fail"):',
            ),
        ),
    ),
    Defect(
        "qualify.judging.select.environment_ignored",
        "--gate-select=stale does not compare the recorded torch and python with the installed",
        (
            Edit(
                "assay.qualify.judging.select:why_run",
                'changes = environment_changes(found.head["environment"])',
                "changes = []",
            ),
        ),
    ),
)
