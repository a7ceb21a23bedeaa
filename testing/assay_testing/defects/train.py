"""Defects in assay.train (checkpoints and resume, rows, masks, batches and the data cursor)
and in the distributed trainer built on it."""

from __future__ import annotations

from assay_testing.defects import Defect
from assay_testing.patching import Edit

DEFECTS: tuple[Defect, ...] = (
    Defect(
        "train.run.folder.any_folder_is_a_run",
        "a non-empty folder without the run marker counts as a run, so --overwrite moves a "
        "user's files aside and deletes them after the first checkpoint",
        (
            Edit("assay.train.run.folder:_check", "elif not is_marked_run(out):", "elif False:"),
            Edit(
                "assay.train.run.folder:_check_replaceable",
                "extra = not_written_by_train(out)",
                "extra = []",
            ),
        ),
    ),
    Defect(
        "train.run.folder.edits_unchecked",
        "a run whose own files the user changed since train wrote them (a note appended to the "
        "metrics, a checkpoint file edited) is replaced by --overwrite and rewritten by --resume",
        (
            Edit(
                "assay.train.run.folder:_refuse_changed",
                "changed = changed_since_written(run, read_later=read_later)",
                "changed = []",
            ),
        ),
    ),
    Defect(
        "train.graceful.stop_signals_unguarded",
        "no stop signal is turned into the one-line stop before the first step: SIGTERM while "
        "the config or the model loads ends the process by the signal, with no line, leaving "
        "the run folder it claimed",
        (
            Edit(
                "assay.train.graceful:stop_at_once",
                "previous = {sig: signal.signal(sig, at_once) for sig in STOP_SIGNALS}",
                "previous = {}",
            ),
        ),
    ),
    Defect(
        "train.graceful.deferral_ignored",
        "a stop signal inside a deferred block (the imports of torch and numpy) raises at once, "
        "inside third-party import code that swallows it: the stop is lost and numpy is left "
        "half imported",
        (Edit("assay.train.graceful:AtOnce.__call__", "if self._waiting:", "if False:"),),
    ),
    Defect(
        "cli.dispatch.early_stops_unguarded",
        "a stop signal while assay train's command modules import is not turned into train's "
        "one line: SIGTERM ends the process by the signal, SIGINT prints a traceback",
        (Edit("assay.cli.dispatch:_stops_at_once", 'if command != "train":', "if True:"),),
    ),
    Defect(
        "cli.train.finished_before_checks",
        "train --resume of a run that reached its last step exits 0 ('already finished') before "
        "the resume's checks, so a run of another model, other data or a damaged checkpoint "
        "passes for finished",
        (
            Edit(
                "assay.cli.train:_train_here",
                "            checkpoint = trainer.checked_checkpoint(args.resume)\n"
                "            if _finished(config, args):\n"
                "                return 0\n",
                "            if _finished(config, args):\n"
                "                return 0\n"
                "            checkpoint = trainer.checked_checkpoint(args.resume)\n",
            ),
        ),
    ),
    Defect(
        "settings.derived.unchecked",
        "numbers formed from several settings (learning rate x decay, LoRA+'s B rate, rows per "
        "step and per run) are not checked, only each setting alone",
        (
            Edit(
                "assay.settings.derived:check_derived",
                "if not (abs(value) <= number.ceiling):",
                "if False:",
            ),
        ),
    ),
    Defect(
        "train.loop.gradient_scaled",
        "every micro-batch's loss share is back-propagated twice over (the logged loss is not): "
        "a gradient scaled by 2, which an always-active clip and AdamW both hide",
        (Edit("assay.train.loop:Trainer._backward", "share.backward()", "(share * 2).backward()"),),
    ),
    Defect(
        "train.loop.divergence_unchecked",
        "a step whose loss or gradient norm is NaN or infinite is logged, saved and trained on",
        (Edit("assay.train.loop:_check_finite", "if not math.isfinite(value):", "if False:"),),
    ),
    Defect(
        "train.checkpoint.check.optimizer_settings_unchecked",
        "resume trusts optimizer.json's settings (lr, betas, eps, weight decay) over the config",
        (
            Edit(
                "assay.train.checkpoint.check:check_optimizer_settings",
                'saved_groups = checkpoint.optimizer_meta["param_groups"]',
                "return",
            ),
        ),
    ),
    Defect(
        "train.loop.resume_one_lr_for_all_groups",
        "resume sets the schedule's learning rate on every optimizer group, so LoRA+'s B group "
        "loses its lr_ratio after a resume (one-group methods are unchanged)",
        (
            Edit(
                "assay.train.loop:Trainer.restore",
                "self.scheduler.load_state_dict(checkpoint.scheduler_state)",
                "self.scheduler.load_state_dict(checkpoint.scheduler_state); "
                "[g.__setitem__('lr', self.scheduler.get_last_lr()[0]) "
                "for g in self.optimizer.param_groups]",
            ),
        ),
    ),
    Defect(
        "distributed.trainer.tokens_not_summed",
        "each rank normalises its loss by its own scored tokens, not the whole step's",
        (
            Edit(
                "assay.distributed.trainer:DistributedTrainer._step_counts",
                "scored, divisor = self.context.all_reduce_sum(list(local))",
                "scored, divisor = local",
            ),
        ),
    ),
    Defect(
        "train.checkpoint.directory.optimizer_not_restored",
        "resume leaves the optimizer's moments at zero",
        (
            Edit(
                "assay.train.checkpoint.directory:Checkpoint.restore",
                "if optimizer is not None:",
                "if optimizer is not None and False:",
            ),
        ),
    ),
    Defect(
        "train.loop.stop_unsaved",
        "a signalled run ends without saving the step it stopped at",
        (Edit("assay.train.loop:Trainer.train", "if not saved:", "if not saved and False:"),),
    ),
    Defect(
        "train.graceful.second_signal_ignored",
        "a second SIGINT/SIGTERM during a graceful stop is ignored instead of stopping at once",
        (
            Edit(
                "assay.train.graceful:GracefulStop._handle",
                "raise KeyboardInterrupt  # the second signal: stop now",
                "return",
            ),
        ),
    ),
    Defect(
        "settings.yaml_reader.merge_keys_refused",
        "a YAML merge key (<<: *anchor) is read as a key of its own and refused",
        (
            Edit(
                "assay.settings.yaml_reader:_mapping",
                "        if key_node.tag == _MERGE:\n            continue\n",
                "",
            ),
        ),
    ),
    Defect(
        "train.checkpoint.directory.rng_not_restored",
        "resume does not restore the random generators",
        (
            Edit(
                "assay.train.checkpoint.directory:Checkpoint.restore",
                "if rng:",
                "if rng and False:",
            ),
        ),
    ),
    Defect(
        "train.checkpoint.directory.cursor_unverified",
        "the checkpoint's cursor.json is read without checking its size and sha256",
        (
            Edit(
                "assay.train.checkpoint.directory:_verified",
                'missing checkpoint file") from exc\n',
                'missing checkpoint file") from exc\n'
                '        if name == "cursor.json":\n'
                "            contents[name] = data\n"
                "            continue\n",
            ),
        ),
    ),
    Defect(
        "train.checkpoint.state.adam_step_lost",
        "optimizer restore drops each parameter's step count (bias correction restarts)",
        (
            Edit(
                "assay.train.checkpoint.state:optimizer_from_files",
                "            if entry:\n",
                '            if "step" in entry:\n'
                '                entry["step"] = torch.zeros_like(entry["step"])\n'
                "            if entry:\n",
            ),
        ),
    ),
    Defect(
        "train.data.dataset.labels_unshifted",
        "labels equal input_ids (the next-token shift is missing)",
        (
            Edit(
                "assay.train.data.dataset:collate",
                "labels[:, :-1] = input_ids[:, 1:]\n",
                "labels[:, :-1] = input_ids[:, 1:]\n    labels = input_ids.clone()\n",
            ),
        ),
    ),
    Defect(
        "train.data.dataset.mask_unshifted",
        "loss mask not shifted with the labels: scores the token before each completion token",
        (
            Edit(
                "assay.train.data.dataset:collate",
                "loss_mask[:, :-1] = scored[:, 1:]",
                "loss_mask[:, :-1] = scored[:, :-1]",
            ),
        ),
    ),
    Defect(
        "train.data.dataset.cursor_off_by_one",
        "a resumed batch iterator starts one example past its cursor",
        (
            Edit(
                "assay.train.data.dataset:BatchIterator.__init__",
                "self.cursor = cursor or Cursor()\n",
                "self.cursor = cursor or Cursor()\n"
                "    if 0 < self.cursor.position < size:\n"
                "        c = self.cursor\n"
                "        self.cursor = Cursor(c.epoch, c.position + 1, c.seed, c.shuffle)\n",
            ),
        ),
    ),
    Defect(
        "train.data.dataset.epoch_order_repeats",
        "every epoch visits examples in the same shuffled order",
        (
            Edit(
                "assay.train.data.dataset:BatchIterator.order",
                "epoch_seed(self.cursor.seed, epoch)",
                "epoch_seed(self.cursor.seed, 0)",
            ),
        ),
    ),
    Defect(
        "train.data.masks.first_token_scored",
        "the first token (which has no prefix) is marked as scored",
        (
            Edit(
                "assay.train.data.masks:RowEncoder._finish",
                "if scored:",
                "if scored and False:",
            ),
        ),
    ),
    Defect(
        "train.data.masks.prompt_scored",
        "completion-only masking scores the prompt too",
        (
            Edit(
                "assay.train.data.masks:RowEncoder._pair",
                "(self._bos + self.tok.encode(prompt), False)",
                "(self._bos + self.tok.encode(prompt), True)",
            ),
            # the same defect for chat rows: the prompt's rendering scored with the answer
            Edit(
                "assay.train.data.masks:RowEncoder._pair",
                "(self.tok.encode(head), False)",
                "(self.tok.encode(head), True)",
            ),
            Edit(
                "assay.train.data.masks:RowEncoder._conversation",
                "mine = any(first < end and last > start for start, end in spans)",
                "mine = True",
            ),
        ),
    ),
    Defect(
        "train.data.masks.text_without_eos",
        "text rows are not terminated with EOS, so EOS is never learned",
        (
            Edit(
                "assay.train.data.masks:RowEncoder.encode",
                "if not self._adds_eos():",
                "if not self._adds_eos() and False:",
            ),
        ),
    ),
    Defect(
        "train.data.rows.allow_surrogates",
        "rows with lone surrogate escapes pass",
        (Edit("assay.train.data.rows:read_rows", "bad = lone_surrogate(data)", "bad = None"),),
    ),
    Defect(
        "train.loop.scheduler_not_restored",
        "resume leaves the learning-rate schedule at step 0",
        (
            Edit(
                "assay.train.loop:Trainer.restore",
                "    self.scheduler.load_state_dict(checkpoint.scheduler_state)\n",
                "",
            ),
        ),
    ),
)
