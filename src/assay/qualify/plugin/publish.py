"""Session end: turn collected fragments into validated receipts, figures and records."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assay.errors import AssayError
from assay.qualify.core.portable import is_outside, portable
from assay.qualify.core.source import file_sha256
from assay.qualify.judging.baseline import compare, find_baseline, no_baseline
from assay.qualify.ledger.chain import write_receipt
from assay.qualify.ledger.receipt import (
    check_corrections,
    problems_in,
    read_receipt,
    receipt_paths,
    seal,
    utc_now,
)
from assay.qualify.plugin.assemble import (
    build_receipt,
    duplicate_claims,
    merge_attempts,
    plan_figures,
)
from assay.qualify.plugin.environment import describe_code, describe_environment
from assay.qualify.plugin.executed import subject_packages
from assay.qualify.plugin.reads import changed_since_loaded


@dataclass(frozen=True)
class Options:
    """Where and how to publish: directories, device, the pytest argv and the project root."""

    receipts: Path
    records: Path
    baseline: Path | None
    render: bool
    device: str
    argv: list[str]
    root: Path
    # gate session facts (plugin/session.py): probed once, tree state taken before any write
    environment: dict[str, Any] | None = None
    tree: dict[str, Any] | None = None
    subject: dict[str, Any] | None = None
    partial: dict[str, str] = field(default_factory=dict)  # gate -> why the run is partial
    failures: dict[str, list[dict[str, str]]] = field(default_factory=dict)  # gate -> failures
    extras: dict[str, dict[str, Any]] = field(default_factory=dict)  # gate -> headline, skipped
    project: str | None = None  # the ini gate_project, when set
    shown: list[dict[str, Any]] = field(default_factory=list)  # receipts written or previewed


WHEEL_ENV = "ASSAY_SUBJECT_WHEEL"


def wheel_subject(subject: str | None, root: Path) -> dict[str, str] | None:
    """``{"filename", "sha256"}`` of the wheel named by $ASSAY_SUBJECT_WHEEL, else None.

    Set by ``nox -s gates-wheel``. The wheel must be the project under test's (its
    distribution name is ``subject``), and that project's packages must have been imported from
    an installed copy, not the source checkout: AssayError otherwise, so a receipt never claims
    a wheel it did not exercise.
    """
    import sys

    value = os.environ.get(WHEEL_ENV)
    if not value:
        return None
    wheel = Path(value)
    if not wheel.is_file():
        raise AssayError(f"${WHEEL_ENV}={value}: no such wheel file")

    def normal(name: str) -> str:
        return re.sub(r"[-_.]+", "_", name).lower()

    if subject is None or normal(wheel.name.split("-", 1)[0]) != normal(subject):
        raise AssayError(
            f"${WHEEL_ENV}={wheel.name} is not a wheel of the project under test ({subject})"
        )
    for name in subject_packages(root, subject):
        module = sys.modules.get(name)
        origin = Path(getattr(module, "__file__", None) or "").resolve() if module else None
        installed = origin is not None and {"site-packages", "dist-packages"} & set(origin.parts)
        if module is not None and not installed:
            raise AssayError(
                f"${WHEEL_ENV} is set but {name} was imported from {origin}, not an installed wheel"
            )
    return {"filename": wheel.name, "sha256": file_sha256(wheel)}


def differs_from_tree(receipt: dict[str, Any], root: Path) -> list[str]:
    """Paths (relative to ``root``) of files the receipt's claims recorded whose bytes differ
    from the tree's now, or that the tree lacks, or module sources changed on disk since this
    process loaded them: the copy that ran was not the tree's (an installed package, a file
    edited while the gates ran, or before a second session in one process)."""
    recorded: dict[str, str] = {}
    for claim in receipt["claims"]:
        for key in ("code_files", "executed_files", "import_files", "read_files"):
            for entry in claim.get(key, []):
                recorded.setdefault(entry["path"], entry["sha256"])
    for entry in receipt["code"]["files"]:
        recorded.setdefault(entry["path"], entry["sha256"])
    found = []
    for path, sha in sorted(recorded.items()):
        if is_outside(path):
            continue  # outside the project: the tree has nothing to compare with
        target = Path(root) / path
        if not target.is_file() or file_sha256(target) != sha or changed_since_loaded(target):
            found.append(path)
    return found


def _earlier(receipts: Path, gate: str) -> tuple[list[dict[str, Any]], list[str]]:
    found, problems = [], []
    for path in receipt_paths(receipts, gate):
        try:
            found.append(read_receipt(path))
        except AssayError as err:
            problems.append(str(err))
    return found, problems


def _copy_figures(planned: list[tuple[Path, dict[str, str]]], records: Path) -> None:
    for source, entry in planned:
        target = records / entry["path"]
        if target.exists():
            continue  # content-addressed name: an existing file already holds these bytes
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        shutil.copyfile(source, tmp)
        os.replace(tmp, target)


def _assemble(
    gate: str, fragments: list[dict[str, Any]], options: Options, environment: dict[str, Any]
) -> tuple[dict[str, Any] | None, list[tuple[Path, dict[str, str]]], list[str], list[str]]:
    """(unsealed receipt or None, planned figures, regressions, problems) for one gate."""
    fragments = merge_attempts(fragments)
    problems = duplicate_claims(fragments)
    if problems:
        return None, [], [], problems
    planned = plan_figures(gate, fragments)
    files = [f for fragment in fragments for f in fragment["files"]]
    receipt = build_receipt(
        gate,
        fragments,
        figures=[entry for _, entry in planned],
        code=describe_code(options.root, files, tree=options.tree),
        environment=environment,
        run={
            "argv": options.argv,
            "nox_session": os.environ.get("NOX_CURRENT_SESSION"),
            "device": options.device,
        },
        created=utc_now(),
        subject=options.subject,
        partial=options.partial.get(gate),
        failures=options.failures.get(gate),
        provenance={
            "root": options.root,
            "packages": subject_packages(options.root, options.project),
            "outside": [options.receipts, options.records],
        },
    )
    differs = differs_from_tree(receipt, options.root)
    if differs:
        receipt["code"]["differs_from_tree"] = differs
    # no path of this machine in what is published: the same run from another folder, home or
    # virtualenv writes the same text (assay.qualify.core.portable)
    receipt = portable(receipt, options.root)
    extras = options.extras.get(gate, {})
    if extras.get("gate_file"):
        receipt["gate_file"] = extras["gate_file"]
    if extras.get("headline_claim"):
        receipt["headline_claim"] = extras["headline_claim"]
    if extras.get("skipped"):
        receipt["run"]["skipped"] = extras["skipped"]
    wheel = wheel_subject((receipt.get("subject") or {}).get("name"), options.root)
    if wheel is not None:
        receipt["wheel"] = wheel
        if isinstance(receipt.get("subject"), dict):  # issue 17's subject, where present
            receipt["subject"]["source"] = "wheel"
    regressions: list[str] = []
    if options.baseline is not None:
        found = find_baseline(options.baseline, gate, options.device)
        if found is None:
            receipt["baseline"] = no_baseline(str(options.baseline))
        else:
            receipt["baseline"] = compare(receipt["claims"], found[1], str(found[0]))
            regressions = list(receipt["baseline"]["regressions"])
    if receipt["corrects"]:
        earlier, _ = _earlier(options.receipts, gate)
        problems = check_corrections(receipt, earlier)
        if problems:
            return None, [], [], [f"receipt not written: {p}" for p in problems]
    try:
        invalid = problems_in(seal(receipt))
    except ValueError:
        invalid = ["the receipt holds a number JSON cannot carry (NaN or infinity)"]
    if invalid:
        return None, [], [], ["receipt is invalid and was not written: " + "; ".join(invalid)]
    return receipt, planned, regressions, []


def not_passing(receipt: dict[str, Any]) -> list[str]:
    """One line per claim of ``receipt`` that did not pass, or one for a receipt whose status is
    fail: each makes the session fail, however the test ended (skipped, xfailed, rerun, judged
    in a teardown), so pytest agrees with the receipt."""
    found = [
        f"gate {receipt['gate']!r}: claim {c['id']!r} {c['verdict']}"
        for c in receipt["claims"]
        if c["verdict"] != "pass"
    ]
    if receipt["status"] == "fail" and not found:  # a test raised (xfailed, strict XPASS ...)
        found.append(f"gate {receipt['gate']!r}: status fail (a test failed or raised)")
    return found


def _publish_gate(
    gate: str, fragments: list[dict[str, Any]], options: Options, environment: dict[str, Any]
) -> tuple[tuple[str, str] | None, list[str], list[str]]:
    receipt, planned, regressions, problems = _assemble(gate, fragments, options, environment)
    if receipt is None:
        return None, problems, []
    _copy_figures(planned, options.records)
    path = write_receipt(receipt, options.receipts)
    options.shown.append(receipt)
    return (str(path), receipt["status"]), regressions, not_passing(receipt)


def _by_gate(fragments: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    by_gate: dict[str, list[dict[str, Any]]] = {}
    for fragment in fragments:
        by_gate.setdefault(fragment["gate"], []).append(fragment)
    return by_gate


def preview(
    fragments: list[dict[str, Any]], options: Options
) -> tuple[list[tuple[str, str]], list[str]]:
    """What :func:`publish` would write, as ``("not written: ...", status)`` lines, and the
    claims that would not pass; touches nothing on disk (``--gate-no-write``). The status is the
    run's own verdict; the gate's standing would also weigh its ledger, which a trial run does
    not change."""
    shown, failing = [], []
    environment = options.environment or describe_environment()
    by_gate = _by_gate(fragments)
    for gate in sorted(by_gate):
        try:
            receipt, _, regressions, problems = _assemble(gate, by_gate[gate], options, environment)
        except AssayError as err:
            receipt, regressions, problems = None, [], [str(err)]
        if receipt is None:
            shown.append((f"not written: gate {gate!r}: {'; '.join(problems)}", "error"))
            failing.extend(problems)
            continue
        failing.extend(not_passing(receipt))
        options.shown.append(receipt)
        partial = " (partial run)" if receipt["run"].get("partial") else ""
        regressed = f", {len(regressions)} regression(s)" if regressions else ""
        shown.append(
            (
                f"not written (--gate-no-write): gate {gate!r}: {receipt['status']}{partial}"
                f"{regressed}, {len(receipt['claims'])} claim(s)",
                receipt["status"],
            )
        )
    return shown, failing


def publish(
    fragments: list[dict[str, Any]], options: Options
) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """Write one receipt per gate and render its record; return (written, problems,
    not passing).

    ``written`` holds (receipt path, status); ``problems`` holds one line per session error
    (invalid receipt, bad correction, regression, render failure), each naming its gate;
    ``not passing`` one line per written claim that did not pass. An invalid receipt is never
    written.
    """
    from assay.qualify.publishing.index import render_index
    from assay.qualify.publishing.render import render_gate

    by_gate = _by_gate(fragments)
    environment = options.environment or describe_environment()
    written: list[tuple[str, str]] = []
    problems: list[str] = []
    failing: list[str] = []
    for gate in sorted(by_gate):
        try:
            done, gate_problems, gate_failing = _publish_gate(
                gate, by_gate[gate], options, environment
            )
        except AssayError as err:
            done, gate_problems, gate_failing = None, [str(err)], []
        problems.extend(
            p if p.startswith(f"gate {gate!r}") else f"gate {gate!r}: {p}" for p in gate_problems
        )
        failing.extend(gate_failing)
        if done is None:
            continue
        written.append(done)
        if options.render:
            try:
                render_gate(gate, options.receipts, options.records, options.root)
            except AssayError as err:
                problems.append(f"gate {gate!r}: record not rendered: {err}")
    if options.render and written:
        try:
            render_index(options.receipts, options.records, options.root)
        except AssayError as err:
            problems.append(f"index not rendered: {err}")
    return written, problems, failing
