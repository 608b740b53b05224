"""Solutions to the exercises of notebook 06, and typical wrong answers with a fragment of the hint each must get."""

import math

import torch

# --- 06.1: the previous-token head ----------------------------------------------------------------------------------


def previous_token_score(weights):
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1)  # (NH, S - 1) -> (NH,)


def previous_token_score_next(weights):
    return weights.diagonal(offset=1, dim1=-2, dim2=-1).mean(-1)  # above the diagonal: w[i, i + 1]


def previous_token_score_over_S(weights):
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).sum(-1) / weights.shape[-1]  # S queries, S - 1 weights


def previous_token_score_itself(weights):
    return weights.diagonal(dim1=-2, dim2=-1).mean(-1)  # the main diagonal


def previous_token_score_default_axes(weights):
    return weights.diagonal(-1).mean(-1)  # torch.diagonal's default axes are 0 and 1: heads and queries


def previous_token_score_over_heads(weights):
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(0)  # (S - 1,): one number per query


def previous_token_score_wrapped(weights):
    i = torch.arange(weights.shape[-1])
    return weights[:, i, i - 1].mean(-1)  # i - 1 = -1 for i = 0: the last key joins the mean


def previous_token_score_summed(weights):
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).sum(-1)


def previous_token_score_strongest(weights):
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).amax(-1)  # the largest such weight, not the mean


# --- 06.2: a mask read off a picture --------------------------------------------------------------------------------


def mask_of(S, pad):
    i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]  # (S, 1) queries, (1, S) keys
    return (j <= i) & (j >= pad)  # (S, S): causal AND not padding


def _ij(S):
    return torch.arange(S)[:, None], torch.arange(S)[None, :]


def mask_of_upper(S, pad):
    i, j = _ij(S)
    return (j >= i) & (j >= pad)  # the future instead of the past


def mask_of_right_padding(S, pad):
    i, j = _ij(S)
    return (j <= i) & (j < S - pad)  # the [PAD] tokens taken to be on the right


def mask_of_ints(S, pad):
    return mask_of(S, pad).int()


def mask_of_transposed(S, pad):
    i, j = _ij(S)
    return (i <= j) & (i >= pad)  # i and j taken for each other


def mask_of_or(S, pad):
    i, j = _ij(S)
    return (j <= i) | (j >= pad)


def mask_of_strict(S, pad):
    i, j = _ij(S)
    return (j < i) & (j >= pad)  # a token no longer sees itself


def mask_of_one_pad_too_many(S, pad):
    i, j = _ij(S)
    return (j <= i) & (j > pad)  # hides key `pad`, the first real token


def mask_of_padded_rows(S, pad):
    i, j = _ij(S)
    return (j <= i) & (i >= pad)  # hides the rows of the [PAD] queries instead of the [PAD] keys


def mask_of_never_empty(S, pad):
    i, j = _ij(S)
    return ((j <= i) & (j >= pad)) | (i == j)  # every query sees itself, so that no row is empty


def mask_of_inverted(S, pad):
    i, j = _ij(S)
    return (j > i) | (j < pad)  # True where hidden: the convention of nn.MultiheadAttention's masks


# --- 06.3: row entropy ----------------------------------------------------------------------------------------------


def row_entropy(weights):
    return -torch.special.xlogy(weights, weights).sum(-1)  # (NH, S): xlogy(0, 0) = 0


def row_entropy_nan(weights):
    return -(weights * weights.log()).sum(-1)  # 0 * log 0 = 0 * (-inf) = NaN


def row_entropy_plus(weights):
    return torch.special.xlogy(weights, weights).sum(-1)  # the minus sign lost


def row_entropy_bits(weights):
    return -torch.special.xlogy(weights, weights).sum(-1) / math.log(2)


def row_entropy_over_queries(weights):
    return -torch.special.xlogy(weights, weights).sum(-2)  # (NH, S_kv)


def row_entropy_mean(weights):
    return -torch.special.xlogy(weights, weights).mean(-1)  # divided by S_kv


def row_entropy_normalised(weights):
    return -torch.special.xlogy(weights, weights).sum(-1) / math.log(weights.shape[-1])  # between 0 and 1


def row_entropy_renormalised(weights):
    p = weights / weights.sum(-1, keepdim=True)  # "make sure each row sums to 1": a zero row becomes 0 / 0
    return -torch.special.xlogy(p, p).sum(-1)


def row_entropy_clamped_in_place(weights):
    w = weights.clamp_(min=1e-12)  # no more zeros, but the caller's weights changed
    return -(w * w.log()).sum(-1)


def row_entropy_eps(weights):
    return -(weights * (weights + 1e-4).log()).sum(-1)  # an epsilon inside the log: off by about 1e-4 per key


def row_entropy_eps_1e6(weights):
    return -(weights * (weights + 1e-6).log()).sum(-1)  # off by S_kv · 1e-6: visible over 4096 keys


def row_entropy_clamped_at_1e3(weights):
    return -(weights * weights.clamp_min(1e-3).log()).sum(-1)  # every weight below 1e-3 measured as 1e-3


def row_entropy_categorical(weights):
    # validate_args=True: the default, unless a library switched validation off for the whole process
    return torch.distributions.Categorical(probs=weights, validate_args=True).entropy()  # refuses a zero row


SOLUTIONS = {"check_06_1": previous_token_score, "check_06_2": mask_of, "check_06_3": row_entropy}

WRONG = {
    "check_06_1": [
        (previous_token_score_next, "NEXT token"),
        (previous_token_score_over_S, "you divided by S = 6"),
        (previous_token_score_itself, "on itself"),
        (previous_token_score_default_axes, "the first two axes (heads and queries)"),
        (previous_token_score_over_heads, "you averaged over the heads"),
        (previous_token_score_wrapped, "indexes the LAST key"),
        (previous_token_score_summed, "you summed the weights"),
        (previous_token_score_strongest, "the mean of weights[h, i, i - 1]"),
    ],
    "check_06_2": [
        (mask_of_upper, "keys after it"),
        (mask_of_right_padding, "on the left"),
        (mask_of_ints, "torch.bool"),
        (mask_of_transposed, "transposed"),
        (mask_of_or, "| (OR)"),
        (mask_of_strict, "no token sees itself"),
        (mask_of_one_pad_too_many, "hides 3 keys"),
        (mask_of_padded_rows, "attend to a [PAD] key"),
        (mask_of_never_empty, "attend to a [PAD] key"),
        (mask_of_inverted, "the picture's mask inverted"),
    ],
    "check_06_3": [
        (row_entropy_nan, "NaN in rows that see some key"),
        (row_entropy_plus, "minus sign"),
        (row_entropy_bits, "bits"),
        (row_entropy_over_queries, "summed over the queries"),
        (row_entropy_mean, "averaged -w ln w over the keys"),
        (row_entropy_normalised, "normalised entropy"),
        (row_entropy_renormalised, "(a zero row) got NaN"),
        (row_entropy_clamped_in_place, "changed its input `weights` in place"),
        (row_entropy_eps, "ln(w + eps)"),
        (row_entropy_categorical, "Categorical(probs=w) refuses these weights"),
        (row_entropy_eps_1e6, "ln(w + eps) with eps = 1e-06"),
        (row_entropy_clamped_at_1e3, "At the worst entry, head 1 and query 3"),
    ],
}
