"""The tiled attention of attention_lib.efficient against the explicit path, SDPA and a float64 reference."""

import math
import traceback
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import attention64

import attention_lib.efficient as efficient
from attention_lib import BidirectionalAttention, CausalAttention, CrossAttention, SingleHeadAttention, attend
from attention_lib.efficient import (
    accumulation_dtype,
    online_softmax_update,
    tiled_attention,
    tiled_backward,
    tiled_forward,
)
from attention_lib.functional import attention_impls, explicit_attention, sdpa_attention
from attention_lib.masks import causal_mask, padding_mask
from attention_lib.tools.memory import LargestBuffer


def reference(q, k, v, visible):
    """The shared float64 reference from a full (..., S, S_kv) mask: the context."""
    return attention64(q, k, v, visible)[0]


PACKAGE = Path(efficient.__file__).resolve().parent
CUDA = [pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"))]


def full_visibility(S, S_kv, mask=None, is_causal=False, window=None):
    """The (..., S, S_kv) bool mask the three paths should apply, built from the definitions."""
    visible = torch.ones(S, S_kv, dtype=torch.bool)
    if is_causal:
        i, j = torch.arange(S)[:, None] + S_kv - S, torch.arange(S_kv)[None, :]  # query i sits at position S_kv - S + i
        visible = visible & (j <= i) & (j > i - (window or S_kv + 1))
    return visible if mask is None else visible & mask


def qkv(B, NH, S, S_kv, HS, dtype=torch.float32, seed=0, device="cpu", HS_v=None):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, NH, S, HS, generator=g, dtype=dtype)
    k = torch.randn(B, NH, S_kv, HS, generator=g, dtype=dtype)
    v = torch.randn(B, NH, S_kv, HS_v or HS, generator=g, dtype=dtype)
    return (t.to(device).requires_grad_(True) for t in (q, k, v))


def grads(out, inputs, seed=1):
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=out.dtype).to(out.device)
    return torch.autograd.grad(out, inputs, g)


# --- parity: a random search over shapes, block sizes, padding, causal -------------------------------------------


@settings(max_examples=80, deadline=None)
@given(
    B=st.integers(1, 3),
    NH=st.integers(1, 3),
    S=st.integers(1, 13),
    S_kv=st.integers(1, 13),
    HS=st.sampled_from([1, 4, 8]),
    block_size=st.integers(1, 9),
    is_causal=st.booleans(),
    padding=st.sampled_from([None, "right", "left"]),
    data=st.data(),
)
def test_outputs_and_gradients_equal_explicit_and_sdpa(B, NH, S, S_kv, HS, block_size, is_causal, padding, data):
    seed = data.draw(st.integers(0, 2**16), label="seed")
    q, k, v = qkv(B, NH, S, S_kv, HS, seed=seed)
    mask = None
    if padding is not None:
        lengths = [data.draw(st.integers(0, S_kv), label="length") for _ in range(B)]
        mask = padding_mask(lengths, S_kv, left=padding == "left")[:, None, None, :]  # (B, 1, 1, S_kv)
    out_t = tiled_attention(q, k, v, mask, is_causal=is_causal, block_size=block_size)
    out_e, _ = explicit_attention(q, k, v, mask, is_causal=is_causal)
    out_f = sdpa_attention(q, k, v, mask, is_causal=is_causal)
    assert out_t.shape == (B, NH, S, HS)
    assert torch.allclose(out_t, out_e, atol=1e-5) and torch.allclose(out_t, out_f, atol=1e-5)
    g_t, g_e, g_f = (grads(o, (q, k, v)) for o in (out_t, out_e, out_f))
    for a, b, c in zip(g_t, g_e, g_f, strict=True):
        assert bool(a.isfinite().all())
        assert torch.allclose(a, b, atol=1e-5) and torch.allclose(a, c, atol=1e-5)
    visible = full_visibility(S, S_kv, mask, is_causal)
    assert torch.allclose(out_t.double(), reference(q, k, v, visible), atol=1e-5)


@settings(max_examples=30, deadline=None)
@given(S=st.integers(1, 10), S_kv=st.integers(1, 10), block_size=st.integers(1, 6), data=st.data())
def test_an_arbitrary_full_mask_equals_explicit(S, S_kv, block_size, data):
    seed = data.draw(st.integers(0, 2**16), label="seed")
    q, k, v = qkv(2, 2, S, S_kv, 4, seed=seed)
    mask = torch.rand(2, 2, S, S_kv, generator=torch.Generator().manual_seed(seed)) > 0.5  # (B, NH, S, S_kv)
    out_t = tiled_attention(q, k, v, mask, block_size=block_size)
    out_e, _ = explicit_attention(q, k, v, mask)
    assert torch.allclose(out_t, out_e, atol=1e-5)
    for a, b in zip(grads(out_t, (q, k, v)), grads(out_e, (q, k, v)), strict=True):
        assert torch.allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("S,S_kv,block_size", [(7, 7, 3), (10, 10, 4), (5, 9, 4), (9, 5, 2), (6, 6, 1), (6, 6, 64)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_block_sizes_that_do_not_divide_and_s_different_from_s_kv(S, S_kv, block_size, is_causal):
    q, k, v = qkv(2, 2, S, S_kv, 8, dtype=torch.float64)
    mask = padding_mask([S_kv, max(1, S_kv - 3)], S_kv, left=True)[:, None, None, :]
    out = tiled_attention(q, k, v, mask, is_causal=is_causal, block_size=block_size)
    visible = full_visibility(S, S_kv, mask, is_causal)
    assert torch.allclose(out, reference(q, k, v, visible), atol=1e-12)
    out_e, _ = explicit_attention(q, k, v, mask, is_causal=is_causal)
    for a, b in zip(grads(out, (q, k, v)), grads(out_e, (q, k, v)), strict=True):
        assert torch.allclose(a, b, atol=1e-12)


def test_causal_aligns_at_the_end_of_the_keys():
    q, k, v = qkv(1, 1, 3, 7, 4)
    out = tiled_attention(q, k, v, is_causal=True, block_size=2)
    assert torch.allclose(out, sdpa_attention(q, k, v, causal_mask(3, 7)), atol=1e-6)
    # the last query sees every key: its output is that of plain attention
    assert torch.allclose(out[..., -1, :], F.scaled_dot_product_attention(q, k, v)[..., -1, :], atol=1e-6)


# --- rows with no visible key --------------------------------------------------------------------------------------


@pytest.mark.parametrize("block_size", [1, 2, 3, 8])
def test_fully_masked_rows_give_zeros_and_zero_gradients(block_size):
    q, k, v = qkv(2, 2, 6, 6, 4)
    mask = padding_mask([2, 6], left=True)[:, None, None, :]  # with causal: queries 0..3 of sequence 0 see nothing
    out = tiled_attention(q, k, v, mask, is_causal=True, block_size=block_size)
    assert bool(out.isfinite().all()) and bool((out[0, :, :4] == 0).all()) and not bool((out[0, :, 4:] == 0).any())
    dq, dk, dv = grads(out, (q, k, v))
    assert all(bool(t.isfinite().all()) for t in (dq, dk, dv))
    assert bool((dq[0, :, :4] == 0).all())  # nothing flows into a query that sees nothing
    assert bool((dk[0, :, :4] == 0).all()) and bool((dv[0, :, :4] == 0).all())  # nor into hidden keys


def test_every_row_masked_and_no_keys_at_all_give_zeros():
    q, k, v = qkv(1, 2, 4, 5, 4)
    out = tiled_attention(q, k, v, torch.zeros(1, 4, 5, dtype=torch.bool), block_size=2)  # (1, S, S_kv)
    assert torch.equal(out, torch.zeros_like(out))
    assert all(torch.equal(g, torch.zeros_like(g)) for g in grads(out, (q, k, v)))
    empty_k, empty_v = torch.randn(1, 2, 0, 4), torch.randn(1, 2, 0, 4)  # S_kv = 0
    out_empty = tiled_attention(q, empty_k, empty_v)
    assert torch.equal(out_empty, torch.zeros(1, 2, 4, 4))
    assert torch.equal(out_empty, explicit_attention(q, empty_k, empty_v)[0])


def test_rows_that_start_fully_masked_in_the_online_softmax():
    scores = torch.randn(3, 8)
    visible = torch.tensor([[1] * 8, [0] * 5 + [1] * 3, [0] * 8], dtype=torch.bool)
    masked = scores.masked_fill(~visible, -math.inf)
    values = torch.randn(8, 5)
    m, l, acc = torch.full((3,), -math.inf), torch.zeros(3), torch.zeros(3, 5)
    for j0 in range(0, 8, 4):
        m, l, acc = online_softmax_update(m, l, acc, masked[:, j0 : j0 + 4].clone(), values[j0 : j0 + 4])
    assert not bool(acc.isnan().any()) and not bool(l.isnan().any())
    assert l[2] == 0 and m[2] == -math.inf and bool((acc[2] == 0).all())
    assert torch.allclose(acc[:2] / l[:2, None], masked[:2].softmax(-1) @ values, atol=1e-6)
    assert torch.allclose(m[:2] + l[:2].log(), masked[:2].logsumexp(-1))


def test_log_sum_exp_of_the_forward():
    q, k, v = qkv(2, 2, 5, 9, 4)
    mask = padding_mask([9, 3], left=True)[:, None, None, :]
    with torch.no_grad():
        out, lse = tiled_forward(q, k, v, mask, True, 2)
        scores = (q @ k.transpose(-2, -1) / 2).masked_fill(~full_visibility(5, 9, mask, True), -math.inf)
    ref = scores.logsumexp(-1)
    blind = ref == -math.inf
    assert bool(blind.any()) and bool((lse[blind] == math.inf).all())
    assert torch.allclose(lse[~blind], ref[~blind], atol=1e-5)


# --- gradients -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "S,S_kv,block_size,is_causal,padding",
    [(4, 4, 2, False, None), (5, 5, 2, True, None), (3, 6, 4, True, "left"), (6, 3, 2, True, "right"),
     (5, 7, 3, False, "left")],
)
def test_gradcheck_float64(S, S_kv, block_size, is_causal, padding):
    q, k, v = qkv(2, 2, S, S_kv, 3, dtype=torch.float64)
    mask = None
    if padding is not None:
        mask = padding_mask([S_kv, 1], S_kv, left=padding == "left")[:, None, None, :]
    assert torch.autograd.gradcheck(
        lambda a, b, c: tiled_attention(a, b, c, mask, is_causal=is_causal, block_size=block_size), (q, k, v)
    )


def test_tiled_backward_matches_autograd_of_explicit():
    q, k, v = qkv(1, 2, 7, 10, 4, dtype=torch.float64)
    g = torch.randn(1, 2, 7, 4, dtype=torch.float64)
    ref = torch.autograd.grad(explicit_attention(q, k, v, is_causal=True)[0], (q, k, v), g)
    with torch.no_grad():
        out, lse = tiled_forward(q, k, v, None, True, 3)
        mine = tiled_backward(q, k, v, out, lse, g, None, True, 3)
    assert all(torch.allclose(a, b, atol=1e-12) for a, b in zip(mine, ref, strict=True))


def test_second_derivatives_are_refused_not_silently_wrong():
    q, k, v = qkv(1, 1, 3, 3, 2, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="no second derivative"):
        torch.autograd.grad(tiled_attention(q, k, v).sum(), (q,), create_graph=True)
    (dq,) = torch.autograd.grad(tiled_attention(q, k, v).sum(), (q,))  # a first derivative is fine
    assert bool(dq.isfinite().all())


def test_only_some_inputs_require_grad():
    q, k, v = qkv(1, 2, 4, 4, 4)
    k, v = k.detach(), v.detach()
    (dq,) = grads(tiled_attention(q, k, v, block_size=3), (q,))
    (dq_e,) = grads(explicit_attention(q, k, v)[0], (q,))
    assert torch.allclose(dq, dq_e, atol=1e-5)


# --- shapes: broadcasting, single head, other value size -----------------------------------------------------------


def test_leading_sizes_broadcast_like_the_explicit_path():
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 4, 5, 8, generator=g).requires_grad_(True)  # (B, NH, S, HS)
    k = torch.randn(2, 1, 6, 8, generator=g).requires_grad_(True)  # (B, 1, S_kv, HS): shared by the heads
    v = torch.randn(6, 8, generator=g).requires_grad_(True)  # (S_kv, HS): shared by everything
    mask = torch.rand(2, 1, 1, 6, generator=g) > 0.3
    out = tiled_attention(q, k, v, mask, block_size=4)
    out_e, _ = explicit_attention(q, k, v, mask)
    assert out.shape == (2, 4, 5, 8) and torch.allclose(out, out_e, atol=1e-5)
    for a, b in zip(grads(out, (q, k, v)), grads(out_e, (q, k, v)), strict=True):
        assert a.shape == b.shape and torch.allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("lead", [(), (3,), (2, 3, 2)])
def test_any_number_of_leading_axes_and_a_value_size_of_its_own(lead):
    g = torch.Generator().manual_seed(4)
    q = torch.randn(*lead, 5, 4, generator=g)  # (..., S, HS)
    k = torch.randn(*lead, 7, 4, generator=g)  # (..., S_kv, HS)
    v = torch.randn(*lead, 7, 3, generator=g)  # (..., S_kv, HS_v)
    out = tiled_attention(q, k, v, padding_mask([6], 7)[0], is_causal=True, block_size=2)  # 1-D mask over the keys
    assert out.shape == (*lead, 5, 3)
    assert torch.allclose(out, explicit_attention(q, k, v, padding_mask([6], 7)[0], is_causal=True)[0], atol=1e-5)


# --- O(S) memory and the skipped tiles ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("is_causal", [False, True])
def test_no_buffer_grows_with_s_times_s_kv(is_causal, dtype):
    B, NH, S, HS, block = 1, 4, 512, 16, 32
    q, k, v = qkv(B, NH, S, S, HS, dtype=dtype)
    mask = padding_mask([S - 5], S, left=True)[:, None, None, :]
    with LargestBuffer() as largest:
        out = tiled_attention(q, k, v, mask, is_causal=is_causal, block_size=block)
        out.backward(torch.ones_like(out))
    assert largest.nbytes <= B * NH * S * HS * 4  # q in float32 (bfloat16: a float32 copy of q or dq): no S x S_kv
    assert largest.nbytes < B * NH * S * S * 4 / 16
    with LargestBuffer() as explicit:
        explicit_attention(q, k, v, mask, is_causal=is_causal)[0].sum().backward()
    assert explicit.nbytes >= B * NH * S * S * q.element_size()  # the explicit path does store S x S_kv


def test_a_sliding_window_on_the_tiled_path_allocates_nothing_that_grows_with_s_squared():
    """GroupedQueryAttention(window=128, attn_impl="tiled") built a dense (B, 1, S, S) band: 16 MiB at B = 4,
    S = 2048, four times that at 4096. The window now goes to the tiles as index arithmetic: doubling S may double
    the largest buffer (the projections), never quadruple it."""
    from attention_lib import GroupedQueryAttention

    torch.manual_seed(0)
    layer = GroupedQueryAttention(64, 4, 2, 4096, window=128, attn_impl="tiled")
    largest = {}
    for S in (2048, 4096):
        x = torch.randn(4, S, 64, requires_grad=True)  # (B, S, C)
        with LargestBuffer() as buffers:
            layer(x).sum().backward()  # forward and backward, the training step's memory
        largest[S] = buffers.nbytes
        assert buffers.nbytes < 4 * S * S // 2, buffers.shape  # far below a (B, 1, S, S) bool band
    assert largest[4096] < 3 * largest[2048], largest


@pytest.mark.parametrize("window", [None, 1, 3, 5])
@pytest.mark.parametrize("S,S_kv,block_size", [(8, 8, 2), (4, 10, 3), (10, 4, 3), (16, 16, 4)])
def test_causal_skips_the_tiles_above_the_diagonal_and_outside_the_window(monkeypatch, S, S_kv, block_size, window):
    computed = []
    real_tile_mask = efficient.tile_mask

    def spy(mask, causal_offset, i0, i1, j0, j1, device, window=None):
        computed.append((i0, j0))
        return real_tile_mask(mask, causal_offset, i0, i1, j0, j1, device, window)

    monkeypatch.setattr(efficient, "tile_mask", spy)
    q, k, v = qkv(1, 1, S, S_kv, 4)
    with torch.no_grad():
        out, lse = tiled_forward(q, k, v, None, True, block_size, window=window)
    visible = full_visibility(S, S_kv, is_causal=True, window=window)
    needed = {
        (i0, j0)
        for i0 in range(0, S, block_size)
        for j0 in range(0, S_kv, block_size)
        if visible[i0 : i0 + block_size, j0 : j0 + block_size].any()
    }
    assert sorted(computed) == sorted(needed)  # every tile with a visible pair, once; none other
    torch.testing.assert_close(out, reference(q, k, v, visible).float())
    computed.clear()
    tiled_backward(q, k, v, out, lse, torch.ones_like(out), None, True, block_size, window=window)
    assert set(computed) == needed and len(computed) == len(needed)  # the backward visits the same tiles


# --- devices and dtypes ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", CUDA)
def test_on_cuda_equals_sdpa(device):
    q, k, v = qkv(2, 2, 37, 45, 16, device=device)
    mask = padding_mask([45, 20], left=True).to(device)[:, None, None, :]
    out = tiled_attention(q, k, v, mask, is_causal=True, block_size=16)
    assert out.device.type == "cuda"
    assert torch.allclose(out, sdpa_attention(q, k, v, mask, is_causal=True), atol=1e-5)


def test_float64_is_computed_in_float64():
    q, k, v = qkv(1, 1, 5, 5, 4, dtype=torch.float64)
    out = tiled_attention(q, k, v, block_size=2)
    assert out.dtype == torch.float64
    assert torch.allclose(out, reference(q, k, v, full_visibility(5, 5)), atol=1e-13)



def _relative_error(got, exact):
    return ((got.double() - exact).norm() / exact.norm()).item()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("is_causal", [False, True])
def test_half_precision_is_as_accurate_as_sdpa_on_long_rows(dtype, is_causal):
    """bfloat16 and float16 inputs with 4096 keys: the output and every gradient are as close to float64 arithmetic
    on the same inputs as SDPA's are (both keep their running sums in float32; sums kept in the inputs' dtype lose
    the later keys of a long row, and dq was then 6 times further off than SDPA's)."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 16, 64, generator=g).to(dtype)
    k = torch.randn(1, 2, 4096, 64, generator=g).to(dtype)
    v = (torch.randn(1, 2, 4096, 64, generator=g) + 2).to(dtype)  # values with a mean: outputs far from 0
    grad_out = torch.randn(1, 2, 16, 64, generator=g).to(dtype)
    exact_in = [t.double().requires_grad_(True) for t in (q, k, v)]
    exact = explicit_attention(*exact_in, is_causal=is_causal)[0]
    exact_grads = torch.autograd.grad(exact, exact_in, grad_out.double())
    errors = {}
    for name, fn in [("tiled", lambda *t: tiled_attention(*t, is_causal=is_causal, block_size=64)),
                     ("sdpa", lambda *t: sdpa_attention(*t, is_causal=is_causal))]:
        inputs = [t.clone().requires_grad_(True) for t in (q, k, v)]
        out = fn(*inputs)
        grads_ = torch.autograd.grad(out, inputs, grad_out)
        assert out.dtype == dtype and all(t.dtype == dtype for t in grads_)
        errors[name] = [_relative_error(a, b) for a, b in zip((out, *grads_), (exact, *exact_grads), strict=True)]
    for what, mine, sdpa in zip(("out", "dq", "dk", "dv"), errors["tiled"], errors["sdpa"], strict=True):
        assert mine <= 1.5 * sdpa, f"{what}: tiled {mine:.3%} against SDPA {sdpa:.3%}"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_keeps_its_running_state_in_float32(dtype):
    q, k, v = (t.detach().to(dtype) for t in qkv(1, 2, 5, 9, 4))
    mask = padding_mask([9], left=True)[:, None, None, :]
    out, lse = tiled_forward(q, k, v, mask, True, 2)
    assert out.dtype == dtype and lse.dtype == torch.float32
    assert accumulation_dtype(dtype) == torch.float32
    assert accumulation_dtype(torch.float32) == torch.float32 and accumulation_dtype(torch.float64) == torch.float64
    dq, dk, dv = tiled_backward(q, k, v, out, lse, torch.ones_like(out), mask, True, 2)
    assert dq.dtype == dk.dtype == dv.dtype == dtype

# --- bad input: refused early, with a message that names the argument ---------------------------------------------


GOOD = torch.randn(1, 2, 4, 8)


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"mask": torch.ones(1, 4)}, TypeError, r"mask must be a torch.Tensor of dtype torch.bool .*torch.float32"),
        ({"mask": [[True] * 4]}, TypeError, r"mask must be a torch.Tensor of dtype torch.bool .*list"),
        ({"mask": torch.ones(3, 4, dtype=torch.bool)}, ValueError, r"padding mask .*\(1, 4\), got \(3, 4\)"),
        ({"mask": torch.ones(2, 3, 4, 4, dtype=torch.bool)}, ValueError, r"or broadcast to .* got \(2, 3, 4, 4\)"),
        ({"mask": torch.ones(4, 5, dtype=torch.bool)}, ValueError, r"2 dimensions is a padding mask .*got \(4, 5\)"),
        ({"mask": torch.ones(1, 3, 4, dtype=torch.bool)}, ValueError, r"or broadcast to .* got \(1, 3, 4\)"),
        ({"k": GOOD[..., :6]}, ValueError, r"must agree, got q \(1, 2, 4, 8\), k \(1, 2, 4, 6\)"),
        ({"v": GOOD[..., :3, :]}, ValueError, r"must agree.*v \(1, 2, 3, 8\)"),
        ({"k": torch.randn(3, 4, 8)}, ValueError, r"k \(3, 4, 8\).*must broadcast"),
        ({"v": GOOD.double()}, TypeError, r"one dtype, got torch.float32, torch.float32, torch.float64"),
        ({"q": GOOD.long()}, TypeError, r"q must be a floating-point tensor .*torch.int64"),
        ({"k": GOOD[0, 0, 0]}, TypeError, r"k must be a floating-point tensor of shape \(\.\.\., S, HS\).*\(8,\)"),
        ({"q": "not a tensor"}, TypeError, r"q must be .*got str"),
        ({"block_size": 0}, ValueError, r"block_size must be an int >= 1, got 0"),
        ({"block_size": 2.0}, TypeError, r"block_size must be an int >= 1, got 2.0"),
        ({"block_size": True}, TypeError, r"block_size .*True"),
    ],
)
def test_bad_inputs_are_refused(kwargs, error, match):
    args = {"q": GOOD, "k": GOOD, "v": GOOD, **kwargs}
    with pytest.raises(error, match=match):
        tiled_attention(**args)


@pytest.mark.parametrize("device", CUDA)
def test_a_mask_on_another_device_is_refused(device):
    q = GOOD.to(device)
    with pytest.raises(ValueError, match="mask must be on the device of the queries"):
        tiled_attention(q, q, q, torch.ones(4, 4, dtype=torch.bool))


def test_a_scalar_mask_is_all_or_nothing():
    q, k, v = qkv(1, 2, 4, 5, 4)
    assert torch.allclose(tiled_attention(q, k, v, torch.tensor(True)), sdpa_attention(q, k, v), atol=1e-6)
    assert torch.equal(tiled_attention(q, k, v, torch.tensor(False)), torch.zeros(1, 2, 4, 4))


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_junk_arguments_get_a_package_error_never_a_torch_one(data):
    q = torch.randn(2, 3, 4)
    name = data.draw(st.sampled_from(["mask", "block_size", "q", "k", "v"]), label="argument")
    value = data.draw(
        st.one_of(
            st.none(), st.booleans(), st.integers(-3, 0), st.floats(allow_nan=True), st.text(max_size=2),
            st.just([]), st.just(torch.ones(2, 3, 3)), st.just(torch.tensor([2.5, 1.0])),
            st.just(torch.ones(5, dtype=torch.bool)), st.just(torch.ones(2, 1, 2, dtype=torch.bool)),
        ),
        label="value",
    )
    args = {"q": q, "k": q, "v": q, name: value}
    try:
        tiled_attention(**args)
    except (TypeError, ValueError) as err:
        raised_in = Path(traceback.extract_tb(err.__traceback__)[-1].filename).resolve()
        assert raised_in.parent == PACKAGE, f"{type(err).__name__} raised outside the package: {err}"
    else:  # valid: no mask, or values (2, S_kv=3, HS_v) of a size of their own
        valid_v = name == "v" and isinstance(value, torch.Tensor) and value.is_floating_point()
        valid_v = valid_v and value.shape[:2] == (2, 3)
        assert (name == "mask" and value is None) or valid_v, f"{name}={value!r} was accepted"


# --- the third path of every layer --------------------------------------------------------------------------------


def test_the_tiled_path_is_registered():
    assert "tiled" in attention_impls()
    q, k, v = qkv(2, 2, 5, 7, 4)
    mask = padding_mask([7, 2], left=True)[:, None, None, :]
    ctx, weights = attend(q, k, v, mask=mask, is_causal=True, impl="tiled")
    assert weights is None
    assert torch.allclose(ctx, attend(q, k, v, mask=mask, is_causal=True, impl="explicit")[0], atol=1e-5)


def test_attention_dropout_is_refused_with_a_clear_error():
    q, k, v = qkv(1, 2, 4, 4, 4)
    with pytest.raises(ValueError, match=r"attn_impl='tiled' has no attention dropout, got dropout_p=0.1"):
        attend(q, k, v, dropout_p=0.1, impl="tiled")
    layer = BidirectionalAttention(8, 2, attn_drop=0.1)
    layer.attn_impl = "tiled"
    x = torch.randn(2, 3, 8)
    with pytest.raises(ValueError, match="attn_drop=0"):
        layer.train()(x)
    with torch.no_grad():
        assert torch.allclose(layer.eval()(x), BidirectionalAttention.forward(_with_impl(layer, "sdpa"), x), atol=1e-6)


def _with_impl(layer, impl):
    layer.attn_impl = impl
    return layer


def _layer_cases():
    torch.manual_seed(0)
    C, NH = 16, 4
    x, context = torch.randn(3, 7, C), torch.randn(3, 11, 12)
    return {
        "single": (SingleHeadAttention(C), lambda lay: lay(x, padding_mask([7, 4, 0]))),
        "bidirectional": (BidirectionalAttention(C, NH), lambda lay: lay(x, padding_mask([7, 4, 1]))),
        "causal": (CausalAttention(C, NH, context_size=8), lambda lay: lay(x, padding_mask([7, 3, 1], left=True))),
        "cross": (CrossAttention(C, NH, kv_hidden_size=12), lambda lay: lay(x, context, padding_mask([11, 5, 0]))),
    }


@pytest.mark.parametrize("kind", ["single", "bidirectional", "causal", "cross"])
def test_every_layer_gives_the_same_outputs_and_gradients_on_the_tiled_path(kind):
    layer, run = _layer_cases()[kind]
    results = {}
    for impl in ("sdpa", "explicit", "tiled"):
        layer.attn_impl = impl
        layer.zero_grad()
        out = run(layer)
        assert bool(out.isfinite().all())
        out.pow(2).sum().backward()
        results[impl] = [out.detach()] + [p.grad.clone() for p in layer.parameters()]
    for other in ("sdpa", "explicit"):
        for a, b in zip(results["tiled"], results[other], strict=True):
            assert torch.allclose(a, b, atol=1e-5), other


def test_decoding_with_a_kv_cache_on_the_tiled_path():
    torch.manual_seed(0)
    layer = CausalAttention(16, 4, context_size=12).eval()
    layer.attn_impl = "tiled"
    x = torch.randn(2, 9, 16)
    mask = padding_mask([9, 6], left=True)  # (B, S_total)
    with torch.no_grad():
        cache = layer.new_cache(2)
        outs = [layer.decode(x[:, :5], cache, mask[:, :5])]  # the prompt
        outs += [layer.decode(x[:, t : t + 1], cache, mask[:, : t + 1]) for t in range(5, 9)]  # one token a step
        full = _with_impl(layer, "sdpa")(x, mask)
    assert torch.allclose(torch.cat(outs, dim=1), full, atol=1e-5)
