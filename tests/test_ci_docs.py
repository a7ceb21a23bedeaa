"""docs/ci.md's jobs run the commands this project's CI (``.ci/run``) runs: every command in
every job is a line of ``.ci/run`` (platform variables aside), or is named below with the
``.ci/run`` line that rehearses it and why it cannot run there itself."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "ci.md"
CI = ROOT / ".ci" / "run"
# command prefix -> (the .ci/run line that rehearses it, why it does not run there as written)
REHEARSED = {
    'nox -s compare -- "origin/': (
        'nox -s compare -- records/receipts "$WORK/receipts"',
        "a pull request's base branch exists only on the forge; test_compare.py covers revisions",
    ),
    'nox -s compare -- "$CI_MERGE_REQUEST_DIFF_BASE_SHA"': (
        'nox -s compare -- records/receipts "$WORK/receipts"',
        "a merge request's base exists only on the forge; test_compare.py covers revisions",
    ),
    'OUT="$RUNNER_TEMP/out" bash harness/gpu_qualify.sh': (
        "nox -s tests",
        "needs the GPU; tests/harness/test_gpu_bundle.py takes the kit's whole path on CPU",
    ),
    'OUT="$CI_PROJECT_DIR/out" bash harness/gpu_qualify.sh': (
        "nox -s tests",
        "needs the GPU; tests/harness/test_gpu_bundle.py takes the kit's whole path on CPU",
    ),
    "nox -s verify": (
        "nox -s verify -- --stale",
        "--stale makes every check plain verify makes, and fails on stale records too",
    ),
    "nox -s gpu-dry-run": (
        "nox -s tests",
        "tests/harness/test_gpu_bundle.py runs the same dry run (gate-cuda) inside the suite",
    ),
    'mv "$WORK/site" public': ('nox -s site -- "$WORK/site"', "GitLab's pages folder"),
}


def _ci_lines() -> set[str]:
    lines = set()
    for line in CI.read_text("utf-8").splitlines():
        line = re.sub(r"\s+#\s.*$", "", line).strip()
        if line and not line.startswith("#"):
            lines.add(line)
    return lines


def job_commands() -> list[tuple[str, str]]:
    """(job, command) for every ``run:`` step and ``script:`` item in docs/ci.md's YAML."""
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text("utf-8"), flags=re.S)
    found = []
    for block in blocks:
        for job, body in yaml.safe_load(block).items():
            steps = [s["run"] for s in body.get("steps", []) if "run" in s]
            for command in [*steps, *body.get("script", [])]:
                found.append((job, command.strip()))
    return found


COMMANDS = job_commands()


def test_the_doc_has_all_four_jobs_on_both_forges():
    jobs = [job for job, _ in COMMANDS]
    for job in ("regression", "compare", "gpu", "site", "pages"):
        assert job in jobs
    assert len(re.findall(r"```yaml\n", DOC.read_text("utf-8"))) == 8


@pytest.mark.parametrize(("job", "command"), COMMANDS, ids=[f"{j}:{c[:40]}" for j, c in COMMANDS])
def test_each_job_command_is_what_ci_runs(job, command):
    ci = _ci_lines()
    if command in ci:
        return
    rehearsal = next((v for k, v in REHEARSED.items() if command.startswith(k)), None)
    assert rehearsal is not None, f"{job}: {command!r} is neither in .ci/run nor rehearsed"
    assert rehearsal[0] in ci, f"{job}: the rehearsal {rehearsal[0]!r} left .ci/run"


def test_the_check_fails_for_a_command_ci_does_not_run():
    """Control: a job line CI dropped (a renamed session) is caught."""
    with pytest.raises(AssertionError, match=r"neither in \.ci/run"):
        test_each_job_command_is_what_ci_runs("regression", "nox -s gates-renamed")
