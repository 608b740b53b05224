"""Graders for the exercises of notebook 02 (the single-head forward pass)."""

from __future__ import annotations

import math

import torch
from torch import nn

from .. import functional
from ..functional import attend, explicit_attention, register_attention_impl
from ..masks import causal_mask, padding_mask
from ..single_head import SingleHeadAttention
from ._grading import Hint, expect_close, expect_shape, expect_tensor, grader

__all__ = ["check_02_1", "check_02_2", "check_02_3"]


@grader("02.1")
def check_02_1(split_qkv) -> str:
    """`split_qkv(qkv, head_size)` returns (q, k, v), the three consecutive blocks of the last axis."""
    B, S, HS = 2, 3, 4
    qkv = torch.arange(B * S * 3 * HS).reshape(B, S, 3 * HS).float()  # (B, S, 3 * HS): numbers show positions
    parts = split_qkv(qkv.clone(), HS)
    if not isinstance(parts, tuple | list) or len(parts) != 3:
        raise Hint("return a tuple (q, k, v) of three tensors.")
    for name, got, lo in zip("qkv", parts, (0, HS, 2 * HS), strict=True):
        got = expect_tensor(got, name)
        if tuple(got.shape) != (B, S, HS):
            raise Hint(f"{name} should have shape (B, S, HS) = {(B, S, HS)}, got {tuple(got.shape)}: split the "
                       "last axis, the features, not the tokens.")
        expected = qkv[..., lo : lo + HS]  # (B, S, HS)
        if not torch.equal(got, expected):
            shown = got[0, 0].int().tolist()
            raise Hint(f"{name} of token 0 holds the numbers at positions {shown} of its row of qkv, but the layout "
                       f"[q | k | v] puts {name} at positions {list(range(lo, lo + HS))}. Reshape the last axis to "
                       "(3, HS), not (HS, 3), and unbind dim 2.")
    return "q, k and v are the consecutive blocks [0:HS], [HS:2HS], [2HS:3HS] of every token's row."


def _layers(C: int, seed: int) -> tuple[nn.Linear, nn.Linear]:
    g = torch.Generator().manual_seed(seed)
    HS = C // 4
    Wqkv, Wo = nn.Linear(C, 3 * HS), nn.Linear(HS, C)
    with torch.no_grad():
        for p in (*Wqkv.parameters(), *Wo.parameters()):
            p.copy_(torch.randn(p.shape, generator=g))
    return Wqkv, Wo


def _steps(x, Wqkv, Wo, mask, scale: float | None = None):
    """The seven steps, with a mask already shaped to broadcast against (B, S, S_kv); scale: default √HS."""
    HS = Wo.in_features
    q, k, v = Wqkv(x).split(HS, dim=-1)  # each (B, S, HS)
    scores = q @ k.transpose(-2, -1) / (math.sqrt(HS) if scale is None else scale)  # (B, S, S_kv)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return Wo(scores.softmax(dim=-1) @ v)  # (B, S, C)


@grader("02.2")
def check_02_2(forward) -> str:
    """`forward(x, Wqkv, Wo, mask=None)` is single-head attention's output (B, S, C), mask a (B, S_kv) padding."""
    C, B, S = 8, 2, 4
    Wqkv, Wo = _layers(C, seed=5)
    x = torch.randn(B, S, C, generator=torch.Generator().manual_seed(6))  # (B, S, C)
    layer = SingleHeadAttention(C)
    layer.load_state_dict({"Wqkv.weight": Wqkv.weight, "Wqkv.bias": Wqkv.bias, "Wo.weight": Wo.weight,
                           "Wo.bias": Wo.bias})
    pad = padding_mask([4, 2])  # (B, S_kv): sequence 1 has two padded keys
    with torch.no_grad():
        for mask in (None, pad):
            what = "without a mask" if mask is None else "with the padding mask [[1, 1, 1, 1], [1, 1, 0, 0]]"
            got = forward(x.clone(), Wqkv, Wo, None if mask is None else mask.clone())
            got = expect_tensor(got, f"forward(...) {what}")
            if tuple(got.shape) == (B, S, C // 4):
                raise Hint(f"the output has the head's width HS = {C // 4}: project it back to C = {C} with Wo.")
            got = expect_shape(got, (B, S, C), f"forward(...) {what}")
            expected = layer(x, mask)  # (B, S, C)
            if torch.allclose(got, expected, atol=1e-4):
                continue
            m = None if mask is None else mask[:, None, :]  # (B, 1, S_kv)
            if torch.allclose(got, _steps(x, Wqkv, Wo, m, scale=1.0), atol=1e-4):
                raise Hint(f"you forgot to scale the scores by 1/√HS (here 1/√{C // 4}) before the softmax.")
            if torch.allclose(got, _steps(x, Wqkv, Wo, m, scale=math.sqrt(C)), atol=1e-4):
                raise Hint(f"you scaled the scores by 1/√C = 1/√{C}: they are dot products of the head's vectors, "
                           f"HS = {C // 4} numbers each, so the scale is 1/√HS = 1/√{C // 4}.")
            if mask is not None:
                real = mask[:, :, None].expand(B, S, C)  # (B, S, C): the rows of real queries
                unmasked = _steps(x, Wqkv, Wo, None)  # (B, S, C)
                if torch.allclose(got, unmasked, atol=1e-4):
                    raise Hint("the output does not change with the mask: the padded keys must get weight 0 (set "
                               "their scores to -inf before the softmax).")
                if torch.allclose(got[real], unmasked[real], atol=1e-4):
                    raise Hint("you hid the padded queries (rows) instead of the padded keys (columns): the real "
                               "queries still read the padding. A padding mask (B, S_kv) hides keys: spread it over "
                               "the rows with mask[:, None, :], not mask[:, :, None].")
            if mask is not None and bool(got.isnan().any()):
                raise Hint("NaN in the output: a row of scores that is all -inf gives NaN. A padding mask (B, S_kv) "
                           "hides keys, the columns: spread it over the rows with mask[:, None, :], not "
                           "mask[:, :, None], which hides whole query rows.")
            raise Hint(f"{what} the output is off by up to {(got - expected).abs().max().item():.3g}. Check each "
                       "step against the notebook: split [q | k | v], q @ kᵀ / √HS, softmax over the last axis, "
                       "@ v, Wo.")
    return "your seven steps equal SingleHeadAttention, with and without a padding mask."


@grader("02.3")
def check_02_3(path) -> str:
    """`path(q, k, v, *, mask, bias, scale, dropout_p, is_causal)` returns (context, weights or None) like the
    explicit path of `attend`."""
    g = torch.Generator().manual_seed(7)
    B, S, S_kv, HS = 2, 3, 5, 4
    q = torch.randn(B, S, HS, generator=g)  # (B, S, HS)
    k, v = torch.randn(2, B, S_kv, HS, generator=g).unbind(0)  # each (B, S_kv, HS)
    blind = torch.ones(B, S, S_kv, dtype=torch.bool)  # (B, S, S_kv)
    blind[0, 2] = False  # query 2 of sequence 0 sees nothing
    bias = -0.5 * torch.arange(S_kv, 0, -1.0).expand(S, S_kv)  # (S, S_kv): an ALiBi-like penalty
    cases = [
        ("no mask", {}),
        ("a padding mask (B, 1, S_kv)", {"mask": padding_mask([5, 2])[:, None, :]}),
        ("a query that sees no key", {"mask": blind}),
        ("is_causal=True, S=3 queries after S_kv=5 keys", {"is_causal": True}),
        ("a padding mask and is_causal=True", {"mask": padding_mask([4, 5])[:, None, :], "is_causal": True}),
        ("a bias", {"bias": bias}),
        ("scale=0.25", {"scale": 0.25}),
    ]
    for what, case in cases:
        args = {"mask": None, "bias": None, "scale": None, "dropout_p": 0.0, "is_causal": False} | case
        answer = path(q.clone(), k.clone(), v.clone(), **{n: a.clone() if torch.is_tensor(a) else a
                                                          for n, a in args.items()})
        if not isinstance(answer, tuple | list) or len(answer) != 2:
            raise Hint("a path returns a pair (context, weights or None).")
        context = expect_tensor(answer[0], f"the context with {what}")
        expected, expected_w = explicit_attention(q, k, v, args["mask"], 0.0, args["is_causal"], bias=args["bias"],
                                                  scale=args["scale"])  # (B, S, HS), (B, S, S_kv)
        if bool(context.isnan().any()):
            raise Hint(f"NaN in the context with {what}: a query that sees no key must get zero weights and a zero "
                       "context (give its row finite scores before the softmax, then zero its weights).")
        mask = args["mask"]
        if args["is_causal"]:
            top_left = torch.ones(1, S, S_kv, dtype=torch.bool).tril()  # (1, S, S_kv): the triangle from the first key
            if torch.allclose(context, explicit_attention(q, k, v, top_left if mask is None else mask & top_left)[0],
                              atol=1e-5):
                raise Hint("with S_kv > S the S queries are the last S positions: query i sees keys 0..S_kv - S + i, "
                           "tril(diagonal=S_kv - S), not tril().")
            if torch.allclose(context, explicit_attention(q, k, v, mask)[0], atol=1e-5):
                raise Hint("is_causal=True must hide the future: query i may see keys 0..S_kv - S + i only (AND the "
                           "mask).")
        if mask is not None and torch.allclose(context, explicit_attention(q, k, v, None, 0.0, args["is_causal"])[0],
                                               atol=1e-5):
            raise Hint(f"the context with {what} is the one without the mask: hide the keys where the mask is False.")
        if mask is not None and torch.allclose(context, explicit_attention(q, k, v, ~mask, 0.0, args["is_causal"])[0],
                                               atol=1e-5):
            raise Hint("True must mean 'may attend': you hid the visible keys.")
        if "bias" in case and torch.allclose(context, explicit_attention(q, k, v)[0], atol=1e-5):
            raise Hint("the bias is added to the scores, after the scaling and before the softmax.")
        if "scale" in case and torch.allclose(context, explicit_attention(q, k, v)[0], atol=1e-5):
            raise Hint("scale=None means 1/√HS; any other scale multiplies q kᵀ instead.")
        expect_close(context, expected, f"the context with {what}", atol=1e-5,
                     why="Compare your scores, weights and context with explicit_attention step by step.")
        if answer[1] is not None:
            expect_close(answer[1], expected_w, f"the weights with {what}", atol=1e-5,
                         why="The weights are the softmax over the keys, (B, S, S_kv), before any dropout.")
    name = "exercise-02.3"
    register_attention_impl(name, path)
    try:  # the path works inside a layer
        layer = SingleHeadAttention(8)
        x = torch.randn(B, S, 8, generator=g)  # (B, S, C)
        layer.attn_impl = name
        mine = layer(x, padding_mask([3, 2]))  # (B, S, C)
        layer.attn_impl = "explicit"
        expect_close(mine, layer(x, padding_mask([3, 2])), "SingleHeadAttention's output on your path", atol=1e-5)
        expect_shape(attend(q, k, v, mask=causal_mask(S, S_kv), impl=name)[0], (B, S, HS),
                     "attend's context on your path")
    finally:
        functional._ATTENTION_IMPLS.pop(name, None)
    return ("your path follows the contract (mask, bias, scale, the causal rule at the end of the keys, zeros for a "
            "blind query) and runs inside a layer.")
