"""Graders of notebook 06 (seeing attention): a head's previous-token score, a mask read off a picture, row entropy."""

from __future__ import annotations

import math

import torch

from ._grading import Hint, expect_shape, expect_tensor, grader

__all__ = ["check_06_1", "check_06_2", "check_06_3"]


def _weights(NH: int, S: int, S_kv: int, seed: int) -> torch.Tensor:
    """Random attention weights (NH, S, S_kv): every row a probability distribution."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(NH, S, S_kv, generator=generator).mul(2).softmax(-1)


@grader("06.1")
def check_06_1(previous_token_score) -> str:
    """previous_token_score(weights (NH, S, S)) -> (NH,): mean over i = 1..S-1 of weights[h, i, i - 1]."""
    weights = _weights(4, 6, 6, seed=61)
    weights[2] = 0
    weights[2, range(1, 6), range(5)] = 1  # head 2 reads exactly the previous token
    weights[2, 0, 0] = 1  # (the first token has none: it reads itself)
    got = expect_shape(expect_tensor(previous_token_score(weights.clone()), "the score"), (4,), "the score (one per head)")
    below, above = weights.diagonal(-1, -2, -1), weights.diagonal(1, -2, -1)  # (NH, S - 1): w[i, i-1], w[i, i+1]
    expected = below.mean(-1)  # (NH,)
    if torch.allclose(got.float(), above.mean(-1), atol=1e-5):
        raise Hint("you measured the weight on the NEXT token, w[i, i+1]. The previous token is w[i, i-1]: the "
                   "diagonal just below the main one, weights.diagonal(offset=-1, dim1=-2, dim2=-1).")
    if torch.allclose(got.float(), weights.diagonal(0, -2, -1).mean(-1), atol=1e-5):
        raise Hint("you measured the weight of each token on itself (the main diagonal); the previous token is one "
                   "column to the left, w[i, i-1].")
    if torch.allclose(got.float(), below.sum(-1) / 6, atol=1e-5):
        raise Hint("you divided by S = 6, but only the S - 1 = 5 queries after the first one have a previous token: "
                   "take the mean over those.")
    if not torch.allclose(got.float(), expected, atol=1e-5):
        raise Hint(f"head scores should be {expected.round(decimals=3).tolist()}, got "
                   f"{got.float().round(decimals=3).tolist()}: average weights[h, i, i - 1] over i = 1 .. S - 1.")
    if int(got.argmax()) != 2:
        raise Hint("the head built to read the previous token (head 2) should have the largest score.")
    return "your score finds the previous-token head (try it: previous_token_score(reference[0]).argmax())."


def _causal_left_padded(S: int, pad: int) -> torch.Tensor:
    i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]  # query rows, key columns
    return (j <= i) & (j >= pad)  # (S, S)


@grader("06.2")
def check_06_2(mask_of) -> str:
    """mask_of(S, pad) -> (S, S) bool: causal AND the first `pad` keys hidden (left padding)."""
    for S, pad in ((6, 2), (5, 0), (7, 3), (1, 0)):
        got = expect_shape(expect_tensor(mask_of(S, pad), f"mask_of({S}, {pad})"), (S, S), f"mask_of({S}, {pad})")
        if got.dtype != torch.bool:
            raise Hint(f"mask_of({S}, {pad}) has dtype {got.dtype}; a mask is torch.bool, True = may attend "
                       "(compare with <= and >=, which give bools).")
        expected = _causal_left_padded(S, pad)
        if torch.equal(got, expected):
            continue
        i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]
        if bool((got & (j > i)).any()):
            raise Hint(f"in mask_of({S}, {pad}) a query may attend to keys after it (j > i): in the picture the "
                       "upper right triangle is grey. Keep j <= i, the lower triangle.")
        if torch.equal(got, (j <= i) & (j < S - pad)):
            raise Hint(f"mask_of({S}, {pad}) hides the last {pad} keys: the [PAD] tokens in the picture are on the "
                       "left, so the first `pad` keys (j < pad) are the hidden ones.")
        if bool((got & (j < pad)).any()):
            raise Hint(f"in mask_of({S}, {pad}) some query may attend to a [PAD] key: the first {pad} columns are "
                       "grey for every query.")
        raise Hint(f"mask_of({S}, {pad}) is not the picture's mask: a key j is visible to query i when j <= i "
                   "(causal) and j >= pad (not padding).")
    return "that is the causal mask with left padding, the AND of the triangle and the padding row."


@grader("06.3")
def check_06_3(row_entropy) -> str:
    """row_entropy(weights (NH, S, S_kv)) -> (NH, S): -sum_j w log w in nats, 0 for zero rows, never NaN."""
    weights = _weights(2, 4, 5, seed=63)
    weights[:, :, 4] = 0  # a hidden (padding) key
    weights = weights / weights.sum(-1, keepdim=True)
    weights[:, 0] = 0  # a query that sees no key: a zero row
    weights[1, 1] = torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0])  # a one-hot row: entropy 0
    got = expect_tensor(row_entropy(weights.clone()), "the entropy")
    if got.isnan().any():
        raise Hint("the entropy contains NaN: a weight of 0 gives 0 * log 0 = 0 * (-inf) = NaN in torch. A hidden "
                   "key adds nothing: use torch.special.xlogy(w, w), or w * w.clamp_min(1e-12).log().")
    expect_shape(got, (2, 4), "the entropy (one value per head and query)")
    safe = weights.clamp_min(1e-30)
    expected = -(weights * safe.log()).sum(-1)  # (NH, S)
    if torch.allclose(got.double(), -expected.double(), atol=1e-5) and not torch.allclose(expected, torch.zeros(2, 4)):
        raise Hint("the entropy is -sum w log w, which is >= 0: you lost the minus sign.")
    if torch.allclose(got.double(), expected.double() / math.log(2), atol=1e-5):
        raise Hint("that is the entropy in bits (log2); the exercise asks for nats, the natural log (torch.log).")
    if not torch.allclose(got.float(), expected, atol=1e-5):
        raise Hint(f"expected {expected.round(decimals=3).tolist()}, got {got.float().round(decimals=3).tolist()}: "
                   "sum -w * ln(w) over the keys (the last dim), counting w = 0 as 0.")
    return "zero rows and hidden keys give 0, one-hot rows 0, spread rows more (at most ln S_kv)."
