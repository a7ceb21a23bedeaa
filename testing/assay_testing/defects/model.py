"""Defects in assay.model: the decoder's fp32 upcasts, greedy decoding, GGUF export."""

from __future__ import annotations

from assay_testing.defects import Defect
from assay_testing.patching import Edit

DEFECTS: tuple[Defect, ...] = (
    # Controls for gate-logits' bf16 claims: the fp32 upcasts only change numbers in bf16.
    Defect(
        "model.decoder.rmsnorm_skip_upcast",
        "RMSNorm computes mean(x^2) and rsqrt in the input dtype",
        (Edit("assay.model.decoder:RMSNorm.forward", "h = x.float()", "h = x"),),
    ),
    Defect(
        "model.decoder.rmsnorm_weight_after_cast",
        "OLMo 2's RMSNorm multiplies by its weight after casting back, as Llama's does",
        (
            Edit(
                "assay.model.decoder:RMSNorm.forward",
                "if self.weight_in_fp32:",
                "if False:",
            ),
        ),
    ),
    # OLMo 2's blocks: the post-norm on the MLP's output, and transformers' default epsilon
    Defect(
        "model.decoder.post_feedforward_norm_skipped",
        "an OLMo 2 layer adds the MLP's output to the residual without its post-norm",
        (
            Edit(
                "assay.model.decoder:DecoderLayer.forward",
                "return x + self.post_feedforward_layernorm(self.mlp(x))",
                "return x + self.mlp(x)",
            ),
        ),
    ),
    # Phi-3's blocks: the row order of its fused projections, its window and its pad default
    Defect(
        "model.decoder.fused_k_v_swapped",
        "Phi-3's qkv_proj is read as q, v, k: the k and v rows swapped",
        (
            Edit(
                "assay.model.decoder:Attention._qkv",
                "return self.qkv_proj(x).split((q_size, kv_size, kv_size), dim=-1)",
                "return (lambda q, k, v: (q, v, k))("
                "*self.qkv_proj(x).split((q_size, kv_size, kv_size), dim=-1))",
            ),
        ),
    ),
    Defect(
        "model.decoder.gate_up_halves_swapped",
        "Phi-3's gate_up_proj is read up first, gate second",
        (
            Edit(
                "assay.model.decoder:MLP.forward",
                "gate, up = self.gate_up_proj(x).chunk(2, dim=-1)",
                "up, gate = self.gate_up_proj(x).chunk(2, dim=-1)",
            ),
        ),
    ),
    Defect(
        "model.config.phi3_window_unread",
        "a Phi-3's sliding_window is read as Qwen2's, unused without use_sliding_window",
        (
            Edit(
                "assay.model.config:_sliding_window",
                'if family.window_reading == "every_layer":',
                'if family.name == "mistral":',
            ),
        ),
    ),
    Defect(
        "model.config.phi3_pad_default",
        "a Phi-3 config.json without pad_token_id is read with no pad, not transformers' 32000",
        (
            Edit(
                "assay.model.config:_pad_token",
                'pad = hf.get("pad_token_id", family.pad_token)',
                'pad = hf.get("pad_token_id")',
            ),
        ),
    ),
    # Gemma 3's blocks: the norm offset, the embedding scale, the sandwich, the per-kind rope
    Defect(
        "model.decoder.norm_offset_dropped",
        "Gemma's RMSNorm scales by its stored weight w, not by 1 + w",
        (
            Edit(
                "assay.model.decoder:RMSNorm.forward",
                "return (h * (self.offset + self.weight.float())).to(x.dtype)",
                "return (h * self.weight.float()).to(x.dtype)",
            ),
        ),
    ),
    Defect(
        "model.decoder.embedding_scale_dropped",
        "Gemma's embeddings reach the first layer without the sqrt(hidden) factor",
        (
            Edit(
                "assay.model.decoder:Decoder.embed",
                "if self.config.scaled_embeddings:",
                "if False:",
            ),
        ),
    ),
    Defect(
        "model.decoder.pre_feedforward_norm_skipped",
        "a Gemma layer feeds its MLP the residual stream without the pre-feedforward norm",
        (
            Edit(
                "assay.model.decoder:DecoderLayer.forward",
                "fed = self.mlp(self.pre_feedforward_layernorm(x))",
                "fed = self.mlp(x)",
            ),
        ),
    ),
    Defect(
        "model.config.local_rope_theta_unread",
        "Gemma 3's sliding layers rotate at the full layers' rope theta",
        (
            Edit(
                "assay.model.config:ModelConfig.rope_theta_of",
                'if kind == "sliding_attention" and self.rope_local_theta is not None:',
                "if False:",
            ),
        ),
    ),
    Defect(
        "model.config.sliding_kind_unwindowed",
        "Gemma 3's sliding layers attend over everything: the window is applied to no kind",
        (
            Edit(
                "assay.model.config:ModelConfig.window_of",
                'return None if kind == "full_attention" else self.sliding_window',
                "return None if kind is not None else self.sliding_window",
            ),
        ),
    ),
    # the outside attack on OLMo 2: what transformers refuses, assay refuses
    Defect(
        "model.config.odd_head_dim",
        "an odd head_dim loads (RoPE then has a feature with no partner)",
        (
            Edit(
                "assay.model.config:ModelConfig.__post_init__", "if self.head_dim % 2:", "if False:"
            ),
        ),
    ),
    Defect(
        "model.config.layer_types_any_length",
        "a layer_types list of another length than the layers loads",
        (Edit("assay.model.config:_check_layer_types", "or len(kinds) != layers", ""),),
    ),
    Defect(
        "model.config.olmo2_eps_default",
        "an OLMo 2 config.json without rms_norm_eps gets the 1e-6 of the other families",
        (
            Edit(
                "assay.model.config:config_from_hf",
                'hf.get("rms_norm_eps", family.rms_norm_eps)',
                'hf.get("rms_norm_eps", 1e-6)',
            ),
        ),
    ),
    # a file read or written as another function than transformers computes from it
    Defect(
        "model.safetensors.tied_head_dropped",
        "a tied config over a stored head of its own drops that head unread and ties",
        (
            Edit(
                "assay.model.safetensors:SafetensorsSource.__init__",
                'if "embed_tokens.weight" in self._where and not torch.equal(',
                "if False and not torch.equal(",
            ),
        ),
    ),
    Defect(
        "model.gguf_export.window_dropped",
        "a model whose sliding window binds is exported as a GGUF, which has no window key",
        (
            Edit(
                "assay.model.gguf_export:write_gguf",
                "if window is not None and window < config.max_position_embeddings:",
                "if False:",
            ),
        ),
    ),
    Defect(
        "model.gguf_export.any_family",
        "a family whose GGUF assay does not read back (OLMo 2) is exported as GGUF",
        (
            Edit(
                "assay.model.gguf_export:write_gguf",
                "if not FAMILIES[arch].gguf:",
                "if False:",
            ),
        ),
    ),
    Defect(
        "model.decoder.attention_skip_upcast",
        "attention scores and softmax run in the input dtype",
        (
            Edit(
                "assay.model.decoder:Attention.forward",
                "    q, k, v = q.float(), k.float(), v.float()\n",
                "",
            ),
        ),
    ),
    Defect(
        "model.generate.cached_position_stale",
        "cached decoding rotates each new token at the previous token's position",
        (
            Edit(
                "assay.model.generate:generate",
                "step_ids, positions = fed[:, None], _positions(mask)[:, -1:]",
                "step_ids, positions = fed[:, None], _positions(mask)[:, -2:-1]",
            ),
        ),
    ),
    Defect(
        "model.generate.device_from_embedding",
        "generation asks the embedding for its weight's device (a stored embedding has none)",
        (
            Edit(
                "assay.model.generate:generate",
                "device = decoder.norm.weight.device",
                "device = decoder.embed_tokens.weight.device",
            ),
        ),
    ),
    Defect(
        "model.cache.pads_attended",
        "the cached attention mask lets every query attend to the left padding",
        (
            Edit(
                "assay.model.cache:cached_attention_mask",
                "& padding.bool()[:, None, None, :]",
                "& torch.ones_like(padding, dtype=torch.bool)[:, None, None, :]",
            ),
        ),
    ),
    Defect(
        "model.generate.sample",
        "the next token is sampled from the softmax instead of the argmax",
        (
            Edit(
                "assay.model.generate:generate",
                "chosen = logits.argmax(-1)",
                "chosen = torch.multinomial(logits.softmax(-1), 1)[:, 0]",
            ),
        ),
    ),
    # Control for gate-exports: the file must load in another implementation (transformers'
    # GGUF loader), not only in assay's own reader.
    Defect(
        "model.gguf_export.skip_qk_permute",
        "llama and granite GGUF files are written without the Q/K row permutation",
        (
            Edit(
                "assay.model.gguf_export:write_gguf",
                """\
            if permuted and ".q_proj." in name:
                values = permute_qk(values, config.num_heads, inverse=False)
            elif permuted and ".k_proj." in name:
                values = permute_qk(values, config.num_kv_heads, inverse=False)
""",
                "",
            ),
        ),
    ),
)
