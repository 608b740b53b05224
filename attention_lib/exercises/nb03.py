"""Graders of the exercises of notebook 03 (multi-head bidirectional attention)."""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import nn

from ._grading import Hint, expect_close, expect_shape, expect_tensor, grader

__all__ = ["check_03_1", "check_03_2", "check_03_3"]


@grader("03.1")
def check_03_1(merge_heads) -> str:
    """merge_heads(context (B, NH, S, HS)) -> (B, S, NH * HS), each token's heads side by side."""
    B, NH, S, HS = 2, 3, 5, 4
    context = torch.randn(B, NH, S, HS, generator=torch.Generator().manual_seed(0))  # (B, NH, S, HS)
    got = expect_shape(merge_heads(context.clone()), (B, S, NH * HS), "merge_heads(context)")
    if torch.equal(got, context.reshape(B, S, NH * HS)):
        raise Hint(
            "tokens and heads are mixed up: reshape alone keeps the memory order, where all tokens of head 0 come "
            "before head 1. Move the heads next to the head size first: transpose(1, 2), then reshape."
        )
    expected = context.transpose(1, 2).reshape(B, S, NH * HS)  # (B, S, C)
    expect_close(got, expected, "merge_heads(context)", atol=0,
                 why="Row s must hold token s's context vectors, head 0 first: compare got[0, 0] with "
                     "torch.cat([context[0, h, 0] for h in range(NH)]).")
    return "each row holds one token's heads, in order."


def _multi_head(x, Wqkv, Wo, num_heads, scale="head", merge="right"):
    """The reference (and its usual mistakes): multi-head attention from a fused Wqkv, explicit maths."""
    B, S, C = x.shape
    HS = C // num_heads
    q, k, v = Wqkv(x).reshape(B, S, 3, num_heads, HS).permute(2, 0, 3, 1, 4)  # 3 x (B, NH, S, HS)
    divisor = {"head": math.sqrt(HS), "hidden": math.sqrt(C), "none": 1.0}[scale]
    context = (q @ k.transpose(-2, -1) / divisor).softmax(-1) @ v  # (B, NH, S, HS)
    merged = context.transpose(1, 2) if merge == "right" else context  # (B, S, NH, HS) or (B, NH, S, HS)
    return Wo(merged.reshape(B, S, C))  # (B, S, C)


@contextlib.contextmanager
def _written_out():
    """Inside the block F.scaled_dot_product_attention and every layer of attention_lib refuse to run: the exercise
    asks for the maths written out."""
    original = F.scaled_dot_product_attention

    def refuse(*args, **kwargs):
        raise Hint("write the attention out (scores, softmax, weighted sum) instead of calling "
                   "F.scaled_dot_product_attention or a layer of attention_lib")

    def refuse_our_layers(module, args):
        if type(module).__module__.startswith("attention_lib."):
            refuse()

    F.scaled_dot_product_attention = refuse
    handle = nn.modules.module.register_module_forward_pre_hook(refuse_our_layers)
    try:
        yield
    finally:
        handle.remove()
        F.scaled_dot_product_attention = original


@grader("03.2")
def check_03_2(multi_head_attention) -> str:
    """multi_head_attention(x (B, S, C), Wqkv, Wo, num_heads) -> (B, S, C)."""
    torch.manual_seed(0)
    B, S, C, NH = 2, 5, 12, 3
    Wqkv, Wo = nn.Linear(C, 3 * C), nn.Linear(C, C)
    x = torch.randn(B, S, C)  # (B, S, C)
    with torch.no_grad(), _written_out():
        got = multi_head_attention(x.clone(), Wqkv, Wo, NH)
    got = expect_shape(expect_tensor(got, "the output"), (B, S, C), "the output").detach()
    with torch.no_grad():
        expected = _multi_head(x, Wqkv, Wo, NH)  # (B, S, C)
        mistakes = {
            ("none", "right"): "the scores are not scaled: divide q·kᵀ by √HS before the softmax.",
            ("hidden", "right"): "the scores are divided by √C; divide by √HS, the head size, the width of the "
                                 "vectors whose dot product forms a score.",
            ("head", "wrong"): "the heads were merged without the transpose: transpose(1, 2) before reshape, or "
                               "tokens and heads get mixed up.",
        }
        for (scale, merge), hint in mistakes.items():
            if torch.allclose(got, _multi_head(x, Wqkv, Wo, NH, scale, merge), atol=1e-5):
                raise Hint(hint)
    expect_close(got, expected, "the output", why="Check each step's shape against the notebook's forward pass: "
                 "(B, S, 3C) -> (B, S, 3, NH, HS) -> 3 x (B, NH, S, HS), softmax over the last axis.")
    return "your multi-head attention equals BidirectionalAttention's explicit path."


@grader("03.3")
def check_03_3(torch_attention) -> str:
    """torch_attention(mha, x (B, S, C), mask (B, S), True = real) -> (B, S, C), as our layer computes it."""
    torch.manual_seed(0)
    B, S, C, NH = 3, 6, 12, 3
    mha = nn.MultiheadAttention(C, NH, batch_first=True).eval()
    x = torch.randn(B, S, C)  # (B, S, C)
    mask = torch.arange(S)[None, :] < torch.tensor([6, 4, 2])[:, None]  # (B, S): True = real token
    with torch.no_grad():
        got = torch_attention(mha, x.clone(), mask.clone())
        expected = mha(x, x, x, key_padding_mask=~mask, need_weights=False)[0]  # (B, S, C)
        unmasked = mha(x, x, x, need_weights=False)[0]  # (B, S, C)
    if isinstance(got, tuple):
        raise Hint("nn.MultiheadAttention returns a pair (output, weights): return only the output, its [0].")
    got = expect_shape(got, (B, S, C), "the output").detach()
    if got.isnan().any():
        raise Hint("the output has NaN: a row whose every key was ignored. key_padding_mask is True where a key "
                   "must be ignored, the opposite of our mask: pass key_padding_mask=~mask.")
    if torch.allclose(got, unmasked, atol=1e-5):
        raise Hint("the padding is not masked: pass the mask as key_padding_mask (inverted: ~mask).")
    expect_close(got, expected, "the output", why="key_padding_mask is True where a key must be ignored: pass "
                 "~mask, and call mha(x, x, x, ...) for self-attention.")
    return "nn.MultiheadAttention with key_padding_mask=~mask computes what our layer computes."
