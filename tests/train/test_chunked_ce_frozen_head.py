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
    for fn, kw in ((cross_entropy, {}), (chunked_cross_entropy, {"chunk_size": 5})):
        h = hidden.clone().requires_grad_()
        fn(h, weight, labels, mask, reduction=reduction, **kw).backward()
        grads.append(h.grad)
    chunked, full = grads[1], grads[0]
    assert float((chunked - full).norm() / full.norm()) <= 1e-6
