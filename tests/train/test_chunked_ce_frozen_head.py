"""With a frozen head (every adapter method) chunked CE forms the hidden-state gradient in its
forward; that gradient must equal full CE's, for both reductions."""

from __future__ import annotations

import pytest
import torch

from assay.train.losses import chunked_cross_entropy, cross_entropy


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_frozen_head_hidden_gradient_equals_full_ce(reduction):
    gen = torch.Generator().manual_seed(7)
    hidden = torch.randn(2, 24, 16, generator=gen)
    weight = torch.randn(300, 16, generator=gen) * 0.05  # frozen: no requires_grad
    labels = torch.randint(0, 300, (2, 24), generator=gen)
    mask = torch.rand(2, 24, generator=gen) > 0.3
    grads = []
    upstream = torch.tensor(2.5)  # not 1: the upstream gradient must scale the stored one
    for fn, kw in ((cross_entropy, {}), (chunked_cross_entropy, {"chunk_size": 5})):
        h = hidden.clone().requires_grad_()
        fn(h, weight, labels, mask, reduction=reduction, **kw).backward(upstream)
        grads.append(h.grad)
    chunked, full = grads[1], grads[0]
    assert float((chunked - full).norm() / full.norm()) <= 1e-6


def test_frozen_head_keeps_only_the_hidden_gradient_for_backward():
    gen = torch.Generator().manual_seed(8)
    hidden = torch.randn(2, 12, 16, generator=gen, requires_grad=True)
    weight = torch.randn(300, 16, generator=gen)
    labels = torch.randint(0, 300, (2, 12), generator=gen)
    mask = torch.ones(2, 12, dtype=torch.bool)
    frozen = chunked_cross_entropy(hidden, weight, labels, mask, chunk_size=5)
    # one [tokens, H] tensor: no weight, labels, indices or log-sum-exps kept past forward
    assert [tuple(t.shape) for t in frozen.grad_fn.saved_tensors] == [(24, 16)]
    trained = chunked_cross_entropy(
        hidden, weight.clone().requires_grad_(), labels, mask, chunk_size=5
    )
    # a trained head recomputes in backward: hidden, weight, labels, index, row maxima, lse
    assert len(trained.grad_fn.saved_tensors) == 6
