"""Every shell command in the ``bash`` blocks of README.md and of the guides in docs/ is run, or
allowlisted with a reason.

A reader follows a page from top to bottom, so each page's blocks run in order as one bash
script (``set -e``) in a scratch copy of ``examples/``, with ``assay`` bound to this tree's
``python -m assay.cli``. A small table shortens commands that would take minutes (fewer steps on
the real model); everything else runs as written, so a documented command that stops working
fails here. A line that is neither run nor allowlisted fails too, so new commands cannot slip
past the test.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The pages whose commands a user types: the README and the guides it points to.
DOCUMENTS = (
    "README.md",
    "docs/training.md",
    "docs/memory.md",
    "docs/adapters.md",
    "docs/preference.md",
    "docs/stopping.md",
    "docs/distributed.md",
    "docs/trust.md",
    "docs/throughput.md",
    "docs/matrix.md",
    "docs/mutation.md",
)

# Commands not run here, by prefix, each with why.
NOT_RUN = {
    "python -m venv": "makes a virtualenv to install into; the test runs in this one",
    "python -m pip install": "installs packages (no network at test time)",
    "pip install": "installs packages (no network at test time)",
    "nox ": "runs whole sessions (the suite, gates, lint): the integrator's CI runs them",
    "torchrun ": "multi-process launch on a placeholder config.yaml; tests/distributed runs it",
    "pytest": "would run this suite recursively",
    "mypy": "the type check of the whole package; tests/test_typed_package.py runs it",
    "python -m assay_testing.defects": "arms a defect and runs part of this suite; gate-mutation "
    "runs every such pair",
    "python harness/bench_step.py": "a minutes-long benchmark; gate-throughput runs it",
    "assay render": "rewrites the tree's records/; tests/qualify covers render on copies",
    "assay verify": "checks the published records/; tests/qualify covers verify on copies",
    "assay sign": "needs an ssh signing key; tests/qualify/test_signatures.py signs with a "
    "throwaway key",
    "assay publish": "reads the tree's records/; tests/qualify/test_index_and_site.py builds and "
    "browses a site",
    "assay generate config.yaml": "placeholder config and run dir; tests/test_generate_cli.py "
    "generates from a trained run",
    "assay generate model_dir/": "placeholder model dir; tests/test_generate_cli.py decodes "
    "batches from a safetensors dir",
    "python harness/gpu_bundle.py": "downloads cp312 wheels; nox -s gpu-dry-run (in CI) builds "
    "the kit",
    "bash harness/gpu_qualify.sh": "runs on the GPU box; nox -s gpu-dry-run rehearses it on CPU",
    "assay attest": "needs an ed25519 signing key; tests/qualify/test_attest.py signs with a "
    "throwaway key",
    "assay compare": "reads this tree's git history; tests/qualify/test_compare.py compares real "
    "ledgers, folders and revisions",
    "assay import-gpu": "placeholder archive; tests/qualify/test_archive.py and the dry run in "
    "tests/harness/test_gpu_bundle.py import real ones",
}

# Commands under an allowlisted prefix that do run: they read only what their own block wrote.
RUN_ON_OWN_FILES = {"assay verify --records records"}

# Substitutions that keep a command short; the README's meaning is unchanged (the example
# config is also shortened in the scratch copy, see _workspace). Whole commands first, then
# substrings.
SHORTEN_COMMANDS = {
    "assay train examples/smollm2-lora.yaml": "assay train examples/smollm2-lora.yaml --stop-at 2",
    "assay train examples/smollm2-hf-lora.yaml": "assay train examples/smollm2-hf-lora.yaml "
    "--stop-at 2",
    "assay train examples/smollm2-dpo.yaml": "assay train examples/smollm2-dpo.yaml --stop-at 2",
}
SHORTEN = {"--stop-at 4": "--stop-at 3"}
# Commands a page shows failing on purpose, with the exit code they must end with.
EXPECTED_EXIT = {"assay estimate examples/smollm2-lora.yaml --budget 200MiB --json": 1}

# Blocks whose commands load the real model: slow.
SLOW_MARKERS = (
    "assay info",
    "assay train",
    "assay eval",
    "assay export",
    "assay generate",
    "python examples/write_smollm2_folder.py",
)


def shell_blocks(text: str) -> list[tuple[int, list[str]]]:
    """(first line number, command lines) of every ```bash block, comments stripped."""
    blocks, current, start = [], None, 0
    for number, line in enumerate(text.splitlines(), start=1):
        if current is None and line.strip() == "```bash":
            current, start = [], number + 1
        elif current is not None and line.strip() == "```":
            blocks.append((start, current))
            current = None
        elif current is not None:
            command = re.sub(r"\s+#\s.*$", "", line).rstrip()
            if command and not command.lstrip().startswith("#"):
                current.append(command)
    return blocks


def skip_reason(command: str) -> str | None:
    """Why ``command`` is not run, or None to run it."""
    if command in RUN_ON_OWN_FILES:
        return None
    return next((why for prefix, why in NOT_RUN.items() if command.startswith(prefix)), None)


def _workspace(tmp_path: Path) -> Path:
    """A scratch copy of examples/ with the LoRA example shortened to 4 steps of 64 tokens."""
    work = tmp_path / "work"
    shutil.copytree(
        ROOT / "examples", work / "examples", ignore=shutil.ignore_patterns("runs", "smollm2-hf")
    )
    config = work / "examples" / "smollm2-lora.yaml"
    text = config.read_text()
    for old, new in (
        ("steps: 8", "steps: 4"),
        ("seq_len: 256", "seq_len: 64"),
        ("save_every: 4", "save_every: 1"),
        ("warmup_steps: 2", "warmup_steps: 1"),
        ("chunk_size: 256", "chunk_size: 64"),
    ):
        assert old in text, f"the example config no longer has {old!r}; update test_readme"
        text = text.replace(old, new)
    config.write_text(text)
    return work


def _blocks(document: str) -> list[tuple[int, list[str]]]:
    return shell_blocks((ROOT / document).read_text(encoding="utf-8"))


BLOCKS = {document: _blocks(document) for document in DOCUMENTS}
MODEL_LINE = next(
    c for blocks in BLOCKS.values() for _, block in blocks for c in block if c.startswith("MODEL=")
)


def runnable(document: str) -> list[tuple[int, list[str]]]:
    """(first line, commands to run) of each of ``document``'s blocks that runs anything."""
    found = []
    for start, commands in BLOCKS[document]:
        kept = [c for c in commands if skip_reason(c) is None and c != MODEL_LINE]
        if kept:
            found.append((start, kept))
    return found


def _params():
    for document in DOCUMENTS:
        blocks = runnable(document)
        if not blocks:
            continue
        slow = any(c.startswith(SLOW_MARKERS) for _, block in blocks for c in block)
        marks = [pytest.mark.slow] if slow else []
        yield pytest.param(document, blocks, marks=marks, id=document)


def test_every_documented_command_is_run_or_allowlisted():
    commands = [(d, c) for d, blocks in BLOCKS.items() for _, block in blocks for c in block]
    assert len(commands) >= 60, "the README and guides lost their command blocks?"
    ran = {(d, c) for d in DOCUMENTS for _, block in runnable(d) for c in block}
    for document, command in commands:
        assert (document, command) in ran or skip_reason(command) or command == MODEL_LINE, (
            f"{document}: {command}"
        )


def script(document: str, blocks: list[tuple[int, list[str]]]) -> str:
    """One bash script running ``blocks`` in order; before each block it names the block's
    place on stderr, so a failure says which block it was."""
    lines = []
    for start, commands in blocks:
        lines.append(f"echo '== {document}:{start}' >&2")
        for command in commands:
            command = SHORTEN_COMMANDS.get(command, command)
            for old, new in SHORTEN.items():
                command = command.replace(old, new)
            if command in EXPECTED_EXIT:  # a refusal the page shows on purpose
                command = f"{command} || test $? -eq {EXPECTED_EXIT[command]}"
            lines.append(command)
    uses_model = any("$MODEL" in c for c in lines)
    return "\n".join(
        [
            "set -euo pipefail",
            f'assay() {{ "{sys.executable}" -m assay.cli "$@"; }}',
            *([MODEL_LINE] if uses_model else []),
            *lines,
        ]
    )


@pytest.mark.parametrize(("document", "blocks"), list(_params()))
def test_documented_commands_run(tmp_path, document, blocks):
    work = _workspace(tmp_path)
    # mktemp and friends write under the test's own folder
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src"),
        "ASSAY_PROGRESS": "0",
        "TMPDIR": str(tmp_path),
    }
    done = subprocess.run(
        ["bash", "-c", script(document, blocks)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert done.returncode == 0, (
        f"{document} failed (exit {done.returncode}):\n{done.stderr[-3000:]}"
    )
    for _, block in blocks:  # each PEFT export the page made is a whole, bound folder
        for command in block:
            if command.startswith("assay export") and "--format peft" in command:
                out = re.search(r"--out (\S+)", command).group(1)
                assert (work / out / "assay_manifest.json").is_file(), command
