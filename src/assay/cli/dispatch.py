"""Parsing and dispatch for the ``assay`` command line, generated from the command table.

Expected failures print one line and exit 2, never a traceback: an AssayError, an OSError, a
usage error, and a trainer command run without the ``train`` extra all end that way. A warning,
assay's or a library's, prints as one line too (``assay: warning: ...``), without Python's
source line.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import os
import re
import signal
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from assay import DISTRIBUTION
from assay.cli.commands import COMMANDS, TRAINER_COMMANDS, Command
from assay.errors import AssayError

EXIT_USAGE = 2
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a tool killed by the closed pipe exits with
# Top-level import names of the `train` extra's distributions (pyyaml imports as yaml).
TRAIN_EXTRA_MODULES = frozenset(
    {"torch", "bitsandbytes", "gguf", "safetensors", "numpy", "yaml", "tokenizers", "tqdm"}
)


def one_line(message: str) -> str:
    """``message`` on one line: a library's multi-line text (a YAML parser's mark, say) joined
    with spaces, so every error the CLI prints is one line whatever raised it."""
    return re.sub(r"\s*[\r\n]+\s*", " ", message).strip()


def _warning_line(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
    """``warnings.showwarning`` for the command line: one line on stderr, no source line (a
    warning is for the user, not a pointer into assay's code)."""
    kind = "" if issubclass(category, UserWarning) else f"{category.__name__}: "
    print(f"assay: warning: {kind}{one_line(str(message))}", file=sys.stderr)


def device_option(value: str) -> str:
    """argparse type of ``--device``: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``, spelled as torch
    does (whether this torch has that device is checked when the command runs)."""
    if not re.fullmatch(r"auto|cpu|cuda(:[0-9]{1,3})?", value):
        raise argparse.ArgumentTypeError(f"{value[:40]!r}: expected auto, cpu, cuda or cuda:N")
    return value


DEVICE_HELP = (
    "auto (CUDA when this torch sees it, else the CPU), cpu, cuda or cuda:N (default auto)"
)


def resolve_device(requested: str, used_before: str | None = None) -> tuple[str, str]:
    """(the device to run on, why) for ``--device requested``: ``auto`` is CUDA when this torch
    sees a CUDA device, else the CPU; with ``used_before`` (a resumed run's device) ``auto``
    keeps that device where it still exists. Imports torch."""
    if requested != "auto":
        return requested, "--device"
    import torch

    cuda = torch.cuda.is_available()
    if used_before is not None and (
        used_before == "cpu" or (cuda and used_before.startswith("cuda"))
    ):
        return used_before, "auto: the device the run used before"
    return ("cuda", "auto: CUDA is available") if cuda else ("cpu", "auto: no CUDA device")


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors are one line, as every other error of the CLI is: the
    multi-line usage block is left to ``--help``. Subcommand parsers inherit the class."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``assay`` parser: one sub-command per row of the command table. A framework row
    whose module is absent (a trainer-only install without ``assay.qualify``) is left out."""
    parser = OneLineParser(
        prog="assay",
        description="Fine-tune Llama-family models memory-leanly; qualify every claim with gates.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        try:
            module = importlib.import_module(command.module)
        except ImportError:
            if command.needs_trainer:
                raise
            continue  # the qualify package is optional for a trainer-only install
        found = sub.add_parser(command.name, help=command.help, description=command.help)
        getattr(module, command.arguments)(found)
        found.set_defaults(command_row=command)
    return parser


def _rank_prefix() -> str:
    """``[rank N] `` inside a torchrun job, so each rank's one-line error says whose it is."""
    return f"[rank {os.environ['RANK']}] " if "RANK" in os.environ else ""


def needs_trainer_line(command: str) -> str:
    """The one line a trainer command prints when the ``train`` extra is not installed."""
    return f"assay {command} needs the trainer: pip install '{DISTRIBUTION}[train]'"


def trainer_installed() -> bool:
    """Whether torch, the core of the ``train`` extra, can be imported; imports nothing."""
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # a blocking import hook, or torch set to None
        return False


def _command_in(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv``: the first word that is not an option."""
    return next((word for word in argv if not word.startswith("-")), None)


def _from_train_extra(err: ModuleNotFoundError) -> bool:
    return (err.name or "").split(".")[0] in TRAIN_EXTRA_MODULES


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the flush at exit cannot fail on the closed pipe again."""
    # a stdout without a file descriptor (captured in-process) has nothing to flush at exit
    with contextlib.suppress(OSError, ValueError, AttributeError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _stops_at_once(command: str | None) -> contextlib.AbstractContextManager[object]:
    """For ``train``, the stop guard while the command's modules import (its own run keeps it
    from there): a stop signal that early ends in train's one line, never a traceback or a
    death by the signal. Other commands keep Python's defaults (SIGINT: one line, exit 130)."""
    if command != "train":
        return contextlib.nullcontext()
    from assay.train.graceful import stop_at_once

    return stop_at_once()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code. AssayError and OSError become one line and exit 2;
    so does a trainer command without the ``train`` extra (before any argument is checked;
    ``--help`` still prints). A reader that closed stdout (``| head``) ends the command
    quietly with 141, as SIGPIPE ends other tools."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = _command_in(argv)
    asks_help = any(word in ("-h", "--help") for word in argv)
    if command in TRAINER_COMMANDS and not asks_help and not trainer_installed():
        print(needs_trainer_line(command), file=sys.stderr)
        return EXIT_USAGE
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _warning_line
            with _stops_at_once(command):
                args = build_parser().parse_args(argv)
                chosen: Command = args.command_row
                handler: Callable[[argparse.Namespace], int] = getattr(
                    importlib.import_module(chosen.module), chosen.run
                )
            code = handler(args)
            sys.stdout.flush()  # a reader that closed the pipe shows here, not at exit
        return code
    except BrokenPipeError:  # `assay verify | head`: end quietly, as other tools do
        _quiet_stdout()
        return EXIT_BROKEN_PIPE
    except AssayError as err:
        print(f"assay: error: {_rank_prefix()}{one_line(str(err))}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as err:
        what = err.strerror or str(err)
        where = f"{err.filename}: {what}" if err.filename else what
        print(f"assay: error: {_rank_prefix()}{one_line(where)}", file=sys.stderr)
        return EXIT_USAGE
    except ModuleNotFoundError as err:  # torch found, another part of the extra missing
        if command not in TRAINER_COMMANDS or not _from_train_extra(err):
            raise
        print(needs_trainer_line(command), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as err:
        signum = getattr(err, "signum", None)  # assay.train.graceful.Stopped: before training
        if signum is None:
            print("assay: interrupted", file=sys.stderr)
            return 130
        name = signal.Signals(signum).name
        print(f"assay: stopped by {name} before training started; nothing trained", file=sys.stderr)
        return 128 + signum
