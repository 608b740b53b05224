"""Graders for the exercises of notebook 00 (attention, a recap)."""

from __future__ import annotations

import math
import warnings

import torch

from ..functional import masked_softmax
from ..masks import causal_mask, padding_mask
from ._grading import Hint, expect_shape, expect_tensor, grader

__all__ = ["check_00_1", "check_00_2", "check_00_3", "check_00_4", "LOAN_TOKENS", "LOAN_KEYS"]

LOAN_TOKENS = ["the", "bank", "gave", "a", "loan"]
# features: water, money, place, function word (the keys printed in the notebook)
LOAN_KEYS = torch.tensor([[0, 0, 0, 1], [0, 0, 2, 0], [0, 0, 0, 0], [0, 0, 0, 1], [0, 3, 0, 0]]).float()  # (S_kv, d)


@grader("00.1")
def check_00_1(bank_query) -> str:
    """`bank_query()` returns the query of "bank" (4 numbers); "bank" must give "loan" a weight of at least 0.9."""
    q = expect_tensor(bank_query(), "bank_query()")
    if tuple(q.shape) != (4,):
        raise Hint(f"the query of one token is 4 numbers (water, money, place, function word), shape (4,); "
                   f"got shape {tuple(q.shape)}.")
    scores = LOAN_KEYS @ q.float() / math.sqrt(4)  # (S_kv,)
    weights = scores.softmax(dim=-1)  # (S_kv,)
    loan = weights[4].item()
    if math.isnan(loan):
        raise Hint("your query gives NaN weights: use finite numbers.")
    if loan < 0.9:
        shown = ", ".join(f"{t} {w:.2f}" for t, w in zip(LOAN_TOKENS, weights.tolist(), strict=True))
        if float(weights.max() - weights.min()) < 1e-6:
            raise Hint(f"every key gets the same weight, {loan:.2f}: your query has the same dot product with every "
                       "key. The score with 'loan' is the dot product with loan's key [0, 3, 0, 0]: only the money "
                       "position counts.")
        if int(weights.argmax()) == 4:
            raise Hint(f"'loan' gets the largest weight but only {loan:.2f} (weights: {shown}). Each other key still "
                       "gets e^(its score); make the score of 'loan' larger by putting a bigger number where loan's "
                       "key [0, 3, 0, 0] is non-zero.")
        raise Hint(f"'bank' looks mostly at '{LOAN_TOKENS[int(weights.argmax())]}' (weights: {shown}). The score "
                   "with 'loan' is the dot product of your query with loan's key [0, 3, 0, 0]: only the money "
                   "position counts.")
    return f"'bank' gives 'loan' a weight of {loan:.3f} (scaled scores {[round(s, 2) for s in scores.tolist()]})."


def _attention(q, k, v, scale: float, dim: int = -1):
    return (q @ k.transpose(-2, -1) * scale).softmax(dim=dim) @ v


@grader("00.2")
def check_00_2(my_attention) -> str:
    """`my_attention(q, k, v)` returns softmax(q kᵀ / √d) v for q (..., S, d) and k, v (..., S_kv, d)."""
    g = torch.Generator().manual_seed(0)
    for shape_q, S_kv in [((2, 3, 16), 5), ((2, 2, 3, 4), 6)]:
        *lead, S, d = shape_q
        q = torch.randn(*shape_q, generator=g)  # (..., S, d)
        k, v = torch.randn(2, *lead, S_kv, d, generator=g).unbind(0)  # each (..., S_kv, d)
        try:
            with warnings.catch_warnings():  # k.T on a batch warns that it is deprecated: the hint says why
                warnings.simplefilter("ignore", UserWarning)
                got = my_attention(q.clone(), k.clone(), v.clone())
        except NotImplementedError:  # a RuntimeError too: the placeholder, "not attempted yet"
            raise
        except RuntimeError as err:
            raise Hint(f"for q {tuple(q.shape)} and k {tuple(k.shape)} your code raised RuntimeError: {err}. On "
                       "batched input k.T reverses all the axes of k, and a transpose of fixed axes such as "
                       "k.transpose(1, 2) fits one number of axes only: use k.transpose(-2, -1), which swaps the last "
                       "two axes whatever comes before them.") from None
        if isinstance(got, tuple):
            raise Hint("return only the context tensor (..., S, d), not a tuple.")
        got = expect_tensor(got, "my_attention(q, k, v)")
        if tuple(got.shape) != tuple(shape_q):
            raise Hint(f"for q {tuple(q.shape)} and k, v {tuple(k.shape)} the context has one row per query, "
                       f"(..., S, d) = {tuple(shape_q)}; got {tuple(got.shape)}. The scores are q @ kᵀ "
                       "(..., S, S_kv): transpose the last two axes of k with k.transpose(-2, -1).")
        expected = _attention(q, k, v, 1 / math.sqrt(d))  # (..., S, d)
        if torch.allclose(got, expected, atol=1e-5):
            continue
        if torch.allclose(got, _attention(q, k, v, 1.0), atol=1e-5):
            raise Hint(f"you forgot to scale the scores: divide q @ kᵀ by √d (here √{d} = {math.sqrt(d):g}) "
                       "before the softmax.")
        if torch.allclose(got, _attention(q, k, v, 1 / d), atol=1e-5):
            raise Hint(f"you divided the scores by d = {d}; the scale is 1/√d = 1/{math.sqrt(d):g}.")
        if torch.allclose(got, _attention(q, k, v, 1 / math.sqrt(d), dim=-2), atol=1e-5):
            raise Hint("the softmax runs over the wrong axis: it must run over the keys, the last axis (dim=-1), "
                       "so that each query's weights sum to 1.")
        worst = (got - expected).abs().max().item()
        raise Hint(f"for q of shape {tuple(q.shape)} the context is off by up to {worst:.3g}. Compare with "
                   "F.scaled_dot_product_attention(q, k, v) step by step.")
    return "your attention equals softmax(q kᵀ/√d) v, with any leading axes and S != S_kv."


@grader("00.3")
def check_00_3(decoder_mask) -> str:
    """`decoder_mask(lengths, S)` returns the (B, S, S) bool mask of causal attention with right padding."""
    for lengths, S in [([4, 2, 1], 5), ([1, 2, 3], 3)]:
        B = len(lengths)
        got = expect_tensor(decoder_mask(lengths, S), f"decoder_mask({lengths}, {S})")
        if got.dtype != torch.bool:
            raise Hint(f"a mask is a torch.bool tensor (True = may attend); got dtype {got.dtype}.")
        if tuple(got.shape) != (B, S, S):
            raise Hint(f"decoder_mask({lengths}, {S}) should have shape (B, S, S) = {(B, S, S)}: one S x S table "
                       f"per sentence; got {tuple(got.shape)}.")
        pad = padding_mask(lengths, seq_len=S)  # (B, S)
        expected = pad[:, None, :] & causal_mask(S)  # (B, S, S)
        real_rows = pad[:, :, None].expand(B, S, S)  # (B, S, S): rows of real queries
        # a padded query's row is never used: it may follow the rule of a real row or see nothing at all
        row_is_rule = (got == expected).all(dim=-1)  # (B, S)
        row_is_empty = ~got.any(dim=-1)  # (B, S)
        if bool((row_is_rule | (~pad & row_is_empty)).all()):
            continue
        if torch.equal(got, ~expected):
            raise Hint("your mask is the opposite of the convention: True must mean 'may attend' (a visible key), "
                       "not 'hidden'.")
        if bool((got & ~pad[:, None, :]).any()):
            raise Hint("a padded key is visible: padding hides the key columns of its sentence in every row "
                       "(mask[b, :, j] is False for a padded j). Combine padding and causality with & (AND), and "
                       "spread the padding over the rows with pad[:, None, :].")
        future = torch.ones(S, S, dtype=torch.bool).triu(diagonal=1)  # (S, S): j > i
        if bool((got & future).any()):
            raise Hint("a query sees a key in its future (j > i): query i may see keys 0..i only, the lower "
                       "triangle (torch.tril or causal_mask).")
        if not bool(got[real_rows & torch.eye(S, dtype=torch.bool)].all()):
            raise Hint("a real token must see itself: the diagonal (j == i) of the triangle is True.")
        if bool((got == expected)[real_rows].all()):
            raise Hint(f"for lengths {lengths} and S = {S} the rows of the real queries are right, but a padded "
                       "query's row is neither the rule of a real row (the past, real keys only) nor empty: pick one "
                       "of the two for every padded query.")
        raise Hint(f"for lengths {lengths} and S = {S} some real query misses a real key of its past. Print your "
                   "mask next to padding_mask(lengths, S)[:, None, :] & causal_mask(S).")
    return ("causal AND padding, True = may attend, one (S, S) table per sentence, also when B == S (the rows of "
            "padded queries are never used).")


@grader("00.4")
def check_00_4(my_masked_softmax) -> str:
    """`my_masked_softmax(scores, mask)`: hidden keys get 0, visible weights sum to 1, a blind row gets zeros."""
    g = torch.Generator().manual_seed(4)
    scores = 2 * torch.randn(2, 3, 4, generator=g)  # (B, S, S_kv)
    full = torch.rand(2, 3, 4, generator=g) > 0.4  # (B, S, S_kv)
    full[0, 1] = False  # a query that sees nothing
    full[1, 2] = True  # a query that sees everything
    padding = torch.tensor([[True, True, False, False], [True, True, True, False]])[:, None, :]  # (B, 1, S_kv)
    for mask, what in [(full, "a (B, S, S_kv) mask"), (padding, "a (B, 1, S_kv) padding mask")]:
        got = my_masked_softmax(scores.clone(), mask.clone())
        got = expect_shape(got, tuple(scores.shape), f"my_masked_softmax(scores, mask) with {what}")
        expected = masked_softmax(scores, mask)  # (B, S, S_kv)
        if torch.allclose(got, expected, atol=1e-6):
            continue
        blind = ~mask.expand_as(scores).any(dim=-1)  # (B, S): rows with no visible key
        if bool(got.isnan().any()):
            if bool(got[~blind].isnan().any()):
                raise Hint(f"NaN in a row that sees some key, with {what}.")
            raise Hint("a row with no visible key gives NaN: the softmax of a row of -inf is 0/0. Give such rows "
                       "finite scores before the softmax and set their weights to 0 after it.")
        if torch.allclose(got, masked_softmax(scores, ~mask), atol=1e-6):
            raise Hint("True must mean 'may attend': you hid the visible keys and kept the hidden ones.")
        hidden = ~mask.expand_as(scores)  # (B, S, S_kv)
        if not bool((got[hidden] == 0).all()):
            raise Hint(f"a hidden key (mask False) got a non-zero weight, with {what}: set its score to -inf before "
                       "the softmax (scores.masked_fill(~mask, float('-inf'))).")
        sums = got.sum(dim=-1)  # (B, S)
        if not torch.allclose(sums[~blind], torch.ones_like(sums[~blind]), atol=1e-5):
            raise Hint("the visible weights of a row must sum to 1: hide keys with -inf before the softmax rather "
                       "than zeroing weights after it.")
        if bool(blind.any()) and not bool((got[blind] == 0).all()):
            raise Hint("a row with no visible key must get zero weights.")
        raise Hint(f"with {what} the weights are off by up to {(got - expected).abs().max().item():.3g}: the "
                   "softmax runs over the keys, the last axis.")
    return "hidden keys get 0, each row sums to 1 over its visible keys, and a row that sees nothing gets zeros."
