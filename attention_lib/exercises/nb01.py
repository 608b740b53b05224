"""Graders for the exercises of notebook 01 (single-head attention: the weights)."""

from __future__ import annotations

import math
import numbers

import torch
from torch import Tensor, nn

from ._grading import Hint, call, close, detached, dtype, expect_tensor, fmt, grader

__all__ = ["check_01_1", "check_01_2", "check_01_3", "SENTENCE", "EMBEDDINGS"]

SENTENCE = ["the", "bank", "of", "the", "river"]
# features: water, money, place, function word (the embeddings of notebook 01)
EMBEDDINGS = torch.tensor([[0, 0, 0, 1], [0, 1, 1, 0], [0, 0, 0, 1], [0, 0, 0, 1], [1, 0, 1, 0]]).float()  # (S, C)


def _count(C: int, bias: bool) -> int:
    """Parameters of nn.Linear(C, 3 * HS) and nn.Linear(HS, C), counted from the modules themselves."""
    HS = C // 4
    layers = (nn.Linear(C, 3 * HS, bias=bias, device="meta"), nn.Linear(HS, C, bias=bias, device="meta"))
    return sum(p.numel() for layer in layers for p in layer.parameters())


def _formula(C: int, HS: float, bias: bool) -> float:
    """The count for a head of width HS (the right one is C // 4): Wqkv C x 3HS (+ 3HS), Wo HS x C (+ C)."""
    return 4 * C * HS + (3 * HS + C if bias else 0)


@grader("01.1")
def check_01_1(n_params) -> str:
    """`n_params(C, bias)` is the number of parameters of single-head attention with HS = C // 4.

    A count is an int (a bool is not); a float is accepted when it is a whole number (272.0), since the exercise
    asks for the number, not its type."""
    # C % 4 != 0 in 10, 7 and 13, so that C / 4 and rounding up show; C = 4 gives the narrowest head, HS = 1
    for C in (16, 10, 768, 4, 7, 13):
        HS = C // 4
        for bias in (False, True):
            expected = _count(C, bias)
            got = call(n_params, C, bias)
            where = f"for C = {C}, bias = {bias} you return {got!r}, the layer has {expected}"
            if isinstance(got, bool) or not isinstance(got, numbers.Integral | float):
                raise Hint(f"for C = {C}, bias = {bias} you return {got!r} of type {type(got).__name__}: a number of "
                           "parameters is an int, computed with Python arithmetic on C (a float is accepted only "
                           "when it is a whole number, such as 272.0).")
            if isinstance(got, float):
                if not got.is_integer():
                    raise Hint(f"{where}: a number of parameters is a whole number. The head size is C // 4 "
                               f"(rounded down: {C} // 4 = {HS}), not C / 4.")
                got = int(got)  # a whole float is accepted: the count is right or wrong as a number
            if got == expected:
                continue
            if got == _formula(C, C, bias):
                raise Hint(f"{where}: you used a head as wide as the token. A single head is HS = C // 4 = {HS} wide.")
            if not bias and got == _count(C, True):
                raise Hint(f"{where}: with bias=False the two layers have no biases, but you counted them. Add "
                           "3 * HS + C only when bias is True.")
            if bias and got == _count(C, False):
                raise Hint(f"{where}: you forgot the biases. Wqkv has one per output (3 * HS = {3 * HS}) and Wo "
                           f"one per output (C = {C}).")
            if bias and got == _count(C, False) + 4 * HS:
                raise Hint(f"{where}: Wo maps HS -> C, so its bias has C = {C} numbers, not HS = {HS}.")
            if got == 3 * C * HS + (3 * HS if bias else 0):
                raise Hint(f"{where}: you counted Wqkv only. Wo, the output projection HS -> C, has {HS} x {C} "
                           f"weights{' and C biases' if bias else ''} too.")
            for head in (C / 4, math.ceil(C / 4), round(C / 4)):
                if head != HS and got == _formula(C, head, bias):
                    raise Hint(f"{where}: you used a head of width {head:g}. The head size is C // 4, rounded down "
                               f"({C} // 4 = {HS}), not C / 4 or C / 4 rounded up.")
            raise Hint(f"{where}. Count Wqkv (a {C} x {3 * HS} matrix{' and 3 * HS biases' if bias else ''}) and Wo "
                       f"(a {HS} x {C} matrix{' and C biases' if bias else ''}).")
    return "4·C·HS weights, plus 3·HS + C biases when bias=True, with HS = C // 4."


def _three(C: int, HS: int, bias: bool, seed: int) -> list[nn.Linear]:
    """Three nn.Linear(C, HS) in dtype(), with random weights (and biases) from `seed`."""
    g = torch.Generator().manual_seed(seed)
    layers = [nn.Linear(C, HS, bias=bias, dtype=dtype()) for _ in range(3)]
    with torch.no_grad():
        for layer in layers:
            layer.weight.copy_(torch.randn(HS, C, generator=g, dtype=dtype()))
            if bias:
                layer.bias.copy_(torch.randn(HS, generator=g, dtype=dtype()))
    return layers


@grader("01.2")
def check_01_2(fuse) -> str:
    """`fuse(W_q, W_k, W_v)` returns one nn.Linear(C, 3 * HS) computing [W_q(x) | W_k(x) | W_v(x)]."""
    g = torch.Generator().manual_seed(1)
    # (B, S, C, HS), no two alike and 3 * HS != C, so that a transposed or misplaced axis shows
    for (B, S, C, HS), bias in [((2, 4, 6, 3), True), ((2, 4, 6, 3), False), ((3, 2, 5, 7), True),
                                ((3, 2, 5, 7), False)]:
        W_q, W_k, W_v = _three(C, HS, bias, seed=2 + HS + bias)
        x = torch.randn(B, S, C, generator=g, dtype=dtype())  # (B, S, C)
        # the reference, from copies, before the answer runs
        refs = [detached(W) for W in (W_q, W_k, W_v)]
        with torch.no_grad():
            parts = [W(x) for W in refs]  # 3 x (B, S, HS)
        expected = torch.cat(parts, dim=-1)  # (B, S, 3 * HS)
        weight = torch.cat([W.weight.detach() for W in refs])  # (3 * HS, C)
        what = f"with three nn.Linear({C}, {HS}{', bias=False' if not bias else ''})"

        fused = call(fuse, W_q, W_k, W_v)
        if isinstance(fused, Tensor):
            shape = "" if fused.is_nested else f" of shape {tuple(fused.shape)}"  # a nested tensor has no shape
            raise Hint(f"fuse returned a tensor{shape}; return the layer itself, an "
                       "nn.Linear(C, 3 * HS) whose weight holds the three weights (and whose bias holds the biases).")
        if not isinstance(fused, nn.Linear):
            raise Hint(f"fuse should return an nn.Linear, got {type(fused).__name__}.")
        w = expect_tensor(fused.weight, "the fused layer's weight")
        if tuple(w.shape) == (C, 3 * HS):
            raise Hint(f"{what} the fused weight has shape {tuple(w.shape)} = (C, 3 * HS): that is the matrix of "
                       "x @ W, transposed. nn.Linear stores its weight as (out_features, in_features) = (3 * HS, C) "
                       f"= {(3 * HS, C)}: stack the three weights along dim 0, without transposing them.")
        if tuple(w.shape) != (3 * HS, C):
            raise Hint(f"{what} the fused weight should have shape (out_features, in_features) = (3 * HS, C) = "
                       f"{(3 * HS, C)}, got {tuple(w.shape)}. nn.Linear stores its weight as "
                       "(out_features, in_features): stack the three weights along dim 0.")
        if (fused.in_features, fused.out_features) != (C, 3 * HS):
            raise Hint(f"{what} your layer computes with a ({3 * HS}, {C}) weight but says it is "
                       f"nn.Linear(in_features={fused.in_features}, out_features={fused.out_features}) (print it): "
                       f"create it as nn.Linear(C, 3 * HS) = nn.Linear({C}, {3 * HS}) rather than reusing a layer "
                       "of width HS.")
        with torch.no_grad():
            got = call(fused, x.to(w.dtype))  # in the layer's own dtype: a float32 layer is a right answer too
        if close(got, expected):
            continue
        got = expect_tensor(got, "the fused layer's output").detach()
        for order in ((1, 0, 2), (0, 2, 1), (2, 1, 0), (1, 2, 0), (2, 0, 1)):
            if close(got, torch.cat([parts[i] for i in order], dim=-1)):
                names = "".join("qkv"[i] for i in order)
                raise Hint(f"the three parts are in the order [{' | '.join(names)}]; the layout is [q | k | v], "
                           "W_q's rows first, then W_k's, then W_v's.")
        if close(got, torch.stack(parts, dim=-1).flatten(-2)):
            raise Hint("the rows of the three weights are interleaved (q's row 0, k's row 0, v's row 0, q's row 1, "
                       "...): torch.stack(..., dim=1) then a reshape does that. Each part must keep its rows "
                       "together: torch.cat([W_q.weight, W_k.weight, W_v.weight], dim=0).")
        weight_right = close(w.detach(), weight)
        if bias:
            no_bias = torch.cat([p - W.bias.detach() for p, W in zip(parts, refs, strict=True)], dim=-1)
            if fused.bias is None or close(got, no_bias):
                raise Hint(f"{what} the outputs are off by the biases: the fused bias is the three biases "
                           "concatenated, torch.cat([W_q.bias, W_k.bias, W_v.bias]).")
            fused_bias = fused.bias.detach()  # (3 * HS,) when it has the right shape
            for order in ((1, 0, 2), (0, 2, 1), (2, 1, 0), (1, 2, 0), (2, 0, 1)):
                if weight_right and close(fused_bias, torch.cat([refs[i].bias.detach() for i in order])):
                    names = "".join("qkv"[i] for i in order)
                    raise Hint(f"{what} the weight is right, but the biases are in the order [{' | '.join(names)}]: "
                               "the bias is laid out like the weight's rows, [q | k | v], "
                               "torch.cat([W_q.bias, W_k.bias, W_v.bias]).")
            if weight_right:
                raise Hint(f"{what} the weight is right, the bias is not (yours: {fmt(fused.bias[:4])}...): "
                           "nn.Linear starts with a random bias, so copy the three biases into it too, "
                           "torch.cat([W_q.bias, W_k.bias, W_v.bias]), laid out [q | k | v].")
        elif fused.bias is not None and weight_right:
            raise Hint(f"{what} the fused layer has a bias ({fmt(fused.bias[:4])}...): nn.Linear starts with a "
                       "random one. The three layers have none, so the fused layer must have none either "
                       "(bias=W_q.bias is not None) or a zero one.")
        raise Hint(f"{what} the fused output differs from [W_q(x) | W_k(x) | W_v(x)]. Build the weight with "
                   "torch.cat([W_q.weight, W_k.weight, W_v.weight], dim=0).")
    return "one nn.Linear(C, 3 * HS) with the three weights stacked along the output rows, [q | k | v]."


@grader("01.3")
def check_01_3(projections) -> str:
    """`projections()` returns (W_Q, W_K), (4, 4) each, so that bank -> river and river -> bank weigh >= 0.8."""
    answer = call(projections)
    if not isinstance(answer, tuple | list) or len(answer) != 2:
        raise Hint("projections() should return a pair (W_Q, W_K).")
    if all(isinstance(W, nn.Linear) for W in answer):
        raise Hint("projections() should return the two (C, d) matrices, not nn.Linear layers: the weight of an "
                   "nn.Linear is the matrix transposed. Return W_Q and W_K as tensors, used as X @ W_Q.")
    W_Q, W_K = (expect_tensor(W, name).detach().double() for W, name in zip(answer, ("W_Q", "W_K"), strict=True))
    for W, name in ((W_Q, "W_Q"), (W_K, "W_K")):
        if tuple(W.shape) != (4, 4):
            raise Hint(f"{name} should be (C, d) = (4, 4): rows for the 4 features of an embedding, got "
                       f"{tuple(W.shape)}.")
    X = EMBEDDINGS.double()  # (S, C)

    def weights_of(W_Q: Tensor, W_K: Tensor) -> Tensor:
        return ((X @ W_Q) @ (X @ W_K).T / math.sqrt(4)).softmax(dim=-1)  # (S, S_kv)

    weights = weights_of(W_Q, W_K)
    if bool(weights.isnan().any()):
        raise Hint("your matrices give NaN weights: use finite numbers (an inf times the 0 of a feature a token "
                   "lacks is NaN); a few units are enough.")
    bank, river = SENTENCE.index("bank"), SENTENCE.index("river")
    q, k = X @ W_Q, X @ W_K  # (S, d) each
    for i, j in ((bank, river), (river, bank)):
        if weights[i, j] >= 0.8:
            continue
        transposed = weights_of(W_Q.T, W_K.T)
        if bool(transposed[bank, river] >= 0.8) and bool(transposed[river, bank] >= 0.8):
            raise Hint("your matrices work once transposed: projections() returns the (C, d) matrices of "
                       "q = X @ W_Q, row = feature of the token, column = a direction of the query; not the "
                       "(d, C) weight of an nn.Linear.")
        row = ", ".join(f"{t} {w:.2f}" for t, w in zip(SENTENCE, weights[i].tolist(), strict=True))
        told = (f"'{SENTENCE[i]}' gives '{SENTENCE[j]}' only {weights[i, j]:.2f} (its row: {row}). Its query is "
                f"x_{SENTENCE[i]} @ W_Q = {fmt(q[i])} and the key of '{SENTENCE[j]}' is {fmt(k[j])}")
        own, other = float(q[i] @ k[i]), float(q[i] @ k[j])
        if own > 0 and own >= other:  # its query matches its own key as well as the one it looks for
            raise Hint(f"{told}: it looks at itself at least as much, because its query also matches its own key "
                       f"{fmt(k[i])} (score {own / 2:.3g} against {other / 2:.3g}). Matrices that copy a token's "
                       "features into both its query and its key (W_Q = W_K = I) do this, and so do two rules that "
                       "meet in the same column (bank's question finds bank's own answer): give each rule a column "
                       "of its own.")
        raise Hint(f"{told}: make their dot product large, and the other dot products of the row small.")
    return (f"bank -> river {weights[bank, river]:.3f}, river -> bank {weights[river, bank]:.3f}: two rules, each "
            "in its own column of W_Q and W_K.")
