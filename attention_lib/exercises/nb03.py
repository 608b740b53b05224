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
def check_03_1(split_interleaved) -> str:
    """split_interleaved(qkv (B, S, 3C) laid out [q0 k0 v0 | q1 k1 v1 | ...], num_heads) -> q, k, v (B, NH, S, HS)."""
    B, S, NH, HS = 2, 5, 3, 4
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, NH, S, HS, generator=gen) for _ in range(3))  # each (B, NH, S, HS)
    qkv = torch.stack([q, k, v], dim=3).transpose(1, 2).reshape(B, S, 3 * NH * HS)  # (B, S, 3C), heads interleaved
    got = split_interleaved(qkv.clone(), NH)
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        raise Hint("return three tensors, q, k and v (e.g. a tuple, or the result of unbind).")
    got = [expect_shape(expect_tensor(t, name), (B, NH, S, HS), name) for t, name in zip(got, "qkv", strict=True)]
    ours = qkv.reshape(B, S, 3, NH, HS).permute(2, 0, 3, 1, 4)  # the main path's [q | k | v] reading
    if all(torch.equal(g, o) for g, o in zip(got, ours, strict=True)):
        raise Hint("that reads the [q | k | v] layout of the main path. Here each head's q, k and v sit side by side: "
                   "the last dimension is (head, part, column), so reshape(B, S, NH, 3, HS).")
    if torch.equal(got[0], k) or torch.equal(got[0], v):
        raise Hint("the parts come in the order q, k, v inside each head: q is part 0, k part 1, v part 2.")
    for g, want, name in zip(got, (q, k, v), ("q", "k", "v"), strict=True):
        expect_close(g, want, name, atol=0, why="the last dimension is (head, part, column): reshape to "
                     "(B, S, NH, 3, HS), then move the part first and the heads before the sequence.")
    return "q, k and v of every head, read from the interleaved layout."


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
