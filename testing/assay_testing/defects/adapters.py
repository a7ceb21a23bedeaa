"""Defects in assay.adapters: the adapter contract, LoRA/DoRA/TinyLoRA math, attach, PEFT files."""

from __future__ import annotations

from assay_testing.defects import Defect
from assay_testing.patching import Edit

DEFECTS: tuple[Defect, ...] = (
    # assay.adapters.base
    Defect(
        "adapters.export.force_replaces_anything",
        "export --force replaces whatever is at --out, not only an earlier export",
        (
            Edit(
                "assay.adapters.export:check_destination",
                "found = _replaceable(target, format)",
                "found = None",
            ),
        ),
    ),
    Defect(
        "adapters.export.gguf_seal_unchecked",
        "export --force replaces a GGUF export the user changed since it was written (its seal "
        "is not read)",
        (
            Edit(
                "assay.adapters.export:_replaceable",
                "if not seal_holds(target, GGUF_SEAL_KEY):",
                "if False:",
            ),
        ),
    ),
    Defect(
        "adapters.base.merge_sign",
        "merge subtracts the update instead of adding it",
        (
            Edit(
                "assay.adapters.base:AdapterLinear.merged_weight",
                "return weight + self.delta_weight()",
                "return weight - self.delta_weight()",
            ),
        ),
    ),
    Defect(
        "adapters.base.unmerge_sign",
        "unmerge adds the saved update again instead of subtracting it",
        (
            Edit(
                "assay.adapters.base:AdapterLinear.unmerged_weight",
                "return merged - state",
                "return merged + state",
            ),
        ),
    ),
    Defect(
        "adapters.base.disable_ignored",
        "a disabled adapter still adds its update (DPO reference = policy)",
        (
            Edit(
                "assay.adapters.base:AdapterLinear.forward",
                "if not self.enabled or self.merged:",
                "if self.merged:",
            ),
        ),
    ),
    # assay.adapters.lora
    Defect(
        "adapters.lora.rslora_scale",
        "rsLoRA scaled by alpha/r instead of alpha/sqrt(r)",
        (
            Edit(
                "assay.adapters.lora:lora_scaling",
                "return registered(method).scale(rank, alpha)",
                "return alpha / rank",
            ),
        ),
    ),
    Defect(
        "adapters.lora.lora_scale_sqrt",
        "plain LoRA scaled by alpha/sqrt(r) instead of alpha/r",
        (
            Edit(
                "assay.adapters.lora:lora_scaling",
                "return registered(method).scale(rank, alpha)",
                "return alpha / math.sqrt(rank)",
            ),
        ),
    ),
    Defect(
        "adapters.lora.fa_a_trainable",
        "LoRA-FA leaves A trainable (it must stay frozen at its init)",
        (
            Edit(
                "assay.adapters.lora:LoRALinear.__init__",
                "requires_grad=registered(method).first_factor_trains",
                "requires_grad=True",
            ),
        ),
    ),
    Defect(
        "adapters.lora.b_nonzero_init",
        "B initialised like A instead of zeros: a fresh adapter is not a no-op",
        (
            Edit(
                "assay.adapters.lora:LoRALinear.__init__",
                "self.lora_B = nn.Parameter(torch.zeros(self.out_features, rank))",
                "b = torch.zeros(self.out_features, rank)\n"
                "    nn.init.kaiming_uniform_(b, a=math.sqrt(5), generator=generator)\n"
                "    self.lora_B = nn.Parameter(b)",
            ),
        ),
    ),
    Defect(
        "adapters.lora.forward_unscaled",
        "forward adds B(Ax) without the scale that merge applies",
        (
            Edit(
                "assay.adapters.lora:LoRALinear.adapted",
                "* self.scaling",
                "* 1.0",
            ),
        ),
    ),
    # assay.adapters.dora
    Defect(
        "adapters.dora.norm_not_detached",
        "the DoRA row norm stays in the autograd graph (gradients differ from PEFT)",
        (
            Edit(
                "assay.adapters.dora:DoRALinear.adapted",
                "norm = self.weight_norm()",
                "eye = torch.eye(self.in_features, dtype=self.lora_A.dtype)\n"
                "    update = self.lora_output(eye).T.float()\n"
                "    norm = torch.linalg.norm(\n"
                "        dense_weight(self.base) + self.scaling * update, dim=1\n"
                "    )",
            ),
        ),
    ),
    Defect(
        "adapters.dora.norm_axis",
        "DoRA norm taken per input column instead of per output row",
        (
            Edit(
                "assay.adapters.dora:DoRALinear.weight_norm",
                "return torch.linalg.norm(combined, dim=1)",
                "if combined.shape[0] == combined.shape[1]:\n"
                "        return torch.linalg.norm(combined, dim=0)\n"
                "    return torch.linalg.norm(combined, dim=1)",
            ),
        ),
    ),
    Defect(
        "adapters.dora.bias_rescaled",
        "DoRA rescales the bias together with the base output",
        (
            Edit(
                "assay.adapters.dora:DoRALinear.adapted",
                'bias = getattr(self.base, "bias", None)',
                "bias = None",
            ),
        ),
    ),
    # assay.adapters.tinylora
    Defect(
        "adapters.tinylora.basis_without_sigma",
        "TinyLoRA basis U V^T instead of U Sigma V^T",
        (
            Edit(
                "assay.adapters.tinylora:TinyLoRALinear.__init__",
                'self.register_buffer("tiny_S",',
                'singular = torch.ones_like(singular)\n    self.register_buffer("tiny_S",',
            ),
        ),
    ),
    Defect(
        "adapters.tinylora.projection_variance",
        "random projections drawn N(0, 1) instead of N(0, 1/r)",
        (
            Edit(
                "assay.adapters.tinylora:TinyLoRALinear.__init__",
                "torch.randn(u, r, r, generator=generator) / math.sqrt(r)",
                "torch.randn(u, r, r, generator=generator)",
            ),
        ),
    ),
    Defect(
        "adapters.tinylora.global_vector_not_shared",
        "tinylora sharing=global gives every target its own vector",
        (
            Edit(
                "assay.adapters.tinylora:TinyLoRALinear.wrap",
                'vector=vector if options["sharing"] == "global" else None',
                "vector=None",
            ),
        ),
    ),
    # assay.adapters.peft_io
    Defect(
        "adapters.peft_io.key_layout",
        "PEFT keys written without the base_model.model prefix (round-trips through assay only)",
        (
            Edit(
                "assay.adapters.peft_io:peft_key",
                'return f"{PREFIX}',
                'return f"model.',
            ),
        ),
    ),
    Defect(
        "adapters.peft_io.rslora_flag",
        "adapter_config.json never sets use_rslora, so PEFT scales an rsLoRA adapter as LoRA",
        (
            Edit(
                "assay.adapters.peft_io:peft_config",
                "**registered(spec.method).peft_flags(),",
                '**registered(spec.method).peft_flags(), "use_rslora": False,',
            ),
        ),
    ),
    # assay.cli.checkpoint_arg: the run an export or a generation reads
    Defect(
        "cli.checkpoint_arg.parent_taken",
        "export and generate take a folder that is neither a run nor a checkpoint as a "
        "checkpoint of its parent, so the refusal names a file beside it the user never named",
        (
            Edit(
                "assay.cli.checkpoint_arg:checkpoint_run",
                "run = run_holding(path)",
                "run = run_holding(path) or path.parent",
            ),
        ),
    ),
    # assay.adapters.inject: Phi-3's fused projections are targeted whole
    Defect(
        "adapters.inject.fused_part_alone",
        "a part of a fused projection targeted alone (q_proj of Phi-3's qkv_proj) wraps the "
        "whole fused projection instead of being refused",
        (Edit("assay.adapters.inject:target_names", "if asked != set(held):", "if False:"),),
    ),
)
