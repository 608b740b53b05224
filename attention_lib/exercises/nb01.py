"""Graders for the exercises of notebook 01 (single-head attention: the weights)."""

from __future__ import annotations

import math

import torch
from torch import nn

from ._grading import Hint, expect_tensor, grader

__all__ = ["check_01_1", "check_01_2", "check_01_3", "SENTENCE", "EMBEDDINGS"]

SENTENCE = ["the", "bank", "of", "the", "river"]
# features: water, money, place, function word (the embeddings of notebook 01)
EMBEDDINGS = torch.tensor([[0, 0, 0, 1], [0, 1, 1, 0], [0, 0, 0, 1], [0, 0, 0, 1], [1, 0, 1, 0]]).float()  # (S, C)


def _count(C: int, bias: bool) -> int:
    """Parameters of nn.Linear(C, 3 * HS) and nn.Linear(HS, C), counted from the modules themselves."""
    HS = C // 4
    layers = (nn.Linear(C, 3 * HS, bias=bias, device="meta"), nn.Linear(HS, C, bias=bias, device="meta"))
    return sum(p.numel() for layer in layers for p in layer.parameters())


@grader("01.1")
def check_01_1(n_params) -> str:
    """`n_params(C, bias)` is the number of parameters of single-head attention with HS = C // 4."""
    for C in (16, 10, 768, 4, 7):
        HS = C // 4
        for bias in (False, True):
            got, expected = n_params(C, bias), _count(C, bias)
            if isinstance(got, float) and got.is_integer():
                got = int(got)
            if got == expected:
                continue
            where = f"for C = {C}, bias = {bias} you return {got!r}, the layer has {expected}"
            if not isinstance(got, int):
                raise Hint(f"{where}: a number of parameters is a whole number. The head size is C // 4 "
                           f"(rounded down: {C} // 4 = {HS}), not C / 4.")
            if got == 4 * C * C + (4 * C if bias else 0):
                raise Hint(f"{where}: you used a head as wide as the token. A single head is HS = C // 4 = {HS} wide.")
            if bias and got == _count(C, False):
                raise Hint(f"{where}: you forgot the biases. Wqkv has one per output (3 * HS = {3 * HS}) and Wo "
                           f"one per output (C = {C}).")
            if bias and got == _count(C, False) + 4 * HS:
                raise Hint(f"{where}: Wo maps HS -> C, so its bias has C = {C} numbers, not HS = {HS}.")
            if got == 4 * C * (C / 4) + (3 * C / 4 + C if bias else 0):
                raise Hint(f"{where}: the head size is C // 4 (rounded down: {C} // 4 = {HS}), not C / 4.")
            raise Hint(f"{where}. Count Wqkv (a {C} x {3 * HS} matrix{' and 3 * HS biases' if bias else ''}) and Wo "
                       f"(a {HS} x {C} matrix{' and C biases' if bias else ''}).")
    return "4·C·HS weights, plus 3·HS + C biases when bias=True, with HS = C // 4."


def _three(C: int, HS: int, bias: bool, seed: int) -> list[nn.Linear]:
    g = torch.Generator().manual_seed(seed)
    layers = [nn.Linear(C, HS, bias=bias) for _ in range(3)]
    with torch.no_grad():
        for layer in layers:
            layer.weight.copy_(torch.randn(HS, C, generator=g))
            if bias:
                layer.bias.copy_(torch.randn(HS, generator=g))
    return layers


@grader("01.2")
def check_01_2(fuse) -> str:
    """`fuse(W_q, W_k, W_v)` returns one nn.Linear(C, 3 * HS) computing [W_q(x) | W_k(x) | W_v(x)]."""
    C, HS = 6, 3
    x = torch.randn(2, 4, C, generator=torch.Generator().manual_seed(1))  # (B, S, C)
    for bias in (True, False):
        W_q, W_k, W_v = _three(C, HS, bias, seed=2 + bias)
        fused = fuse(W_q, W_k, W_v)
        if not isinstance(fused, nn.Linear):
            raise Hint(f"fuse should return an nn.Linear, got {type(fused).__name__}.")
        if tuple(fused.weight.shape) != (3 * HS, C):
            raise Hint(f"the fused weight should have shape (out_features, in_features) = (3 * HS, C) = "
                       f"{(3 * HS, C)}, got {tuple(fused.weight.shape)}. nn.Linear stores its weight as "
                       "(out_features, in_features): stack the three weights along dim 0.")
        with torch.no_grad():
            got = fused(x)  # (B, S, 3 * HS)
            parts = [W(x) for W in (W_q, W_k, W_v)]  # 3 x (B, S, HS)
        expected = torch.cat(parts, dim=-1)  # (B, S, 3 * HS)
        if torch.allclose(got, expected, atol=1e-5):
            continue
        for order in ((1, 0, 2), (0, 2, 1), (2, 1, 0), (1, 2, 0), (2, 0, 1)):
            if torch.allclose(got, torch.cat([parts[i] for i in order], dim=-1), atol=1e-5):
                raise Hint("the three parts are in the wrong order: the layout is [q | k | v], W_q's rows first.")
        weight_right = torch.allclose(fused.weight, torch.cat([W_q.weight, W_k.weight, W_v.weight]), atol=1e-6)
        if bias:
            no_bias = torch.cat([p - W.bias for p, W in zip(parts, (W_q, W_k, W_v), strict=True)], dim=-1)
            if torch.allclose(got, no_bias, atol=1e-5) or fused.bias is None:
                raise Hint("the outputs are off by the biases: the fused bias is the three biases concatenated, "
                           "torch.cat([W_q.bias, W_k.bias, W_v.bias]).")
            if weight_right:
                raise Hint("the weight is right, the bias is not: nn.Linear starts with a random bias, so copy the "
                           "three biases into it too, torch.cat([W_q.bias, W_k.bias, W_v.bias]), laid out [q | k | v].")
        elif fused.bias is not None and not torch.allclose(got, expected, atol=1e-5):
            raise Hint("the three layers have no bias, so the fused layer must have none either (bias=False) or "
                       "a zero one.")
        raise Hint(f"{'with' if bias else 'without'} biases the fused output differs from [W_q(x) | W_k(x) | "
                   "W_v(x)]. Build the weight with torch.cat([W_q.weight, W_k.weight, W_v.weight], dim=0).")
    return "one nn.Linear(C, 3 * HS) with the three weights stacked along the output rows, [q | k | v]."


@grader("01.3")
def check_01_3(projections) -> str:
    """`projections()` returns (W_Q, W_K), (4, 4) each, so that bank -> river and river -> bank weigh >= 0.8."""
    answer = projections()
    if not isinstance(answer, tuple | list) or len(answer) != 2:
        raise Hint("projections() should return a pair (W_Q, W_K).")
    W_Q, W_K = (expect_tensor(W, name).float() for W, name in zip(answer, ("W_Q", "W_K"), strict=True))
    for W, name in ((W_Q, "W_Q"), (W_K, "W_K")):
        if tuple(W.shape) != (4, 4):
            raise Hint(f"{name} should be (C, d) = (4, 4): rows for the 4 features of an embedding, got "
                       f"{tuple(W.shape)}.")
    q, k = EMBEDDINGS @ W_Q, EMBEDDINGS @ W_K  # (S, d) each
    weights = (q @ k.T / math.sqrt(4)).softmax(dim=-1)  # (S, S_kv)
    if bool(weights.isnan().any()):
        raise Hint("your matrices give NaN weights: use finite numbers.")
    bank, river = SENTENCE.index("bank"), SENTENCE.index("river")
    for i, j in ((bank, river), (river, bank)):
        if weights[i, j] < 0.8:
            row = ", ".join(f"{t} {w:.2f}" for t, w in zip(SENTENCE, weights[i].tolist(), strict=True))
            raise Hint(f"'{SENTENCE[i]}' gives '{SENTENCE[j]}' only {weights[i, j]:.2f} (its row: {row}). Its "
                       f"query is x_{SENTENCE[i]} @ W_Q = {q[i].tolist()} and the key of '{SENTENCE[j]}' is "
                       f"{k[j].tolist()}: make their dot product large, and the other dot products of the row small.")
    return (f"bank -> river {weights[bank, river]:.3f}, river -> bank {weights[river, bank]:.3f}: two rules, each "
            "in its own column of W_Q and W_K.")
