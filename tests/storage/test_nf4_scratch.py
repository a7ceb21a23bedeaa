"""NF4 tiles decode into a reused per-thread buffer through bitsandbytes' own native kernel:
the same bytes as ``dequantize_4bit``, and no fresh tile-sized allocation per GEMM."""

from __future__ import annotations

import threading

import bitsandbytes.functional as bnbf
import pytest
import torch
import torch.nn.functional as F
from bitsandbytes.backends.default.ops import _dequantize_4bit_compute

import assay.storage.linear as linear_module
from assay.memory.peak import measure_peak
from assay.storage import FrozenLinear, NF4Weight
from assay.storage.nf4 import BLOCKSIZE, decode_into


def _public_decode(packed: torch.Tensor, absmax: torch.Tensor, shape, dtype) -> torch.Tensor:
    state = bnbf.QuantState(
        absmax=absmax, shape=torch.Size(shape), blocksize=BLOCKSIZE, quant_type="nf4", dtype=dtype
    )
    return bnbf.dequantize_4bit(packed, state).reshape(shape)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1536, 576), (576, 1536), (7, 192), (96, 70)])
def test_native_decode_is_bitsandbytes_bytes_and_is_taken(shape, dtype):
    torch.manual_seed(0)
    packed, state = bnbf.quantize_4bit(torch.randn(*shape), blocksize=BLOCKSIZE, quant_type="nf4")
    packed = packed.reshape(-1)
    out = torch.full(shape, float("nan"), dtype=dtype)
    # the fast path must be live on this install, or the speed it buys is silently gone
    assert decode_into(packed, state.absmax, BLOCKSIZE, out)
    assert torch.equal(out, _public_decode(packed, state.absmax, shape, dtype))
    # the public decode runs the same native kernel, so a defect in it would pass the line
    # above; bitsandbytes' pure-torch decode of the same bytes is an independent reference
    flat = _dequantize_4bit_compute(packed, state.absmax, state.code, BLOCKSIZE, shape, dtype)
    assert torch.equal(out, flat)


def test_native_decode_declines_and_leaves_out_untouched():
    torch.manual_seed(1)
    packed, state = bnbf.quantize_4bit(torch.randn(8, 128), blocksize=BLOCKSIZE, quant_type="nf4")
    packed = packed.reshape(-1)
    cases = {
        # filled, not empty: uninitialised memory may hold NaN, which never equals itself
        "odd width": (packed[: 8 * 127 // 2], torch.full((8, 127), 7.0)),
        "short packed": (packed[:-1], torch.full((8, 128), 7.0)),
        "strided out": (packed, torch.full((128, 8), 7.0).t()),
        "integer out": (packed, torch.full((8, 128), 7, dtype=torch.int32)),
        "strided packed": (torch.stack((packed, packed), 1)[:, 0], torch.full((8, 128), 7.0)),
    }
    for name, (codes, out) in cases.items():
        before = out.clone()
        assert not decode_into(codes, state.absmax, BLOCKSIZE, out), name
        assert torch.equal(out, before), name
    out = torch.empty(8, 128)
    assert not decode_into(packed, state.absmax[:-1], BLOCKSIZE, out)
    assert not decode_into(packed, state.absmax.double(), BLOCKSIZE, out)
    assert not decode_into(packed, state.absmax, 2048, out)


def _fresh_tile(store, start, stop, dtype, tensors):
    """The decode before the scratch buffer: a new tensor per tile."""
    return store.rows(start, stop, dtype, tensors)


@pytest.mark.parametrize("fresh", [False, True], ids=["scratch", "control-fresh-tiles"])
def test_a_warm_step_allocates_no_tile(monkeypatch, fresh):
    if fresh:
        monkeypatch.setattr(linear_module, "_tile", _fresh_tile)
    torch.manual_seed(2)
    frozen = FrozenLinear(NF4Weight(torch.randn(1536, 576), double_quant=True))
    x = torch.randn(4, 576, requires_grad=True)

    def step():
        frozen(x).sum().backward()

    step()  # the first decode sizes this thread's buffer
    _, found = measure_peak(step)
    tile = 1536 * 576 * 4
    if fresh:
        assert found.peak_bytes >= tile
    else:
        assert found.peak_bytes < tile // 8


def test_interleaved_layers_keep_their_own_gradients():
    torch.manual_seed(3)
    first = FrozenLinear(NF4Weight(torch.randn(256, 128), double_quant=False))
    second = FrozenLinear(NF4Weight(torch.randn(256, 128), double_quant=True))
    x = torch.randn(3, 128, requires_grad=True)
    y1, y2 = first(x), second(x)  # the second decode overwrites the buffer the first used
    y1.sum().backward()  # and the first layer's backward decodes into it again
    assert torch.equal(y1, F.linear(x.detach(), first.dequantized_weight()))
    assert torch.equal(y2, F.linear(x.detach(), second.dequantized_weight()))
    assert torch.equal(x.grad, torch.ones(3, 256) @ first.dequantized_weight())


def test_each_thread_decodes_into_its_own_buffer():
    torch.manual_seed(4)
    frozen = [FrozenLinear(NF4Weight(torch.randn(512, 256), double_quant=True)) for _ in range(2)]
    x = torch.randn(8, 256)
    expected = [F.linear(x, f.dequantized_weight()) for f in frozen]
    barrier = threading.Barrier(2)
    failures: list[str] = []

    def work(i: int) -> None:
        barrier.wait()
        for _ in range(50):
            if not torch.equal(frozen[i](x), expected[i]):
                failures.append(f"thread {i}")
                return

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def _always_scratch(store, start, stop, dtype, tensors):
    """The scratch path even in grad mode (what create_graph must not get)."""
    out = linear_module._scratch(stop - start, store.shape[1], dtype)
    return store.rows(start, stop, dtype, tensors, out=out)


@pytest.mark.parametrize("tile", ["guarded", "control-scratch-in-grad-mode"])
def test_second_order_gradients_survive_later_decodes(monkeypatch, tile):
    if tile != "guarded":
        monkeypatch.setattr(linear_module, "_tile", _always_scratch)
    torch.manual_seed(5)
    first = FrozenLinear(NF4Weight(torch.randn(192, 128), double_quant=True))
    other = FrozenLinear(NF4Weight(torch.randn(192, 128), double_quant=True))
    x = torch.randn(4, 128, requires_grad=True)
    (grad,) = torch.autograd.grad(first(x).pow(2).sum(), x, create_graph=True)
    other(x.detach())  # decodes another weight before the second-order pass
    grad.pow(2).sum().backward()
    weight = first.dequantized_weight()
    reference = x.detach().clone().requires_grad_(True)
    (expected,) = torch.autograd.grad(
        F.linear(reference, weight).pow(2).sum(), reference, create_graph=True
    )
    expected.pow(2).sum().backward()
    close = torch.allclose(x.grad, reference.grad, rtol=1e-4, atol=1e-3)
    assert close if tile == "guarded" else not close
