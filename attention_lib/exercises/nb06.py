"""Graders of notebook 06 (seeing attention): a head's previous-token score, a mask read off a picture, row entropy."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ._grading import (Hint, call, close, dtype, expect_close, expect_equal, expect_precision, expect_shape,
                       expect_tensor, fmt, grader)

__all__ = ["check_06_1", "check_06_2", "check_06_3"]


def _weights(NH: int, S: int, S_kv: int, g: torch.Generator, spread: float = 2.0) -> Tensor:
    """Random attention weights (NH, S, S_kv) in the grader's dtype: every row a probability distribution."""
    return (spread * torch.randn(NH, S, S_kv, generator=g, dtype=torch.float64)).softmax(-1).to(dtype())


# --- 06.1: the previous-token head ----------------------------------------------------------------------------------


@grader("06.1")
def check_06_1(previous_token_score) -> str:
    """`previous_token_score(weights (NH, S, S))` -> (NH,): the mean over i = 1..S-1 of weights[h, i, i - 1]."""
    g = torch.Generator().manual_seed(61)
    # no two sizes alike (NH, S and S - 1 differ): random heads with a built previous-token head; S = 2, where one
    # query has a previous token; causal weights with left padding, whose padded queries have zero rows
    first = _weights(4, 6, 6, g)
    first[2] = 0
    first[2, range(1, 6), range(5)] = 1  # head 2 reads exactly the previous token
    first[2, 0, 0] = 1  # (the first token has none: it reads itself)
    causal = _weights(5, 8, 8, g).tril()  # (NH, S, S): query i keeps keys 0..i
    causal[:, :, :2] = 0  # two [PAD] keys on the left
    causal = causal / causal.sum(-1, keepdim=True).clamp_min(1e-30)  # the padded queries' rows stay zero
    for weights in (first, _weights(3, 2, 2, g), causal):
        NH, S, _ = weights.shape
        below = weights.double().diagonal(offset=-1, dim1=-2, dim2=-1)  # (NH, S - 1): w[h, i, i - 1]
        expected = below.mean(-1)  # (NH,), before the answer runs
        what = f"previous_token_score(weights) for weights {tuple(weights.shape)}"
        got = expect_tensor(call(previous_token_score, weights.clone()), what)  # the grader keeps `weights` intact
        if tuple(got.shape) == (S,) and close(got, weights.double().diagonal(-1).mean(-1)):
            raise Hint(f"for weights (NH, S, S) = {tuple(weights.shape)} you returned shape ({S},): "
                       "weights.diagonal(-1) takes the diagonal of the first two axes (heads and queries) by default. "
                       "Pass the axes of queries and keys: weights.diagonal(offset=-1, dim1=-2, dim2=-1).")
        if tuple(got.shape) == (S - 1,):
            raise Hint(f"for weights (NH, S, S) = {tuple(weights.shape)} you returned shape ({S - 1},), one number "
                       f"per query: you averaged over the heads. Average each head's S - 1 = {S - 1} weights "
                       "w[h, i, i - 1] over i instead, one score per head: shape (NH,).")
        expect_shape(got, (NH,), f"{what} (one score per head)")
        if close(got, expected):
            continue
        w = weights.double()
        mistakes = [
            ("you measured the weight on the NEXT token, w[i, i+1]. The previous token is w[i, i-1]: the diagonal "
             "just below the main one, weights.diagonal(offset=-1, dim1=-2, dim2=-1).",
             w.diagonal(offset=1, dim1=-2, dim2=-1).mean(-1)),
            ("you measured the weight of each token on itself (the main diagonal); the previous token is one column "
             "to the left, w[i, i-1].", w.diagonal(dim1=-2, dim2=-1).mean(-1)),
            (f"for i = 0, i - 1 = -1 indexes the LAST key (Python counts negative indices from the end), so "
             f"w[h, 0, {S - 1}] joined the mean. The first token has no previous token: average over "
             "i = 1 .. S - 1 only.", (below.sum(-1) + w[:, 0, -1]) / S),
            (f"you divided by S = {S}, but only the S - 1 = {S - 1} queries after the first one have a previous "
             "token: take the mean over those.", below.sum(-1) / S),
            (f"you summed the weights w[h, i, i - 1]; the score is their mean over the S - 1 = {S - 1} queries "
             "that have a previous token.", below.sum(-1)),
        ]
        for hint, mistake in mistakes:
            if not close(mistake, expected) and close(got, mistake):
                raise Hint(hint)
        expect_close(got, expected, what, why=f"The scores should be {fmt(expected)}, got {fmt(got)}: the mean of "
                     "weights[h, i, i - 1] over i = 1 .. S - 1, for each head h.")
    return "your score finds the previous-token head (try it: previous_token_score(reference[0]).argmax())."


# --- 06.2: a mask read off a picture --------------------------------------------------------------------------------


@grader("06.2")
def check_06_2(mask_of) -> str:
    """`mask_of(S, pad)` -> (S, S) bool: causal AND the first `pad` keys hidden (left padding)."""
    # the picture's case and a larger one first; no padding; S = 1; every token a [PAD]; one real token after one [PAD]
    for S, pad in ((6, 2), (7, 3), (5, 0), (1, 0), (3, 3), (2, 1)):
        what = f"mask_of({S}, {pad})"
        got = expect_tensor(call(mask_of, S, pad), what)
        if got.dtype != torch.bool:
            raise Hint(f"{what} has dtype {got.dtype}; a mask is torch.bool, True = may attend (compare with <= and "
                       ">=, which give bools).")
        expect_shape(got, (S, S), f"{what} (queries, keys)")
        i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]  # (S, 1) query rows, (1, S) key columns
        expected = (j <= i) & (j >= pad)  # (S, S)
        if torch.equal(got, expected):
            continue
        if torch.equal(got, ~expected):  # before the rules below: an inverted mask breaks every one of them
            raise Hint(f"{what} is the picture's mask inverted: True means 'may attend' (the green cells), False "
                       "hidden (the grey ones), as everywhere in the series. Drop the ~ (or swap the comparisons).")
        if torch.equal(got, expected.T):
            raise Hint(f"{what} is the picture's mask transposed: rows are the queries (i), columns the keys (j). A "
                       "key j is visible to query i when j <= i and j >= pad.")
        if torch.equal(got, (j <= i) | (j >= pad)):
            raise Hint(f"{what} combines the two rules with | (OR): a key is visible when it is in the query's past "
                       "AND not padding, (j <= i) & (j >= pad).")
        if bool((got & (j > i)).any()):
            raise Hint(f"in {what} a query may attend to keys after it (j > i): in the picture the upper right "
                       "triangle is grey. Keep j <= i, the lower triangle.")
        if torch.equal(got, (j <= i) & (j < S - pad)):
            raise Hint(f"{what} hides the last {pad} keys: the [PAD] tokens in the picture are on the left, so the "
                       "first `pad` keys (j < pad) are the hidden ones.")
        if torch.equal(got, (j < i) & (j >= pad)):
            raise Hint(f"in {what} no token sees itself: the diagonal j == i is green in the picture, a token may "
                       "attend to itself (j <= i, not j < i).")
        if torch.equal(got, (j <= i) & (j > pad)):
            raise Hint(f"{what} hides {pad + 1} keys: key j = {pad} is the first real token, visible (j >= pad, "
                       "not j > pad).")
        if bool((got & (j < pad)).any()):
            raise Hint(f"in {what} some query may attend to a [PAD] key: the first {pad} columns are grey for every "
                       "query.")
        rows = sorted({int(r) for r in (got != expected).nonzero()[:, 0]})  # the queries whose row is wrong
        expect_equal(got, expected, what, why=f"A key j is visible to query i when j <= i (causal) and j >= pad (not "
                     f"padding); the rows of queries {rows} differ from the picture's.")
    return "that is the causal mask with left padding, the AND of the triangle and the padding row, for any S and pad."


# --- 06.3: row entropy ----------------------------------------------------------------------------------------------


_EPS = (1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 1e-10, 1e-12)  # the small numbers put inside a log, ln(w + eps)


def _digits(a: float, b: float) -> tuple[str, str]:
    """a and b rounded to the fewest significant digits (3 at least) that tell them apart, for a message."""
    for n in range(3, 17):
        shown = f"{a:#.{n}g}", f"{b:#.{n}g}"  # #: trailing zeros kept, so that both have n digits
        if shown[0] != shown[1]:
            return shown
    return shown


@grader("06.3")
def check_06_3(row_entropy) -> str:
    """`row_entropy(weights (NH, S, S_kv))` -> (NH, S): -sum_j w log w in nats, 0 for zero rows, never NaN."""
    g = torch.Generator().manual_seed(63)
    first = _weights(2, 4, 5, g).double()
    first[:, :, 4] = 0  # a hidden (padding) key
    first = first / first.sum(-1, keepdim=True)
    first[:, 0] = 0  # a query that sees no key: a zero row
    first[1, 1] = torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0])  # a one-hot row: entropy 0
    extreme = _weights(4, 3, 7, g).double()
    extreme[0, 0] = 1 / 7  # a uniform row: entropy ln 7, the most a row of 7 keys has
    extreme[1, 2] = torch.tensor([1 - 6e-30, 1e-30, 1e-30, 1e-30, 1e-30, 1e-30, 1e-30])  # nearly one-hot
    extreme[3, 1] = torch.tensor([0.5, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0])  # ln 2
    single = _weights(3, 1, 6, g).double()  # S = 1: one query per head
    single[1] = 0  # and its row empty in head 1
    many = _weights(2, 3, 4096, g, spread=0.1).double()  # a long context, nearly uniform: every weight about 2e-4,
    # so that ln(w + eps) drifts by S_kv · eps, beyond float32's tolerance for eps = 1e-6
    # no two sizes alike (NH, S, S_kv), S = 1, zero rows, hidden keys, one-hot, uniform, tiny and many weights
    for weights in (first.to(dtype()), extreme.to(dtype()), single.to(dtype()), many.to(dtype())):
        NH, S, S_kv = weights.shape
        w = weights.double()
        expected = -torch.special.xlogy(w, w).sum(-1) + 0.0  # (NH, S), before the answer runs (+ 0.0: no -0)
        what = f"row_entropy(weights) for weights {tuple(weights.shape)}"
        try:
            got = expect_tensor(call(row_entropy, weights.clone()), what)
        except Exception as raised:  # only the learner's own refusal by torch.distributions gets this hint
            error = getattr(raised, "error", None)
            if not (isinstance(error, ValueError) and "Simplex" in str(error)):
                raise
            raise Hint("torch.distributions.Categorical(probs=w) refuses these weights: a query that sees no key has "
                       "a zero row, which is no distribution (and with validate_args=False it is divided by its sum, "
                       "0 / 0). Compute -sum w ln w yourself, counting w = 0 as 0: torch.special.xlogy(w, "
                       "w).") from None
        if tuple(got.shape) == (NH, S_kv):
            raise Hint(f"{what} has shape (NH, S_kv) = {(NH, S_kv)}: you summed over the queries (dim=-2). A row is "
                       "one query's weights over the keys: sum over the last axis, for shape (NH, S).")
        expect_shape(got, (NH, S), f"{what} (one value per head and query)")
        if close(got, expected):
            continue
        zero_rows = w.sum(-1) == 0  # (NH, S)
        if bool(got.isnan().any()):
            if bool(got[~zero_rows].isnan().any()):
                raise Hint("the entropy contains NaN in rows that see some key: a weight of 0 (a hidden key) gives "
                           "0 * log 0 = 0 * (-inf) = NaN in torch. A hidden key adds nothing: use "
                           "torch.special.xlogy(w, w), or w * w.clamp_min(1e-12).log().")
            raise Hint("a query that sees no key (a zero row) got NaN: its entropy is 0, there is nothing to spread. "
                       "Dividing a row by its sum gives 0 / 0 = NaN there: leave the weights as they are (each row "
                       "already sums to 1, or is all zero) and count w = 0 as 0.")
        # ln(w + eps) first, and only when the answer is much nearer to it than it is to the entropy: a computation
        # in float32 is off by rounding, which no shift by eps explains, and has the hint of expect_precision
        off = (got.detach().double() - expected).abs().max()  # (): how far the answer is from the entropy
        for eps in _EPS:
            shifted = -(w * (w + eps).log()).sum(-1)  # (NH, S)
            nearer = 10 * (got.detach().double() - shifted).abs().max() < off  # the shift explains the answer
            if not close(shifted, expected) and close(got, shifted) and nearer:
                raise Hint(f"you added a small number inside the log, ln(w + eps) with eps = {eps:g}: the term -w ln w "
                           f"of every visible key then shrinks by about eps, so a row of S_kv = {S_kv} keys is off by "
                           f"up to S_kv · eps = {S_kv * eps:.2g}. Count w = 0 as 0 exactly instead: "
                           "torch.special.xlogy(w, w), or torch.where(w > 0, w * w.log(), 0).")
        expect_precision(got, expected, what)
        mistakes = [
            ("the entropy is -sum w ln w, which is >= 0: you lost the minus sign.", -expected),
            ("that is the entropy in bits (log2); the exercise asks for nats, the natural log (torch.log).",
             expected / math.log(2)),
            (f"you averaged -w ln w over the keys: the entropy is their sum, over the S_kv = {S_kv} keys (the mean "
             f"divides it by {S_kv}).", expected / S_kv),
            (f"you divided the entropy by ln S_kv = ln {S_kv}, the normalised entropy; the exercise asks for the "
             "entropy itself, in nats.", expected / math.log(S_kv) if S_kv > 1 else expected),
        ]
        for hint, mistake in mistakes:
            if not close(mistake, expected) and close(got, mistake):
                raise Hint(hint)
        gap = (got.detach().double() - expected).abs().nan_to_num(math.inf)  # (NH, S)
        h, i = divmod(int(gap.argmax()), S)  # the worst entry
        want, have = _digits(float(expected[h, i]), float(got[h, i]))
        expect_close(got, expected, what, why=f"At the worst entry, head {h} and query {i}, the entropy is {want}, "
                     f"got {have}: sum -w ln w over the keys (the last axis), counting w = 0 as 0.")
    return ("zero rows and hidden keys give 0, one-hot rows 0, spread rows more (at most ln S_kv), also for S = 1 and "
            "4096 keys.")
