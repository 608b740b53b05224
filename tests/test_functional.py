"""The attention functions and mask builders of attention_lib.functional, against independent references."""


import pytest
import torch
import torch.nn.functional as F
from reference import attention64
from torch.nn.attention.bias import causal_lower_right

from attention_lib.functional import (
    attend,
    attention_impls,
    explicit_attention,
    masked_softmax,
    register_attention_impl,
    sdpa_attention,
)
from attention_lib.masks import causal_mask, padding_mask


def reference(q, k, v, mask=None):
    """The shared float64 reference: (context, weights); rows with no visible key give zeros."""
    return attention64(q, k, v, mask)


def qkv(*shape_q, S_kv=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    *lead, S, HS = shape_q
    S_kv = S if S_kv is None else S_kv
    q = torch.randn(*lead, S, HS, generator=g)  # (..., S, HS)
    k = torch.randn(*lead, S_kv, HS, generator=g)  # (..., S_kv, HS)
    v = torch.randn(*lead, S_kv, HS, generator=g)  # (..., S_kv, HS)
    return q, k, v


# --- padding_mask -------------------------------------------------------------------------------------------------


def test_padding_mask_right():
    expected = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]], dtype=torch.bool)
    assert torch.equal(padding_mask([3, 1, 4, 0]), expected)


def test_padding_mask_left():
    expected = torch.tensor([[0, 1, 1, 1], [0, 0, 0, 1], [1, 1, 1, 1], [0, 0, 0, 0]], dtype=torch.bool)
    assert torch.equal(padding_mask([3, 1, 4, 0], left=True), expected)


def test_padding_mask_seq_len_and_tensor_lengths():
    m = padding_mask(torch.tensor([2, 1]), seq_len=5)
    assert m.dtype == torch.bool and m.shape == (2, 5)
    assert m.sum(dim=1).tolist() == [2, 1]
    left = padding_mask(torch.tensor([2, 1]), seq_len=5, left=True)
    assert torch.equal(left, m.flip(-1))


@pytest.mark.parametrize("lengths,seq_len", [([3, 6], 5), ([-1, 2], 4)])
def test_padding_mask_rejects_bad_lengths(lengths, seq_len):
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, seq_len=\d+\]"):
        padding_mask(lengths, seq_len=seq_len)


# --- causal_mask ---------------------------------------------------------------------------------------------------


def test_causal_mask_square_is_lower_triangle():
    m = causal_mask(4)
    assert m.dtype == torch.bool and m.shape == (1, 4, 4)  # the leading 1: one pattern for the whole batch
    m = m[0]
    for i in range(4):
        for j in range(4):
            assert bool(m[i, j]) == (j <= i)


@pytest.mark.parametrize("S,S_kv", [(1, 1), (3, 3), (2, 5), (1, 6), (4, 9), (5, 3)])
def test_causal_mask_matches_torch_lower_right(S, S_kv):
    expected = torch.tensor([[j <= S_kv - S + i for j in range(S_kv)] for i in range(S)])  # by hand
    assert torch.equal(causal_mask(S, S_kv), expected[None])
    if S <= S_kv:  # torch's lower-right bias (it warns for S > S_kv)
        assert torch.equal(causal_mask(S, S_kv)[0], causal_lower_right(S, S_kv)._materialize())


def test_causal_mask_longer_keys_last_query_sees_everything():
    m = causal_mask(2, 5)[0]
    assert m[-1].all() and m[0].tolist() == [True, True, True, True, False]


# --- explicit_attention and sdpa_attention ------------------------------------------------------------------------


@pytest.mark.parametrize("shape,S_kv", [((1, 3, 4), 3), ((2, 5, 8), 7), ((2, 3, 4, 16), 4)])
def test_explicit_matches_reference_and_sdpa(shape, S_kv):
    q, k, v = qkv(*shape, S_kv=S_kv)
    ctx, w = explicit_attention(q, k, v)
    ref_ctx, ref_w = reference(q, k, v)
    assert ctx.shape == q.shape[:-1] + (v.size(-1),) and w.shape == q.shape[:-1] + (S_kv,)
    assert torch.allclose(ctx.double(), ref_ctx, atol=1e-5) and torch.allclose(w.double(), ref_w, atol=1e-6)
    assert torch.allclose(ctx, F.scaled_dot_product_attention(q, k, v), atol=1e-5)
    assert torch.allclose(sdpa_attention(q, k, v), ctx, atol=1e-5)


def test_weights_sum_to_one_over_visible_keys_and_zero_elsewhere():
    q, k, v = qkv(2, 4, 6, 8, S_kv=6)
    mask = torch.rand(2, 1, 6, 6, generator=torch.Generator().manual_seed(1)) > 0.3  # (B, 1, S, S_kv)
    _, w = explicit_attention(q, k, v, mask)
    visible = mask.expand_as(w)
    assert bool((w[~visible] == 0).all())
    sums = w.sum(-1)
    has_key = visible.any(-1)
    assert torch.allclose(sums[has_key], torch.ones_like(sums[has_key]))
    assert bool((sums[~has_key] == 0).all())


# --- attend: both paths agree --------------------------------------------------------------------------------------


def _masks(B, S, S_kv):
    g = torch.Generator().manual_seed(2)
    return {
        "none": None,
        "padding right (B,1,1,S_kv)": padding_mask([S_kv, S_kv - 2], seq_len=S_kv)[:, None, None, :],
        "padding left (B,1,1,S_kv)": padding_mask([S_kv - 1, 1], seq_len=S_kv, left=True)[:, None, None, :],
        "random (B,NH,S,S_kv)": torch.rand(B, 3, S, S_kv, generator=g) > 0.5,
        "one for all (1,S,S_kv)": torch.rand(1, S, S_kv, generator=g) > 0.5,
        "padding 2-D (B,S_kv)": padding_mask([S_kv - 1, 2], seq_len=S_kv),
        "keys 1-D (S_kv,)": torch.rand(S_kv, generator=g) > 0.3,
    }


@pytest.mark.parametrize("mask_name", list(_masks(2, 5, 5)))
@pytest.mark.parametrize("is_causal", [False, True])
def test_attend_paths_agree_with_masks_and_is_causal(mask_name, is_causal):
    B, NH, S, HS = 2, 3, 5, 4
    q, k, v = qkv(B, NH, S, HS)
    mask = _masks(B, S, S)[mask_name]
    ctx_f, none = attend(q, k, v, mask=mask, is_causal=is_causal)
    ctx_e, w = attend(q, k, v, mask=mask, is_causal=is_causal, impl="explicit")
    assert none is None and w.shape == (B, NH, S, S)
    assert torch.allclose(ctx_f, ctx_e, atol=1e-5)
    if mask is None:
        full = torch.ones(B, NH, S, S, dtype=torch.bool)
    elif mask.ndim == 2:  # a padding mask: it hides key columns, in every row and every head
        full = mask[:, None, None, :].expand(B, NH, S, S)
    else:
        full = mask.expand(B, NH, S, S)
    if is_causal:
        full = full & causal_mask(S)
    ref_ctx, ref_w = reference(q, k, v, full)
    assert torch.allclose(ctx_e.double(), ref_ctx, atol=1e-5) and torch.allclose(w.double(), ref_w, atol=1e-6)


def test_is_causal_equals_sdpa_is_causal():
    q, k, v = qkv(2, 2, 6, 8)
    ctx, _ = attend(q, k, v, is_causal=True)
    assert torch.allclose(ctx, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-6)
    ctx_e, w = attend(q, k, v, is_causal=True, impl="explicit")
    assert torch.allclose(ctx_e, ctx, atol=1e-5)
    assert bool((w.triu(diagonal=1) == 0).all())


@pytest.mark.parametrize("S,S_kv", [(2, 5), (1, 6), (3, 3), (5, 3)])
def test_attend_is_causal_with_other_key_lengths_is_aligned_at_the_end(S, S_kv):
    """attend handles S != S_kv causally like explicit_attention and sdpa_attention: the queries are the last S."""
    q, k, v = qkv(1, 2, S, 4, S_kv=S_kv)
    ref_ctx, ref_w = reference(q, k, v, causal_mask(S, S_kv))
    for impl in attention_impls():
        ctx, w = attend(q, k, v, is_causal=True, impl=impl)
        assert torch.allclose(ctx.double(), ref_ctx, atol=1e-5), impl
        if w is not None:
            assert torch.allclose(w.double(), ref_w, atol=1e-6)


def test_lower_level_functions_agree_on_causal_with_longer_keys():
    q, k, v = qkv(2, 3, 4, S_kv=7)
    ctx_e, _ = explicit_attention(q, k, v, is_causal=True)
    ctx_f = sdpa_attention(q, k, v, is_causal=True)
    ref_ctx, _ = reference(q, k, v, causal_mask(3, 7))
    assert torch.allclose(ctx_e.double(), ref_ctx, atol=1e-5)
    assert torch.allclose(ctx_f.double(), ref_ctx, atol=1e-5)


def test_mask_and_is_causal_combine_by_and():
    q, k, v = qkv(2, 5, 4)
    pad = padding_mask([5, 3])[:, None, :]  # (B, 1, S_kv)
    ctx, _ = attend(q, k, v, mask=pad, is_causal=True)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=pad & causal_mask(5))
    assert torch.allclose(ctx, expected, atol=1e-6)


# --- a 2-D mask is a (B, S_kv) padding mask in every function, as in every layer ------------------------------------


def _entry_points():
    """Every function that takes a mask, as (name, fn(q, k, v, mask) -> context)."""
    return [
        ("explicit_attention", lambda q, k, v, m: explicit_attention(q, k, v, m)[0]),
        ("sdpa_attention", lambda q, k, v, m: sdpa_attention(q, k, v, m)),
        *[(f"attend-{impl}", lambda q, k, v, m, impl=impl: attend(q, k, v, mask=m, impl=impl)[0])
          for impl in attention_impls()],
    ]


@pytest.mark.parametrize("name,fn", _entry_points())
@pytest.mark.parametrize("lead", [(), (2,)])  # q (B, S, HS) and (B, NH, S, HS)
def test_a_padding_mask_with_as_many_sequences_as_tokens_hides_keys(name, fn, lead):
    """B == S == S_kv == 3: padding_mask([1, 2, 3]) holds the nine booleans of the causal triangle. SDPA would read
    a 2-D mask as one (S, S_kv) table; every function reads it as (B, S_kv), hiding keys of each sequence."""
    B = S = 3
    q, k, v = qkv(B, *lead, S, 4)  # (B, [NH,] S, HS)
    pad = padding_mask([1, 2, 3])  # (B, S_kv) = (3, 3)
    full = pad.reshape(B, *(1,) * len(lead), 1, S).expand(*q.shape[:-1], S)  # (B, [NH,] S, S_kv), by hand
    ref_ctx, _ = reference(q, k, v, full)
    ctx = fn(q, k, v, pad)
    assert torch.allclose(ctx.double(), ref_ctx, atol=1e-5), name
    table = pad.expand(*q.shape[:-1], S)  # the (S, S_kv) reading, which must not happen
    assert not torch.allclose(ctx.double(), reference(q, k, v, table)[0], atol=1e-3), name


@pytest.mark.parametrize("name,fn", _entry_points())
def test_a_2d_mask_that_is_not_a_padding_mask_is_refused(name, fn):
    q, k, v = qkv(2, 3, 4, S_kv=5)  # (B, S, HS) = (2, 3, 4), S_kv = 5
    for bad in [torch.ones(3, 5, dtype=torch.bool), torch.ones(2, 4, dtype=torch.bool), torch.ones(5, 5).bool()]:
        expected = r"2 dimensions is a padding mask .*\(B, S_kv\) = \(2, 5\), got .*mask\[None\]"
        with pytest.raises(ValueError, match=expected):
            fn(q, k, v, bad)
    assert fn(q, k, v, torch.ones(1, 5, dtype=torch.bool)).shape == (2, 3, 4)  # (1, S_kv): one for the whole batch


@pytest.mark.parametrize("name,fn", _entry_points())
def test_a_2d_mask_needs_queries_with_a_batch_axis(name, fn):
    q, k, v = qkv(3, 4)  # (S, HS): one sequence, no batch axis
    with pytest.raises(ValueError, match=r"needs q with a batch axis.*got q of shape \(3, 4\)"):
        fn(q, k, v, torch.ones(3, 3, dtype=torch.bool).tril())
    ctx = fn(q[None], k[None], v[None], causal_mask(3))  # the way to say it: (1, S, HS) and a (1, S, S_kv) mask
    assert torch.allclose(ctx[0], explicit_attention(q, k, v, is_causal=True)[0], atol=1e-5)


def test_a_registered_path_receives_the_padding_mask_already_reshaped():
    seen = []

    def recording(q, k, v, *, mask, bias, scale, dropout_p, is_causal):
        seen.append(tuple(mask.shape))
        return explicit_attention(q, k, v, mask, dropout_p, is_causal, bias=bias, scale=scale)

    register_attention_impl("shape-recording-test", recording)
    try:
        q, k, v = qkv(2, 3, 4, 8, S_kv=5)  # (B, NH, S, HS)
        attend(q, k, v, mask=padding_mask([5, 2]), impl="shape-recording-test")
        attend(q, k, v, mask=torch.ones(5, dtype=torch.bool), impl="shape-recording-test")
    finally:
        from attention_lib import functional

        functional._ATTENTION_IMPLS.pop("shape-recording-test")
    assert seen == [(2, 1, 1, 5), (1, 1, 1, 5)]  # q's rank: (B, 1, 1, S_kv), and leading 1s for the 1-D mask


# --- a query row with no visible key: zeros, never NaN -------------------------------------------------------------


@pytest.mark.parametrize("explicit", [False, True])
def test_fully_masked_rows_give_zeros_and_finite_gradients(explicit):
    B, NH, S, HS = 2, 2, 4, 8
    q, k, v = (t.requires_grad_(True) for t in qkv(B, NH, S, HS))
    # left padding with the causal rule: the first S - length queries see nothing
    mask = padding_mask([2, 4], left=True)[:, None, None, :]  # (B, 1, 1, S_kv)
    ctx, w = attend(q, k, v, mask=mask, is_causal=True, impl="explicit" if explicit else "sdpa")
    assert bool(ctx.isfinite().all())
    assert bool((ctx[0, :, :2] == 0).all())
    assert not bool((ctx[0, :, 2:] == 0).all()) and not bool((ctx[1] == 0).all())
    if explicit:
        assert bool((w[0, :, :2] == 0).all()) and bool(w.isfinite().all())
    (ctx**2).sum().backward()
    for t in (q, k, v):
        assert bool(t.grad.isfinite().all())
    assert bool((q.grad[0, :, :2] == 0).all())  # nothing flows into a query that sees nothing


def test_fully_masked_everything_gives_zeros_on_both_paths():
    q, k, v = qkv(2, 3, 4)
    mask = torch.zeros(2, 3, 3, dtype=torch.bool)
    for explicit in (False, True):
        ctx, _ = attend(q, k, v, mask=mask, impl="explicit" if explicit else "sdpa")
        assert torch.equal(ctx, torch.zeros_like(ctx))


@pytest.mark.parametrize("mask_shape", [(2, 4, 6), (2, 1, 6), (6,), (1, 4, 6)])
def test_masked_softmax_matches_the_reference_and_never_gives_nan(mask_shape):
    g = torch.Generator().manual_seed(3)
    scores = 3 * torch.randn(2, 4, 6, generator=g)  # (B, S, S_kv)
    mask = torch.rand(mask_shape, generator=g) > 0.5
    if len(mask_shape) == 3:
        mask[0, 0] = False  # a row that sees nothing
    w = masked_softmax(scores, mask)
    e = (scores - scores.amax(-1, keepdim=True)).double().exp() * mask.expand_as(scores)
    total = e.sum(-1, keepdim=True)
    expected = torch.where(total > 0, e / total.clamp_min(1e-300), torch.zeros_like(e))  # (B, S, S_kv)
    assert w.shape == scores.shape and bool(w.isfinite().all())
    assert torch.allclose(w.double(), expected, atol=1e-6)
    assert torch.equal(masked_softmax(scores), scores.softmax(dim=-1))


def test_masked_softmax_computes_no_nan_backward_for_a_row_that_sees_nothing():
    """Such a row gets finite scores before the softmax: zeroing the output alone would leave the softmax's backward
    computing NaN (which anomaly detection stops on), as notebook 00 says."""
    scores = torch.randn(2, 3, requires_grad=True)  # (S, S_kv)
    mask = torch.tensor([[True, False, True], [False, False, False]])  # row 1 sees nothing
    with pytest.warns(UserWarning, match="Anomaly Detection"), torch.autograd.detect_anomaly():
        (masked_softmax(scores, mask) * torch.randn(2, 3)).sum().backward()
    assert bool(scores.grad.isfinite().all()) and torch.equal(scores.grad[1], torch.zeros(3))


def test_explicit_weights_are_before_dropout():
    torch.manual_seed(0)
    q, k, v = qkv(1, 4, 8)
    ctx_plain, w_plain = explicit_attention(q, k, v)
    ctx_drop, w_drop = explicit_attention(q, k, v, dropout_p=0.5)
    assert torch.equal(w_plain, w_drop)
    assert not torch.allclose(ctx_plain, ctx_drop)


# --- the mask's dtype and device: a clear error on every entry point, never a silent wrong answer ---------------------


@pytest.mark.parametrize("entry", ["explicit_attention", "sdpa_attention", "attend-sdpa", "attend-explicit"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8, torch.float16])
def test_every_entry_point_refuses_a_non_bool_mask(entry, dtype):
    """SDPA would *add* a float 0/1 mask to the scores: a wrong answer with no error. Every entry refuses it."""
    q, k, v = qkv(2, 3, 4)
    mask = torch.ones(2, 3, 3, dtype=dtype)
    call = {
        "explicit_attention": lambda: explicit_attention(q, k, v, mask),
        "sdpa_attention": lambda: sdpa_attention(q, k, v, mask),
        "attend-sdpa": lambda: attend(q, k, v, mask=mask),
        "attend-explicit": lambda: attend(q, k, v, mask=mask, impl="explicit"),
    }[entry]
    with pytest.raises(TypeError, match=rf"mask must be .*torch.bool.*got dtype {dtype}"):
        call()


@pytest.mark.parametrize("entry", [explicit_attention, sdpa_attention, attend])
def test_a_mask_on_another_device_is_refused(entry):
    q, k, v = qkv(2, 3, 4)
    mask = torch.ones(2, 3, 3, dtype=torch.bool, device="meta")
    with pytest.raises(ValueError, match=r"mask must be on the device of the queries \(cpu\), got a mask on meta"):
        entry(q, k, v, mask=mask)


# --- the registry of paths ----------------------------------------------------------------------------------------


def test_attend_refuses_an_unknown_path():
    q, k, v = qkv(2, 3, 4)
    with pytest.raises(ValueError, match=r"attn_impl must be one of \(.*'sdpa'.*'explicit'.*\), got 'fast'"):
        attend(q, k, v, impl="fast")


def test_a_registered_path_is_selectable_by_name():
    calls = []

    def recording(q, k, v, *, mask, bias, scale, dropout_p, is_causal):
        calls.append((mask is None, bias is None, scale, dropout_p, is_causal))
        return explicit_attention(q, k, v, mask, dropout_p, is_causal, bias=bias, scale=scale)

    register_attention_impl("recording-test", recording)
    try:
        q, k, v = qkv(2, 3, 4)
        ctx, w = attend(q, k, v, is_causal=True, impl="recording-test")
        assert calls == [(True, True, None, 0.0, True)] and w is not None
        assert torch.allclose(ctx, attend(q, k, v, is_causal=True)[0], atol=1e-5)
    finally:
        from attention_lib import functional

        functional._ATTENTION_IMPLS.pop("recording-test")


@pytest.mark.parametrize("name,fn,error", [("", explicit_attention, ValueError), ("x", 3, TypeError)])
def test_register_refuses_bad_arguments(name, fn, error):
    with pytest.raises(error):
        register_attention_impl(name, fn)


# --- odd arguments of the mask builders ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "lengths,match",
    [
        ([], "one or more whole numbers"),
        (torch.tensor([2.5, 4.0]), "whole numbers"),
        ([2.0, 1.0], "whole numbers"),
        (torch.tensor([True, False]), "whole numbers"),
    ],
)
def test_padding_mask_refuses_lengths_that_are_not_whole_numbers(lengths, match):
    with pytest.raises(ValueError, match=match):
        padding_mask(lengths)


@pytest.mark.parametrize("seq_len,error", [(4.5, TypeError), (0, ValueError), (-2, ValueError), (True, TypeError)])
def test_padding_mask_refuses_odd_seq_len(seq_len, error):
    with pytest.raises(error, match="seq_len must be an int >= 1"):
        padding_mask([1, 2], seq_len=seq_len)


@pytest.mark.parametrize(
    "args,error", [((-1,), ValueError), ((0,), ValueError), ((2.0,), TypeError), ((3, -1), ValueError)]
)
def test_causal_mask_refuses_odd_lengths(args, error):
    with pytest.raises(error, match=r"(q_len|kv_len) must be an int >= 1"):
        causal_mask(*args)


def test_mask_builders_accept_numpy_ints():
    np = pytest.importorskip("numpy")
    assert torch.equal(padding_mask(np.array([1, 3]), seq_len=np.int64(4)), padding_mask([1, 3], seq_len=4))
    assert torch.equal(causal_mask(np.int32(3), np.int64(5)), causal_mask(3, 5))
