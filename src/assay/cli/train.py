"""``assay train``: fine-tune from a YAML config (alone, or every rank under torchrun).

Each checks the config against the model header and the data before loading weights, and
refuses a run directory that already holds a run unless told to resume or overwrite.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assay.cli.dispatch import DEVICE_HELP, device_option, resolve_device
from assay.cli.load_progress import load_progress
from assay.errors import AssayError, ConfigError
from assay.qualify.publishing.wording import plural
from assay.settings import rule as setting_rule
from assay.settings.methods import help_text as adapter_methods_help

if TYPE_CHECKING:
    from assay.train.graceful import GracefulStop


def _check_fit(config, args: argparse.Namespace) -> None:
    """Refuse, before anything loads, a config predicted over its budget: --budget, the
    config's budget, else the free memory of the device (CUDA's free memory; on CPU the host's
    MemAvailable or, where tighter, what the process's memory cgroup has left). The refusal
    names the setting behind the largest term."""
    from assay.memory.plan import (
        header_config,
        host_memory_free,
        plan_from_config,
        refusal_line,
        verdict,
    )
    from assay.settings.loader import model_path, parse_size

    raw = args.budget if args.budget is not None else config.budget
    name = "the budget"
    if raw is not None:
        try:
            budget = parse_size(raw)
        except ValueError as exc:
            raise AssayError(f"{args.config}: --budget: {exc}") from None
    elif str(args.device).startswith("cuda"):
        import torch

        budget = torch.cuda.mem_get_info(torch.device(args.device))[0]
        name = "the device's free memory"
    else:
        free = host_memory_free()
        if free is None:
            return  # no way to know the host's free memory here
        budget, name = free
    result = verdict(plan_from_config(config, header_config(model_path(config))), budget)
    if not result["fits"] and not args.force:
        raise AssayError(f"{args.config}: {refusal_line(result, name)} (--force to run anyway)")


def _print_summary(summary: dict[str, Any], as_json: bool, device_choice: str = "") -> None:
    if device_choice:
        summary = {**summary, "device_choice": device_choice}
    if as_json:
        print(json.dumps(summary, indent=2, sort_keys=True))
        return
    if summary["stopped"]:
        print(f"checkpoint {summary['checkpoint']}")
        return
    if not summary["steps_this_run"]:  # resumed at (or stopped before) its last step
        print(f"nothing to train: the run is at step {summary['steps']}")
        print(f"checkpoint {summary['checkpoint']}")
        return
    eval_text = "" if summary["eval_loss"] is None else f", eval loss {summary['eval_loss']:.4f}"
    ranks = f" on {summary['world_size']} ranks" if summary.get("world_size", 1) > 1 else ""
    where = f" on {summary['device_choice']}" if summary.get("device_choice") else ""
    print(
        f"trained {plural(summary['steps_this_run'], 'step')} (to step {summary['steps']})"
        f"{ranks}{where}: "
        f"final loss {summary['final_loss']:.4f}{eval_text}, {summary['tokens_per_s']:.0f} "
        "tokens/s"
    )
    print(f"checkpoint {summary['checkpoint']}")


@contextlib.contextmanager
def _reporter(args: argparse.Namespace, run_dir: Path, main: bool = True):
    """The ``--report-to`` reporter (None for ``none`` or another rank), open for the block;
    AssayError at once when its writer cannot even start."""
    if args.report_to != "tensorboard" or not main:
        yield None
        return
    from assay.train.report import tensorboard_report

    with tensorboard_report(run_dir) as reporter:
        if reporter.failed:
            raise AssayError(f"--report-to tensorboard: {reporter.error}; nothing was trained")
        yield reporter


class _StopWhen:
    """The run's stop request: a signal (``stop``), or a reporter that failed; ``reason`` is
    what the run state records."""

    def __init__(self, stop: GracefulStop, reporter) -> None:
        self.stop, self.reporter = stop, reporter

    def __call__(self) -> bool:
        return self.stop() or (self.reporter is not None and self.reporter.failed)

    @property
    def reason(self) -> str:
        return "signal" if self.stop() else "report-to failed"


def _train_run(trainer, args: argparse.Namespace, on_checkpoint, main: bool = True):
    """(summary, stop): ``trainer`` trained under graceful stop and the reporter; a reporter
    that failed ends the run with its one-line error (AssayError) once the run has stopped
    and saved its checkpoint."""
    from assay.train.graceful import GracefulStop

    with GracefulStop() as stop, _reporter(args, trainer.out_dir, main) as report:
        summary = trainer.train(
            stop_at=args.stop_at,
            stop_requested=_StopWhen(stop, report),
            report=report,
            on_checkpoint=on_checkpoint,
        )
    if report is not None:
        done = summary["steps"] >= trainer.config.steps  # stopped at the last step: finished
        report.raise_if_failed(str(args.config), trainer.out_dir, finished=done)
    return summary, stop


def _say_stopped(summary: dict[str, Any], stop: GracefulStop, args: argparse.Namespace) -> None:
    """The one line a signalled run ends with: where it stopped and how to go on."""
    if summary["stopped"]:
        run_dir = Path(summary["checkpoint"]).parent
        print(
            f"stopped at step {summary['steps']} ({stop.name}); resume with: assay train "
            f"{args.config} --resume {run_dir}",
            file=sys.stderr,
        )


def _with_strategy(config, strategy: str | None):
    """``config`` with ``distributed.strategy`` overridden by ``--strategy`` (checked again)
    in a torchrun job; a plain process ignores the flag, as ``--help`` says, so a legal flag
    is never refused over a strategy that would not run."""
    import dataclasses

    from assay.distributed.context import launched
    from assay.settings import DistributedConfig
    from assay.settings.loader import check_distributed

    if strategy is None or not launched():
        return config
    current = config.distributed or DistributedConfig()
    changed = dataclasses.replace(
        config, distributed=dataclasses.replace(current, strategy=strategy)
    )
    check_distributed(changed)
    return changed


def _train_distributed(config, args: argparse.Namespace) -> int:
    """One rank of a torchrun job: join the group, train, print from rank 0, leave the group."""
    from assay.distributed.context import init
    from assay.distributed.trainer import DistributedTrainer
    from assay.settings import DistributedConfig

    settings = config.distributed or DistributedConfig()
    context = init(args.device, settings.backend, source=f"{args.config}: distributed")
    try:
        args.device = context.device
        _check_fit(config, args)
        with _claimed(config, args, context.is_main) as on_checkpoint:
            if context.is_main:
                _check_events_folder(config, args)
            progress = not (args.json or args.no_progress)
            trainer = DistributedTrainer(config, context, progress=progress)
            if args.resume:
                trainer.resume(args.resume)
            summary, stop = _train_run(trainer, args, on_checkpoint, context.is_main)
        if context.is_main:
            _print_summary(summary, args.json, args.device_choice)
            _say_stopped(summary, stop, args)
        # The DDP/FSDP wrappers hold the process group, so destroying it alone leaves its
        # threads to the interpreter's shutdown, where freeing them can abort the rank: free
        # them here, while the interpreter is whole, then leave the group.
        del trainer
        gc.collect()
        context.finish()
    finally:
        context.close()
    return stop.exit_code if summary["stopped"] else 0


def preflight(config) -> None:
    """Config checks against the model header, the tokenizer and the data rows, before any
    weights load."""
    from assay.train.preflight import check_against_model, check_rows, check_tokenizer, model_config

    model = model_config(config)
    check_against_model(config, model)
    check_tokenizer(config, model)
    check_rows(config)


def _claim_output(config, args: argparse.Namespace):
    """Check and lock the run dir for this process (main process only): refuse one that
    holds a run unless --resume/--overwrite, and one another process is writing."""
    from assay.train.run.folder import claim_run_dir

    return claim_run_dir(
        Path(config.output.dir), str(args.config), resume=args.resume, overwrite=args.overwrite
    )


@contextlib.contextmanager
def _claimed(
    config, args: argparse.Namespace, main: bool = True
) -> Iterator[Callable[[], None] | None]:
    """Claim the run folder (main process only; a rank that writes nothing claims none) and
    hold it for the block; yield what the run calls after each checkpoint. The claim is taken
    inside the block's guard, so a stop signal the moment it is taken still gives it back: a
    block that fails before the first checkpoint removes a folder it created and gives an
    overwritten run back; one that cannot delete the old run says so on one line."""
    if not main:
        yield None
        return
    claim = None
    failed = True
    try:
        claim = _claim_output(config, args)

        def after_checkpoint() -> None:
            trouble = claim.checkpointed()
            if trouble:
                print(f"assay: warning: {trouble}", file=sys.stderr)

        yield after_checkpoint
        failed = False
    finally:
        if claim is not None:
            claim.release(failed=failed)


def _check_events_folder(config, args: argparse.Namespace) -> None:
    """With ``--report-to tensorboard``, refuse before loading when event files cannot be
    written into the (claimed, so existing) run folder."""
    if args.report_to == "tensorboard":
        from assay.train.report import check_events_folder

        check_events_folder(Path(config.output.dir))


def _finished(config, args: argparse.Namespace) -> bool:
    """True (and one line said) when ``--resume`` names a run that already reached its last
    step under this config; called after the resume's checks, and writes nothing in the run."""
    from assay.settings.loader import config_fingerprint
    from assay.train.checkpoint.directory import finished_at

    done = finished_at(Path(args.resume), config_fingerprint(config), config.steps)
    if done is None:
        return False
    if args.json:
        print(json.dumps({"finished": True, "steps": config.steps, "checkpoint": str(done)}))
    else:
        print(
            f"{done.parent}: already finished (step {config.steps} of {config.steps}); "
            f"nothing to train, nothing changed; checkpoint {done}"
        )
    return True


def _choose_device(args: argparse.Namespace) -> None:
    """Settle ``args.device`` (``auto`` resolved; a resumed run keeps its device where it still
    exists) and check that this torch has it, before anything loads; ``args.device_choice``
    says which and why, for the summary (the progress bar names the device too)."""
    from assay.train.checkpoint.layout import run_holding
    from assay.train.loop import recorded_device

    # a run folder, a step folder, or one killed before its first checkpoint (its metrics
    # are beside it); what is none of these is refused later, under the run's lock
    resumed = Path(args.resume) if args.resume else None
    run = None if resumed is None else run_holding(resumed) or resumed
    before = None if run is None or not run.is_dir() else recorded_device(run)
    args.device, why = resolve_device(args.device, before)
    require_device(args.device)
    args.device_choice = f"{args.device} ({why})"
    if before is not None and before != args.device:
        args.device_choice += f"; the steps before ran on {before}"


def require_device(device: str) -> None:
    """ConfigError naming ``--device`` when this torch has no such device, before anything
    loads."""
    if not device.startswith("cuda"):
        return
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = int(device.partition(":")[2] or 0)
    if index >= count:
        have = f"CUDA devices 0..{count - 1}" if count else "no CUDA device"
        raise ConfigError(
            f"--device {device}: this torch ({torch.__version__}) sees {have}; "
            "use --device cpu or a device it lists"
        )


def run(args: argparse.Namespace) -> int:
    from assay.train.graceful import stop_at_once

    # from the first step: a stop signal while torch imports or the config loads ends in one
    # line, as one during the model's load does (a torchrun rank trains outside this guard)
    with stop_at_once() as at_once:
        # torch's C code imports numpy and clears whatever that import raised, a stop too:
        # a signal during torch's import waits for it, then stops
        with at_once.deferred():
            import torch  # noqa: F401
        from assay.distributed.context import launched

        config = _checked_config(args)
        if not launched():
            return _train_here(config, args)
    return _train_distributed(config, args)


def _checked_config(args: argparse.Namespace):
    """The config, with every check that needs no weights made (device, reporter, header,
    rows)."""
    from assay.settings.loader import load_train_config

    config = _with_strategy(load_train_config(args.config), args.strategy)
    _choose_device(args)
    if args.report_to == "tensorboard":
        from assay.train.report import check_tensorboard

        check_tensorboard()
    preflight(config)
    return config


def _train_here(config, args: argparse.Namespace) -> int:
    """Train in this one process: claim the run folder, load, resume, train, report."""
    from assay.train.loop import Trainer

    _check_fit(config, args)
    with _claimed(config, args) as on_checkpoint:
        _check_events_folder(config, args)
        with load_progress("model and data", enabled=not args.no_progress):
            trainer = Trainer(
                config, device=args.device, progress=not (args.json or args.no_progress)
            )
        if args.resume:
            # every check of the resume (the model's and data's fingerprints too) comes
            # before the shortcut for a run that already reached its last step
            checkpoint = trainer.checked_checkpoint(args.resume)
            if _finished(config, args):
                return 0
            trainer.restore(checkpoint)
        summary, stop = _train_run(trainer, args, on_checkpoint)
    _print_summary(summary, args.json, args.device_choice)
    _say_stopped(summary, stop, args)
    return stop.exit_code if summary["stopped"] else 0


def _train_epilog() -> str:
    """The config's keys with their defaults, and the methods, from the settings tree and the
    adapter registry (so the help cannot drift from what the loader does)."""
    import textwrap

    from assay.settings.schema import help_lines

    methods = textwrap.fill("adapter.method: " + adapter_methods_help(), 88, subsequent_indent="  ")
    keys = "\n".join(textwrap.fill(line, 88, subsequent_indent="    ") for line in help_lines())
    return (
        f"config keys (key: default; every key, bound and meaning: assay docs settings):\n"
        f"{keys}\n\n{methods}"
    )


def arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``assay train``, with every config key and method in the epilog."""
    parser.description = (
        "Fine-tune from a YAML config. Under torchrun (torchrun --nproc-per-node N "
        "-m assay.cli train CONFIG) every rank trains its slice of each step's rows (gloo on "
        "CPU, NCCL with --device cuda); rank 0 alone prints, logs and writes checkpoints, "
        "which resume at any world size."
    )
    parser.epilog = _train_epilog()
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("config", help="train config (YAML; see examples/)")
    parser.add_argument(
        "--resume",
        metavar="DIR",
        help="continue bit for bit from a checkpoint (a run dir or step dir)",
    )
    parser.add_argument(
        "--stop-at",
        type=int,
        metavar="STEP",
        help="stop after this step (checkpointed there); --resume continues",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing run in output.dir: it is moved aside and deleted after the "
        "new run's first checkpoint, or put back if the new run fails first (default: refuse)",
    )
    parser.add_argument("--device", default="auto", type=device_option, help=DEVICE_HELP)
    parser.add_argument(
        "--budget",
        help="device memory budget, e.g. 4GiB (default: the config's budget, else the "
        "device's free memory: CUDA free memory; on CPU the lower of MemAvailable and the "
        "memory cgroup's free memory)",
    )
    parser.add_argument(
        "--report-to",
        choices=("none", "tensorboard"),
        default="none",
        help="also write metrics as TensorBoard event files under OUTPUT_DIR/tensorboard "
        "(needs: pip install tensorboard); metrics.jsonl stays the record (default none)",
    )
    parser.add_argument(
        "--force", action="store_true", help="train even when the predicted peak exceeds the budget"
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--strategy",
        choices=setting_rule("distributed.strategy").choices,
        help="under torchrun: ddp (replicate, all-reduce gradients) or fsdp (FSDP2 shards "
        "base and trainables); overrides distributed.strategy (default "
        f"{setting_rule('distributed.strategy').default}). A plain process ignores it",
    )
