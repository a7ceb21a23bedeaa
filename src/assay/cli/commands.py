"""The command table: one row per ``assay`` command, and the only place a command is named.

A row names the module that implements the command and two functions in it:
``arguments(parser)`` adds the command's arguments, and ``run(args) -> int`` runs it (the
trainer's command modules use those names; the framework's, which hold several commands,
prefix them). ``needs_trainer`` marks the commands that need the ``train`` extra (torch). They are
refused with one line when it is missing. The framework's commands run without it.
``--help``, that refusal and the dispatch are all generated from this table. Adding a command
takes its module and one row here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    """One ``assay`` command."""

    name: str
    module: str
    needs_trainer: bool
    help: str
    arguments: str = "arguments"
    run: str = "run"


# the gate framework's commands
QUALIFY = "assay.qualify.cli_commands"
COMMANDS: tuple[Command, ...] = (
    Command("info", "assay.cli.info", True, "describe a model file: config, sizes, fingerprints"),
    Command("train", "assay.cli.train", True, "fine-tune from a YAML config, with a progress bar"),
    Command(
        "eval", "assay.cli.evaluate", True, "held-out loss of a config's model (and checkpoint)"
    ),
    Command(
        "export", "assay.cli.export", True, "write a checkpoint as a PEFT adapter or a merged model"
    ),
    Command(
        "estimate",
        "assay.cli.estimate",
        True,
        "predict peak device memory of a train config or a published model shape, and "
        "check it fits",
    ),
    Command(
        "generate",
        "assay.cli.generate",
        True,
        "greedy continuations of prompts (KV cache), from a model, config or run",
    ),
    Command(
        "status",
        "assay.cli.status",
        True,
        "where a run stands: step, loss, tokens/s, checkpoint, elapsed, ETA, state",
    ),
    Command(
        "docs",
        "assay.cli.docs",
        False,
        "print a document shipped with the package (gate-api, settings)",
    ),
    Command(
        "render",
        QUALIFY,
        False,
        "rebuild records/<gate>.md, the ledgers and records/README.md",
        "render_arguments",
        "run_render",
    ),
    Command(
        "verify",
        QUALIFY,
        False,
        "check receipts' schema, sha256, ledger chain and signatures, and that records match",
        "verify_arguments",
        "run_verify",
    ),
    Command(
        "sign",
        QUALIFY,
        False,
        "sign every unsigned receipt with ssh-keygen -Y sign (detached .sig files)",
        "sign_arguments",
        "run_sign",
    ),
    Command(
        "publish",
        QUALIFY,
        False,
        "build a static HTML site of the index, records, figures and ledgers",
        "publish_arguments",
        "run_publish",
    ),
    Command(
        "import-gpu",
        QUALIFY,
        False,
        "add the receipts of a GPU kit's archive to the ledgers, render and verify",
        "import_arguments",
        "run_import",
    ),
    Command(
        "compare",
        "assay.qualify.publishing.compare.report",
        False,
        "what changed between two sets of receipts: flips, regressions, bounds, standings",
        "compare_arguments",
        "run_compare",
    ),
    Command(
        "attest",
        "assay.qualify.publishing.attest",
        False,
        "write receipts as signed in-toto statements (DSSE), or verify them",
        "attest_arguments",
        "run_attest",
    ),
)

TRAINER_COMMANDS = frozenset(c.name for c in COMMANDS if c.needs_trainer)
