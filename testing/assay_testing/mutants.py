"""The curated mutants: every named defect, the tests that must kill it, and a time budget.

Each entry says which pytest node ids must fail when the defect is armed (a patch from
:mod:`assay_testing.defects`) and pass when it is not. ``status`` is ``killed`` (expected to be
killed), ``equivalent`` (no observable behaviour changes; ``reason`` gives the argument) or
``cuda`` (only reachable on a CUDA device). ``gates/gate_mutation.py`` runs them;
``tests/testing/test_defects.py`` checks that every defect has an entry here and back.

A defect's name is ``<module under assay>.<defect>``, so the module it patches is found from the
name alone (``storage.nf4.nibble_order`` patches ``assay.storage.nf4``).
"""

from __future__ import annotations

from dataclasses import dataclass

STATUSES = ("killed", "equivalent", "cuda")


@dataclass(frozen=True)
class Mutant:
    """One curated mutant: a fault point and the node ids that must kill it."""

    name: str
    killers: tuple[str, ...]
    budget_s: float = 150.0
    status: str = "killed"
    reason: str = ""

    @property
    def module(self) -> str:
        """The module that declares this fault point."""
        from assay_testing.defects import module_of

        return module_of(self.name)

    @property
    def counted(self) -> bool:
        """Whether the mutant counts toward the kill rate (not equivalent, reachable on CPU)."""
        return self.status == "killed"


_FL = "tests/storage/test_frozen_linear.py::"
_AT = "tests/adapters/test_attach.py::"
_PF = "tests/adapters/test_peft_format.py::"
_TL = "tests/adapters/test_tinylora.py::"
_MG = "tests/adapters/test_adapter_merge.py::test_merge_then_unmerge"
_CE = "tests/train/test_losses.py::"
_DA = "tests/train/test_train_data.py::"
_PR = "tests/train/test_preference.py::"
_CK = "tests/train/test_checkpoint.py::"
_LP = "tests/train/test_loop.py::"
_SE = "tests/stream/test_stream_engine.py::"
_PD = "tests/memory/test_predict.py"
_PT = "tests/memory/test_predict_trainables.py::"

_NF4_CODEC = _FL + "test_nf4_decode_matches_bitsandbytes_by_rows_and_gather"
_PEFT_BOTH = _PF + "test_peft_loads_our_adapter_with_equal_logits_and_gradients"
_CE_EQUAL = _CE + "test_chunked_ce_equals_full_ce"
_RESUME = _CK + "test_adamw_resume_is_bit_exact"
_STREAM_BITWISE = _SE + "test_streamed_matches_resident_bitwise"
_SA = "tests/stream/test_stream_accumulation.py::"
_STREAM_ACCUMULATION = _SA + "test_streamed_steps_over_two_micro_batches_equal_resident"
_STREAM_BF16 = _SA + "test_streamed_bf16_steps_equal_resident_bf16[float32]"

MUTANTS: tuple[Mutant, ...] = (
    # storage
    Mutant("storage.nf4.nibble_order", (_NF4_CODEC,)),
    Mutant("storage.nf4.nested_offset_dropped", (_NF4_CODEC,)),
    Mutant("storage.nf4.dequant_dtype", (_NF4_CODEC,)),
    Mutant("storage.nf4.gather_order", (_NF4_CODEC,)),
    Mutant(
        "storage.linear.tile_bias_offset",
        ("tests/storage/test_tiled_bias.py::test_tiled_forward_adds_each_tiles_own_bias_rows",),
    ),
    Mutant(
        "storage.linear.backward_skips_last_tile",
        (_FL + "test_tiles_bound_the_decoded_workspace",),
    ),
    Mutant(
        "storage.apply.bf16_kept_fp32", (_FL + "test_bf16_stores_bf16_and_computes_in_input_dtype",)
    ),
    # adapters
    Mutant("adapters.lora.rslora_scale", (_AT + "test_scaling_rules",)),
    Mutant("adapters.lora.lora_scale_sqrt", (_AT + "test_scaling_rules",)),
    Mutant("adapters.lora.fa_a_trainable", (_AT + "test_only_adapter_tensors_train",)),
    Mutant("adapters.lora.b_nonzero_init", (_AT + "test_lora_a_is_kaiming_uniform_and_b_is_zero",)),
    Mutant("adapters.lora.forward_unscaled", (_MG,)),
    Mutant("adapters.dora.norm_not_detached", (_PEFT_BOTH,)),
    Mutant("adapters.dora.norm_axis", (_PEFT_BOTH,)),
    Mutant("adapters.dora.bias_rescaled", (_PEFT_BOTH,)),
    Mutant(
        "adapters.tinylora.basis_without_sigma", (_TL + "test_delta_is_u_sigma_mix_v_transpose",)
    ),
    Mutant(
        "adapters.tinylora.projection_variance",
        (_TL + "test_projection_entries_have_variance_one_over_r",),
    ),
    Mutant(
        "adapters.tinylora.global_vector_not_shared",
        (_TL + "test_sharing_global_is_one_vector_per_target_is_many",),
    ),
    Mutant(
        "adapters.peft_io.key_layout",
        (_PEFT_BOTH, _PF + "test_a_peft_saved_adapter_loads_into_assay"),
    ),
    Mutant("adapters.peft_io.rslora_flag", (_PEFT_BOTH,)),
    Mutant("adapters.base.merge_sign", (_MG,)),
    Mutant("adapters.base.unmerge_sign", (_MG,)),
    Mutant("adapters.base.disable_ignored", (_AT + "test_disable_gives_base_logits_exactly",)),
    # train: losses, data, preference, objective
    Mutant("train.losses.mask_ignored", (_CE_EQUAL,)),
    Mutant("train.losses.chunk_drops_row", (_CE_EQUAL,)),
    Mutant("train.losses.chunk_edge_row_twice", (_CE_EQUAL,)),
    Mutant("train.losses.chunk_mask_ignored", (_CE_EQUAL,)),
    Mutant(
        "train.losses.lse_block_edge_row",
        (_CE + "test_row_blocked_logsumexp_equals_torchs_bitwise",),
    ),
    Mutant("train.losses.divisor_all_tokens", (_CE_EQUAL,)),
    Mutant(
        "train.losses.fused_grad_unscaled",
        (
            "tests/train/test_chunked_ce_frozen_head.py::test_frozen_head_hidden_gradient_equals_full_ce",
        ),
    ),
    Mutant("train.losses.head_grad_dropped", (_CE_EQUAL,)),
    Mutant("train.data.dataset.labels_unshifted", (_DA + "test_labels_are_the_next_token",)),
    Mutant("train.data.dataset.mask_unshifted", (_DA + "test_labels_are_the_next_token",)),
    Mutant(
        "train.data.dataset.cursor_off_by_one",
        (_DA + "test_batch_order_covers_each_epoch_and_resumes_from_a_cursor",),
    ),
    Mutant(
        "train.loop.stop_unsaved",
        ("tests/train/test_graceful_stop.py::test_a_stop_saves_the_step_it_stopped_at",),
    ),
    Mutant(
        "train.graceful.second_signal_ignored",
        (
            "tests/train/test_graceful_stop.py::"
            "test_the_first_signal_asks_the_second_interrupts_and_handlers_come_back",
        ),
    ),
    Mutant(
        "train.data.dataset.epoch_order_repeats",
        (_DA + "test_batch_order_covers_each_epoch_and_resumes_from_a_cursor",),
    ),
    Mutant(
        "train.data.masks.first_token_scored",
        (_DA + "test_text_rows_score_every_token_after_the_first_including_eos",),
    ),
    Mutant(
        "train.data.masks.prompt_scored",
        (_DA + "test_prompt_completion_scores_only_the_completion_and_its_eos",),
    ),
    Mutant(
        "train.data.masks.text_without_eos",
        (_DA + "test_text_rows_score_every_token_after_the_first_including_eos",),
    ),
    Mutant("train.preference.dpo_beta_sign", (_PR + "test_dpo_variants_at_known_points",)),
    Mutant(
        "train.preference.token_logp_grad_sign",
        (_PR + "test_chunked_token_logps_equal_log_softmax_values_and_gradients",),
    ),
    Mutant(
        "train.preference.chunk_offset_lost",
        (_PR + "test_chunked_token_logps_equal_log_softmax_values_and_gradients",),
    ),
    Mutant(
        "train.preference.kto_z_not_detached",
        (_PR + "test_kto_reference_point_is_clamped_and_detached",),
    ),
    Mutant(
        "train.preference.ipo_summed",
        ("tests/train/test_preference_averaging.py::test_ipo_orpo_simpo_average_and_dpo_kto_sum",),
    ),
    Mutant(
        "train.objective.reference_not_disabled",
        (_PR + "test_reference_is_the_model_with_adapters_disabled",),
    ),
    Mutant(
        "train.objective.accumulation_not_divided",
        (_PR + "test_a_micro_batch_weighs_by_its_share_of_the_steps_rows",),
    ),
    Mutant(
        "train.objective.head_read_before_forward",
        ("gates/gate_distributed.py::test_fsdp_trains_a_preference_loss_like_one_process",),
        budget_s=300.0,
    ),
    Mutant(
        "train.objective.orpo_nll_per_micro_batch",
        ("tests/train/test_objective.py::test_a_steps_shares_sum_to_its_rows_as_one_batch",),
    ),
    Mutant(
        "train.objective.ce_micro_normalised",
        (_LP + "test_accumulating_four_micro_batches_equals_a_batch_of_four",),
        budget_s=240.0,
    ),
    # checkpoint and resume
    Mutant("train.checkpoint.directory.optimizer_not_restored", (_RESUME,)),
    Mutant("train.checkpoint.directory.rng_not_restored", (_RESUME,)),
    Mutant(
        "train.checkpoint.directory.cursor_unverified",
        (
            "tests/train/test_checkpoint_files_verified.py::test_a_flipped_bit_in_any_file_is_refused_naming_it",
        ),
    ),
    Mutant("train.checkpoint.state.adam_step_lost", (_RESUME,)),
    Mutant(
        "train.loop.scheduler_not_restored",
        (_LP + "test_resume_in_a_fresh_trainer_is_bitwise_exact",),
        budget_s=240.0,
    ),
    Mutant(
        "train.loop.resume_one_lr_for_all_groups",
        ("tests/train/test_loraplus_resume.py::test_a_resumed_loraplus_run_is_bitwise_exact",),
        budget_s=240.0,
    ),
    Mutant(
        "distributed.trainer.tokens_not_summed",
        (
            "tests/distributed/test_dist_end_to_end.py::"
            "test_ddp_with_a_streamed_base_matches_one_process[disk-recompute]",
        ),
        budget_s=300.0,
    ),
    Mutant(
        "train.loop.gradient_scaled",
        (
            "tests/train/test_training_semantics.py::"
            "test_the_logged_grad_norm_is_the_norm_of_the_logged_loss_gradient",
        ),
    ),
    Mutant(
        "train.run.folder.any_folder_is_a_run",
        ("tests/test_replacing_commands.py::test_no_command_replaces_a_folder_it_did_not_write",),
    ),
    Mutant(
        "train.run.folder.edits_unchecked",
        (
            "tests/test_replacing_commands.py::"
            "test_overwrite_and_resume_refuse_a_run_whose_files_changed_since_train_wrote_them"
            "[metrics_annotated-recorded]",
        ),
    ),
    Mutant(
        "atomic.flush_unnamed",
        ("tests/test_atomic.py::test_a_full_disk_while_flushing_names_the_file",),
    ),
    Mutant(
        "train.graceful.stop_signals_unguarded",
        (
            "tests/train/test_output_protection.py::"
            "test_a_stop_signal_while_loading_leaves_no_run_folder",
        ),
    ),
    Mutant(
        "train.graceful.deferral_ignored",
        (
            "tests/train/test_graceful_stop.py::"
            "test_a_stop_inside_a_deferred_block_is_raised_when_the_block_ends",
        ),
    ),
    Mutant(
        "cli.dispatch.early_stops_unguarded",
        (
            "tests/train/test_output_protection.py::"
            "test_a_stop_signal_while_loading_leaves_no_run_folder",
        ),
    ),
    Mutant(
        "cli.checkpoint_arg.parent_taken",
        ("tests/test_cli.py::test_a_checkpoint_argument_that_is_no_run_names_itself",),
    ),
    Mutant(
        "cli.train.finished_before_checks",
        (
            "tests/train/test_output_protection.py::"
            "test_a_finished_run_of_another_model_is_refused_before_the_shortcut",
        ),
    ),
    Mutant(
        "settings.derived.unchecked",
        (
            "tests/test_derived_settings.py::"
            "test_every_derived_number_is_in_range_or_the_config_is_refused",
        ),
    ),
    Mutant(
        "adapters.export.force_replaces_anything",
        ("tests/test_replacing_commands.py::test_no_command_replaces_a_folder_it_did_not_write",),
    ),
    Mutant(
        "adapters.export.gguf_seal_unchecked",
        (
            "tests/test_replacing_commands.py::"
            "test_export_force_refuses_a_gguf_export_changed_since_it_was_written[tensor_byte]",
        ),
    ),
    Mutant(
        "train.loop.divergence_unchecked",
        (
            "tests/train/test_divergence.py::"
            "test_a_diverged_run_stops_with_one_line_and_leaves_readable_files[1e+30]",
        ),
    ),
    Mutant(
        "train.checkpoint.check.optimizer_settings_unchecked",
        (
            "tests/train/test_resume_settings.py::test_an_edited_optimizer_setting_is_refused_naming_it",
        ),
        budget_s=240.0,
    ),
    # streaming
    Mutant(
        "stream.store.reuse_without_hashing",
        ("tests/stream/test_store_integrity.py::test_a_damaged_store_is_never_served[flip-built]",),
    ),
    Mutant("stream.engine.grads_assigned_not_accumulated", (_STREAM_ACCUMULATION,)),
    Mutant("stream.engine.recompute_without_autocast", (_STREAM_BF16,)),
    Mutant("stream.engine.resident_grads_dropped", (_STREAM_BITWISE,)),
    Mutant(
        "stream.engine.trained_base_slots_kept",
        (_SE + "test_full_method_trains_like_resident_over_optimizer_steps",),
    ),
    Mutant("stream.engine.backward_stale_input", (_STREAM_BITWISE,)),
    Mutant(
        "stream.engine.prefetch_wrong_layer",
        (
            "tests/stream/test_prefetch_order.py::"
            "test_the_next_layer_is_on_its_way_while_a_layer_computes",
        ),
    ),
    Mutant(
        "stream.store.cache_key_ignores_bytes",
        (_SE + "test_disk_tier_keys_on_content",),
    ),
    Mutant(
        "stream.refetch.unpack_wrong_layer",
        (_SE + "test_kept_mode_matches_recompute_mode_over_two_optimizer_steps",),
    ),
    # qualify (no torch)
    Mutant(
        "qualify.plugin.gate.reach_from_process",
        (
            "tests/qualify/test_verdict_independence.py::"
            "test_each_gate_gets_one_verdict_alone_together_and_shuffled",
        ),
    ),
    Mutant(
        "qualify.plugin.child_imports.reports_for_every_gate",
        (
            "tests/qualify/test_verdict_independence.py::"
            "test_each_gate_gets_one_verdict_alone_together_and_shuffled",
        ),
    ),
    Mutant(
        "qualify.plugin.imports.loaded_first_left_out",
        ("gates/gate_robustness.py::test_a_gates_verdict_does_not_depend_on_what_else_ran",),
    ),
    Mutant(
        "qualify.plugin.imports.beside_scripts_unresolved",
        (
            "tests/qualify/test_provenance.py::"
            "test_a_helper_package_beside_a_gate_module_counts_for_every_importer",
        ),
    ),
    Mutant(
        "qualify.publishing.compare.changes.vanished_gate_unseen",
        (
            "tests/qualify/test_compare.py::"
            "test_a_gate_that_vanishes_is_missing_and_one_that_arrives_unpaired",
        ),
    ),
    Mutant(
        "qualify.publishing.history.valueless_runs_dropped",
        (
            "tests/qualify/test_history_figures.py::"
            "test_every_run_after_the_first_measurement_has_a_mark",
        ),
    ),
    Mutant(
        "qualify.ledger.history.uncommitted_unnoted",
        (
            "tests/qualify/test_ledger_history.py::"
            "test_uncommitted_receipts_on_a_committed_ledger_are_a_note",
        ),
    ),
    Mutant(
        "qualify.core.identifier.lookalikes_accepted",
        (
            "tests/qualify/test_claim_ids.py::test_the_issues_twins_are_refused_and_the_plain_id_kept",
        ),
    ),
    Mutant(
        "qualify.ledger.archive.figure_in_receipts_place",
        ("tests/qualify/test_archive.py::test_a_receipt_with_a_figure_comes_home_byte_for_byte",),
    ),
    Mutant(
        "qualify.ledger.chain.refused_ledger_listed",
        (
            "tests/qualify/test_refused_ledger_files.py::test_a_swapped_ledger_file_is_refused_in_one_line",
        ),
    ),
    Mutant(
        "qualify.publishing.compare.changes.noise_counted",
        (
            "tests/qualify/test_compare.py::"
            "test_the_reported_noise_case_exits_0_and_an_integer_step_is_no_noise",
        ),
    ),
    Mutant(
        "qualify.publishing.compare.changes.timings_always_compared",
        ("tests/qualify/test_compare.py::test_timings_are_compared_only_between_like_machines",),
    ),
    Mutant(
        "qualify.publishing.compare.changes.passing_regression_fails",
        (
            "tests/qualify/test_compare.py::"
            "test_a_regression_still_passing_warns_and_fails_only_when_asked",
        ),
    ),
    Mutant(
        "qualify.publishing.compare.changes.flip_unseen",
        ("tests/qualify/test_compare.py::test_every_kind_of_change_between_two_ledgers",),
    ),
    Mutant(
        "qualify.ledger.receipt.hash_skips_claims",
        ("tests/qualify/test_verify.py::test_tampered_receipt_is_caught_naming_the_file",),
    ),
    Mutant(
        "qualify.ledger.receipt.controls_not_judged",
        (
            "tests/qualify/test_verify_every_receipt.py::test_an_older_tampered_receipt_and_a_forged_control_flag_are_caught",
        ),
    ),
    Mutant(
        "qualify.core.threshold.controls_ignored",
        ("tests/qualify/test_threshold.py::test_verdict_passes_only_with_failing_controls",),
    ),
    Mutant(
        "qualify.publishing.verify.newest_receipt_only",
        (
            "tests/qualify/test_verify_every_receipt.py::test_an_older_tampered_receipt_and_a_forged_control_flag_are_caught",
        ),
    ),
    Mutant(
        "qualify.publishing.verify.record_not_compared",
        (
            "tests/qualify/test_verify.py::test_record_out_of_sync_is_caught_and_render_all_repairs_it",
        ),
    ),
    # memory prediction (no torch)
    Mutant(
        "memory.predict.optimizer_term_dropped",
        (_PT + "test_adamw_moments_are_twice_the_gradients_plus_a_step_per_tensor",),
    ),
    Mutant("memory.predict.preference_rows_single", (_PD + "::test_preference_doubles_the_rows",)),
    Mutant("memory.predict.lora_fa_counts_a", (_PT + "test_lora_fa_trains_b_only",)),
    # writes, bounded inputs, export, generation, the grader and the ledger (merged later)
    Mutant(
        "atomic.in_place",
        ("gates/gate_faults.py::test_faults_inside_writes",),
    ),
    Mutant(
        "atomic.ignore_short_write",
        (),
        status="equivalent",
        reason="alone it changes nothing: os.write on a regular Linux file takes every byte; "
        "gate-faults arms it with atomic.short_write and catches it (3 files wrong)",
    ),
    Mutant(
        "atomic.short_write",
        (),
        status="equivalent",
        reason="not a defect but the environment a correct writer must survive (a legal short "
        "write); the product loops over it, so nothing observable changes",
    ),
    Mutant(
        "atomic.kill_mid_write",
        (),
        status="equivalent",
        reason="not a defect but a crash injected mid-write; gate-faults shows the last good "
        "file survives it, so the product's behaviour is unchanged by design",
    ),
    Mutant(
        "bounded.unbounded_aliases",
        ("tests/test_bounded.py::test_a_modest_alias_blowup_is_refused_not_just_a_bomb",),
    ),
    Mutant(
        "bounded.long_integers_read",
        (
            "tests/test_bounded.py::test_integers_past_the_digit_limit_are_json_errors_at_their_place",
        ),
    ),
    Mutant(
        "bounded.split_lines_at_every_break",
        (
            "tests/test_json_lines.py::test_the_ledger_reader_keeps_a_comment_with_a_line_separator",
            "tests/test_json_lines.py::test_the_corrections_reader_keeps_an_entry_with_a_line_separator",
        ),
    ),
    Mutant(
        "settings.yaml_reader.merge_keys_refused",
        ("tests/test_bounded.py::test_merge_keys_share_settings_and_x_keys_hold_anchors",),
    ),
    Mutant(
        "train.data.rows.allow_surrogates",
        ("tests/train/test_preflight.py::test_rows_are_read_before_the_model",),
    ),
    Mutant(
        "adapters.inject.fused_part_alone",
        ("gates/gate_robustness.py::test_bad_inputs_fail_cleanly",),
        budget_s=600.0,
    ),
    Mutant(
        "adapters.export.in_place",
        ("tests/test_export_protection.py::test_a_non_empty_destination_is_refused_unless_forced",),
    ),
    Mutant(
        "model.gguf_export.skip_qk_permute",
        ("tests/test_export.py::test_merged_gguf_f32_and_f16[llama3]",),
    ),
    Mutant(
        "model.decoder.rmsnorm_skip_upcast",
        ("gates/gate_logits.py::test_bf16_compute_upcasts[qwen2]",),
    ),
    Mutant(
        "model.decoder.rmsnorm_weight_after_cast",
        ("gates/gate_logits.py::test_bf16_compute_upcasts[olmo2]",),
    ),
    Mutant(
        "model.decoder.post_feedforward_norm_skipped",
        ("gates/gate_logits.py::test_tiny_family_logits_match_transformers[olmo2]",),
    ),
    Mutant(
        "model.decoder.fused_k_v_swapped",
        ("gates/gate_logits.py::test_tiny_family_logits_match_transformers[phi3]",),
    ),
    Mutant(
        "model.decoder.gate_up_halves_swapped",
        ("gates/gate_logits.py::test_tiny_family_logits_match_transformers[phi3]",),
    ),
    Mutant(
        "model.config.phi3_window_unread",
        ("gates/gate_logits.py::test_tiny_family_logits_match_transformers[phi3]",),
    ),
    Mutant(
        "model.decoder.norm_offset_dropped",
        ("gates/gate_logits.py::test_tiny_family_logits_match_transformers[gemma3]",),
    ),
    Mutant(
        "model.decoder.embedding_scale_dropped",
        ("gates/gate_logits.py::test_tiny_family_logits_match_transformers[gemma3]",),
    ),
    Mutant(
        "model.decoder.pre_feedforward_norm_skipped",
        ("gates/gate_logits.py::test_tiny_family_logits_match_transformers[gemma3]",),
    ),
    Mutant(
        "model.config.local_rope_theta_unread",
        ("gates/gate_logits.py::test_tiny_family_logits_match_transformers[gemma3]",),
    ),
    Mutant(
        "model.config.sliding_kind_unwindowed",
        ("gates/gate_logits.py::test_tiny_family_logits_match_transformers[gemma3]",),
    ),
    Mutant(
        "model.config.phi3_pad_default",
        ("gates/gate_robustness.py::test_config_is_read_as_transformers_reads_it",),
    ),
    Mutant(
        "model.config.odd_head_dim",
        ("gates/gate_robustness.py::test_config_is_read_as_transformers_reads_it",),
    ),
    Mutant(
        "model.config.layer_types_any_length",
        ("gates/gate_robustness.py::test_config_is_read_as_transformers_reads_it",),
    ),
    Mutant(
        "model.config.olmo2_eps_default",
        ("tests/model/test_config_as_transformers.py::test_olmo2_reads_its_own_epsilon_default",),
    ),
    Mutant(
        "model.safetensors.tied_head_dropped",
        ("gates/gate_robustness.py::test_a_file_is_read_and_written_as_transformers_computes_it",),
    ),
    Mutant(
        "model.gguf_export.window_dropped",
        ("gates/gate_robustness.py::test_a_file_is_read_and_written_as_transformers_computes_it",),
    ),
    Mutant(
        "model.gguf_export.any_family",
        ("gates/gate_robustness.py::test_a_file_is_read_and_written_as_transformers_computes_it",),
    ),
    Mutant(
        "model.decoder.attention_skip_upcast",
        ("gates/gate_logits.py::test_bf16_compute_upcasts[qwen2]",),
    ),
    Mutant(
        "model.generate.sample",
        ("tests/model/test_generate.py::test_one_prompt_alone_matches_transformers",),
    ),
    Mutant(
        "model.generate.cached_position_stale",
        ("tests/model/test_generate.py::test_cached_equals_full_recompute_with_adapters",),
    ),
    Mutant(
        "model.generate.device_from_embedding",
        (
            "tests/model/test_generate.py::test_cached_equals_full_recompute_with_adapters"
            "[nf4_double_quant-True]",
        ),
    ),
    Mutant(
        "model.cache.pads_attended",
        (
            "tests/model/test_generate.py::test_greedy_matches_transformers_generate_on_a_padded_batch",
        ),
    ),
    Mutant(
        "testing.grader.raw_compare",
        ("tests/testing/test_grader.py::test_formatting_variants_are_accepted",),
    ),
    Mutant(
        "testing.grader.prefix_match",
        ("tests/testing/test_grader.py::test_near_misses_and_refusals_are_rejected",),
    ),
    Mutant(
        "stream.pool.skip_wait",
        ("tests/stream/test_stream_engine.py::test_delayed_torn_reordered_copies_change_nothing",),
    ),
    Mutant(
        "stream.pool.reuse_busy_slot",
        ("tests/stream/test_stream_engine.py::test_delayed_torn_reordered_copies_change_nothing",),
    ),
    Mutant(
        "stream.pool.skip_release_wait",
        (),
        status="cuda",
        reason="the release-event wait exists only on the CUDA copy stream; gate-cuda's "
        "stream.copy_race claim is its killer on a GPU box",
    ),
    Mutant(
        "qualify.ledger.chain.unchained",
        ("tests/qualify/test_ledger_chain.py::test_tampered_ledger_is_reported_after_a_rerender",),
    ),
    Mutant(
        "qualify.ledger.sign.accept_any",
        ("tests/qualify/test_signatures.py::test_forged_signatures_are_reported",),
    ),
    Mutant(
        "qualify.judging.stale.ignore",
        ("tests/qualify/test_stale.py::test_changed_gate_file_is_stale",),
    ),
    Mutant(
        "qualify.judging.select.stale_code_current",
        (
            "tests/qualify/test_gate_select.py::test_a_change_selects_exactly_the_gates_that_read_it",
        ),
    ),
    Mutant(
        "qualify.judging.select.failing_record_current",
        ("tests/qualify/test_gate_select.py::test_selection_is_exactly_the_gates_the_rule_names",),
    ),
    Mutant(
        "qualify.judging.select.environment_ignored",
        (
            "tests/qualify/test_gate_select.py::"
            "test_a_new_torch_version_selects_the_gates_that_recorded_torch",
        ),
    ),
    Mutant(
        "digest.length_ignored",
        ("tests/test_digest.py::test_feed_hashes_exactly_the_bytes_asked_for",),
    ),
    Mutant(
        "digest.tail_after_first_chunk_dropped",
        ("tests/test_digest.py::test_feed_hashes_exactly_the_bytes_asked_for",),
    ),
    Mutant(
        "digest.first_chunk_only",
        ("tests/test_digest.py::test_file_sha256_is_the_sha256_of_the_whole_file",),
    ),
)

TABLE: dict[str, Mutant] = {m.name: m for m in MUTANTS}


def declared_fault_points() -> dict[str, str]:
    """The defect catalog (name -> defect) every table entry must match."""
    from assay_testing.defects import CATALOG

    return {name: item.defect for name, item in CATALOG.items()}
