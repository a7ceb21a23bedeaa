"""The trainable-state terms of the prediction: AdamW keeps two fp32 moments per trainable
element (plus a 4-byte step per tensor), and LoRA-FA trains B only (A is frozen)."""

from __future__ import annotations

from assay.memory.predict import Plan, predict, shape, with_changes


def _plan(**changes) -> Plan:
    model = shape(
        vocab_size=1000,
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        tie_word_embeddings=True,
    )
    base = Plan(model=model, method="lora", rank=4, targets=("q_proj", "v_proj"))
    return with_changes(base, **changes)


def test_adamw_moments_are_twice_the_gradients_plus_a_step_per_tensor():
    terms = predict(_plan()).terms
    tensors = 2 * 2 * 2  # layers x targets x (A, B)
    assert terms["gradients"] > 0
    assert terms["optimizer"] == 2 * terms["gradients"] + 4 * tensors


def test_lora_fa_trains_b_only():
    lora, fa = predict(_plan()).terms, predict(_plan(method="lora_fa")).terms
    # q_proj and v_proj: A is r x 64; B is 64 x r and 32 x r (kv heads): A is what FA drops
    # from the gradients and moments; it is still stored beside the base.
    a_elements = 2 * (4 * 64 + 4 * 64)
    assert lora["gradients"] - fa["gradients"] == 4 * a_elements
    assert lora["adapter"] == fa["adapter"]
