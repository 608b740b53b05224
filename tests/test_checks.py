"""The input checks of attention_lib.checks: what they accept, what they make of it, and their error messages."""

import re

import pytest
import torch

from attention_lib.checks import check_input, check_probability, check_same_batch, check_size
from attention_lib.functional import attend
from attention_lib.masks import padding_mask, prepare_mask

B, S, S_KV, NH = 2, 3, 5, 4


def bool_mask(*shape, seed=0):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) > 0.5


# --- check_input ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_check_input_accepts_float_batch_first(dtype):
    assert check_input(torch.zeros(2, 3, 8, dtype=dtype), 8) is None
    assert check_input(torch.zeros(1, 0, 8), 8) is None  # an empty sequence is still (B, S, C)


@pytest.mark.parametrize("shape", [(2, 8), (8,), (1, 2, 3, 8), (2, 3, 7), (2, 3, 16)])
def test_check_input_rejects_wrong_shape(shape):
    with pytest.raises(ValueError) as info:
        check_input(torch.zeros(*shape), 8)
    msg = str(info.value)
    assert msg.startswith("x ") and "(B, S, 8)" in msg and str(tuple(shape)) in msg


def test_check_input_names_the_argument():
    with pytest.raises(ValueError, match=r"^context must have shape \(B, S, 12\).*got \(2, 5, 8\)"):
        check_input(torch.zeros(2, 5, 8), 12, name="context")


@pytest.mark.parametrize("bad", [[[[0.0] * 8]], None, 3.0])
def test_check_input_rejects_non_tensors_with_type_error(bad):
    with pytest.raises(TypeError, match=rf"^x must be a torch.Tensor of shape \(B, S, 8\), got {type(bad).__name__}"):
        check_input(bad, 8)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_check_input_rejects_non_float_dtype_with_type_error(dtype):
    with pytest.raises(TypeError, match=re.escape(f"got dtype {dtype} with shape (2, 3, 8)")) as info:
        check_input(torch.zeros(2, 3, 8, dtype=dtype), 8)
    assert str(info.value).startswith("x must be a floating-point tensor of shape (B, S, 8)")


# --- check_same_batch ----------------------------------------------------------------------------------------------


def test_check_same_batch_accepts_equal_batches():
    assert check_same_batch(torch.zeros(2, 3, 8), torch.zeros(2, 7, 5)) is None
    assert check_same_batch(torch.zeros(2, 3, 8), torch.zeros(2, 7), name="mask") is None


def test_check_same_batch_rejects_other_batch():
    with pytest.raises(ValueError) as info:
        check_same_batch(torch.zeros(2, 3, 8), torch.zeros(3, 7, 5))
    msg = str(info.value)
    assert msg.startswith("context must have the batch size of x (2), got 3")
    assert "(3, 7, 5)" in msg and "(2, 3, 8)" in msg


def test_check_same_batch_names_the_argument_and_rejects_non_tensors():
    with pytest.raises(ValueError, match=r"^mask must have the batch size of x \(2\)"):
        check_same_batch(torch.zeros(2, 3, 8), torch.zeros(1, 7, dtype=torch.bool), name="mask")
    with pytest.raises(ValueError, match="context"):
        check_same_batch(torch.zeros(2, 3, 8), torch.tensor(1.0))
    with pytest.raises(TypeError, match="^context must be a torch.Tensor.*got list"):
        check_same_batch(torch.zeros(2, 3, 8), [1, 2])


# --- prepare_mask: accepted shapes ---------------------------------------------------------------------------------


def test_prepare_mask_none_stays_none():
    assert prepare_mask(None, B, S, S_KV) is None
    assert prepare_mask(None, B, S, S_KV, num_heads=NH) is None


def test_padding_mask_is_spread_over_queries_and_heads():
    pad = padding_mask([5, 2])  # (B, S_kv)
    single = prepare_mask(pad, B, S, S_KV)
    multi = prepare_mask(pad, B, S, S_KV, num_heads=NH)
    assert single.shape == (B, 1, S_KV) and multi.shape == (B, 1, 1, S_KV)
    assert torch.equal(single.expand(B, S, S_KV)[:, 2], pad)
    assert torch.equal(multi.expand(B, NH, S, S_KV)[:, 3, 1], pad)
    assert prepare_mask(pad[:1], B, S, S_KV).shape == (1, 1, S_KV)  # one padding row for the whole batch


@pytest.mark.parametrize(
    "shape,num_heads",
    [
        ((B, S, S_KV), None),
        ((1, S, S_KV), None),
        ((B, 1, S_KV), None),
        ((S_KV,), None),  # one row of keys for everything
        ((B, NH, S, S_KV), NH),
        ((B, 1, S, S_KV), NH),
        ((1, 1, S, S_KV), NH),
        ((1, S, S_KV), NH),
    ],
)
def test_prepare_mask_keeps_broadcastable_masks_and_gives_them_the_scores_rank(shape, num_heads):
    mask = bool_mask(*shape)
    out = prepare_mask(mask, B, S, S_KV, num_heads=num_heads)
    rank = 3 if num_heads is None else 4
    assert out.ndim == rank and tuple(out.shape[-mask.ndim :]) == shape  # only leading sizes of 1 added
    assert out.data_ptr() == mask.data_ptr() and torch.equal(out.reshape(shape), mask)  # a view of the same mask


def test_prepared_padding_mask_gives_the_attention_of_the_full_mask():
    g = torch.Generator().manual_seed(3)
    q = torch.randn(B, NH, S, 8, generator=g)
    k, v = torch.randn(2, B, NH, S_KV, 8, generator=g).unbind(0)
    pad = padding_mask([5, 2])
    full = pad[:, None, None, :].expand(B, NH, S, S_KV).clone()
    ctx, _ = attend(q, k, v, mask=prepare_mask(pad, B, S, S_KV, num_heads=NH), impl="explicit")
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=full)
    assert torch.allclose(ctx, expected, atol=1e-6)


# --- prepare_mask: rejected types and shapes -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8])
def test_prepare_mask_rejects_non_bool_dtype(dtype):
    mask = torch.ones(B, S_KV, dtype=dtype)
    with pytest.raises(TypeError) as info:
        prepare_mask(mask, B, S, S_KV)
    msg = str(info.value)
    assert msg.startswith("mask must be a torch.Tensor of dtype torch.bool (True = may attend), got dtype")
    assert str(dtype) in msg and str((B, S_KV)) in msg


def test_prepare_mask_rejects_non_tensors():
    with pytest.raises(TypeError, match=r"^mask must be a torch.Tensor of dtype torch.bool \(True = may attend\), got"):
        prepare_mask([[True] * S_KV] * B, B, S, S_KV)


@pytest.mark.parametrize("shape", [(B, S_KV + 1), (B + 1, S_KV), (S, S_KV)])
def test_prepare_mask_rejects_bad_padding_masks(shape):
    with pytest.raises(ValueError) as info:
        prepare_mask(torch.ones(*shape, dtype=torch.bool), B, S, S_KV)
    msg = str(info.value)
    assert "padding mask" in msg and f"(B, S_kv) = {(B, S_KV)}" in msg and f"got {shape}" in msg


@pytest.mark.parametrize(
    "shape,num_heads,target",
    [
        ((B + 1, S, S_KV), None, f"(B, S, S_kv) = {(B, S, S_KV)}"),
        ((B, S + 1, S_KV), None, f"(B, S, S_kv) = {(B, S, S_KV)}"),
        ((B, 1, 1, S_KV), None, f"(B, S, S_kv) = {(B, S, S_KV)}"),  # a multi-head mask for a single head
        ((B, NH + 1, S, S_KV), NH, f"(B, NH, S, S_kv) = {(B, NH, S, S_KV)}"),
        ((1, B, NH, S, S_KV), NH, f"(B, NH, S, S_kv) = {(B, NH, S, S_KV)}"),
        ((S_KV + 1,), NH, f"(B, NH, S, S_kv) = {(B, NH, S, S_KV)}"),
    ],
)
def test_prepare_mask_rejects_shapes_that_do_not_broadcast(shape, num_heads, target):
    with pytest.raises(ValueError) as info:
        prepare_mask(torch.ones(*shape, dtype=torch.bool), B, S, S_KV, num_heads=num_heads)
    msg = str(info.value)
    assert msg.startswith("mask must be") and target in msg and f"got {shape}" in msg


def test_three_dimensional_mask_is_ambiguous_for_several_heads():
    # (B, S, S_kv) and (NH, S, S_kv) look alike when B == NH; the layer must not guess.
    per_example = torch.rand(2, 3, 4) > 0.5  # (B, S, S_kv) with B == NH == 2
    with pytest.raises(ValueError, match="ambiguous") as info:
        prepare_mask(per_example, 2, 3, 4, num_heads=2)
    assert "(2, 3, 4)" in str(info.value) and "mask[:, None]" in str(info.value)
    assert prepare_mask(per_example[:, None], 2, 3, 4, num_heads=2).shape == (2, 1, 3, 4)
    assert prepare_mask(per_example[:1], 2, 3, 4, num_heads=2).shape == (1, 1, 3, 4)  # one for all stays accepted
    assert prepare_mask(per_example, 2, 3, 4).shape == (2, 3, 4)  # a single head has no such ambiguity
    with pytest.raises(ValueError, match="ambiguous"):  # (NH, S, S_kv) is refused too: it needs mask[None]
        prepare_mask(torch.ones(NH, S, S_KV, dtype=torch.bool), B, S, S_KV, num_heads=NH)


def test_one_dimensional_mask_works_in_sdpa():
    # An (S_kv,) mask broadcasts by the rules, and must reach SDPA with the scores' rank or SDPA rejects it.
    keys = torch.tensor([True, True, False, True, False])  # (S_kv,)
    q = torch.randn(B, NH, S, 8)  # (B, NH, S, HS)
    k, v = torch.randn(B, NH, S_KV, 8), torch.randn(B, NH, S_KV, 8)  # (B, NH, S_kv, HS)
    prepared = prepare_mask(keys, B, S, S_KV, num_heads=NH)  # (1, 1, 1, S_kv)
    assert prepared.shape == (1, 1, 1, S_KV)
    fused, _ = attend(q, k, v, mask=prepared)
    explicit, _ = attend(q, k, v, mask=prepared, impl="explicit")
    assert torch.allclose(fused, explicit, atol=1e-5)


# --- the dtype and device of x, and of a mask ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_check_input_like_names_both_dtypes(dtype):
    weight = torch.zeros(8, 8)  # a float32 parameter
    with pytest.raises(TypeError, match=rf"^x must have the layer's dtype torch.float32, got {dtype}"):
        check_input(torch.zeros(2, 3, 8, dtype=dtype), 8, like=weight)


def test_check_input_like_names_both_devices():
    with pytest.raises(ValueError, match=r"^context must be on the layer's device cpu, got meta"):
        check_input(torch.zeros(2, 3, 8, device="meta"), 8, name="context", like=torch.zeros(8, 8))


def test_prepare_mask_refuses_a_mask_on_another_device():
    mask = torch.ones(B, S_KV, dtype=torch.bool, device="meta")
    with pytest.raises(ValueError, match=r"mask must be on the device of x \(cpu\), got a mask on meta"):
        prepare_mask(mask, B, S, S_KV, NH, device=torch.device("cpu"))


# --- sizes and probabilities: one rule, one message ----------------------------------------------------------------


@pytest.mark.parametrize("value", [1, 7, 2**40])
def test_check_size_accepts_ints(value):
    assert check_size("n", value) == value and type(check_size("n", value)) is int


def test_check_size_accepts_numpy_ints_and_returns_python_ints():
    np = pytest.importorskip("numpy")
    for value in (np.int64(5), np.int32(5), np.uint8(5)):
        out = check_size("context_size", value)
        assert out == 5 and type(out) is int


@pytest.mark.parametrize("value,error", [(True, TypeError), (False, TypeError), (2.0, TypeError), ("4", TypeError),
                                         (None, TypeError), (0, ValueError), (-3, ValueError)])
def test_check_size_refuses_with_one_message(value, error):
    with pytest.raises(error, match=rf"^num_heads must be an int >= 1, got {re.escape(repr(value))}"):
        check_size("num_heads", value)


@pytest.mark.parametrize("p", [0, 0.0, 0.25, 1, 1.0])
def test_check_probability_accepts_rates(p):
    assert check_probability("attn_drop", p) == float(p)


@pytest.mark.parametrize("p,error", [(-0.5, ValueError), (1.5, ValueError), (float("nan"), ValueError),
                                     (True, TypeError), ("0.1", TypeError), (None, TypeError)])
def test_check_probability_refuses(p, error):
    with pytest.raises(error, match=r"^attn_drop must be a float in \[0, 1\]"):
        check_probability("attn_drop", p)
