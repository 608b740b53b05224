"""Solutions to the exercises of notebook 06, and typical wrong answers with a fragment of the hint each must get."""

import torch


def previous_token_score(weights):
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1)  # (NH, S - 1) -> (NH,)


def mask_of(S, pad):
    i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]  # (S, 1) queries, (1, S) keys
    return (j <= i) & (j >= pad)  # (S, S): causal AND not padding


def row_entropy(weights):
    return -torch.special.xlogy(weights, weights).sum(-1)  # (NH, S): xlogy(0, 0) = 0


SOLUTIONS = {"check_06_1": previous_token_score, "check_06_2": mask_of, "check_06_3": row_entropy}

WRONG = {
    "check_06_1": [
        (lambda w: w.diagonal(offset=1, dim1=-2, dim2=-1).mean(-1), "NEXT token"),
        (lambda w: w.diagonal(offset=-1, dim1=-2, dim2=-1).sum(-1) / w.shape[-1], "S - 1"),
        (lambda w: w.diagonal(dim1=-2, dim2=-1).mean(-1), "on itself"),
    ],
    "check_06_2": [
        (lambda S, pad: (torch.arange(S)[None, :] >= torch.arange(S)[:, None]) & (torch.arange(S)[None, :] >= pad),
         "keys after it"),
        (lambda S, pad: (torch.arange(S)[None, :] <= torch.arange(S)[:, None]) & (torch.arange(S)[None, :] < S - pad),
         "on the left"),
        (lambda S, pad: mask_of(S, pad).int(), "torch.bool"),
    ],
    "check_06_3": [
        (lambda w: -(w * w.log()).sum(-1), "NaN"),
        (lambda w: torch.special.xlogy(w, w).sum(-1), "minus sign"),
        (lambda w: -(torch.special.xlogy(w, w)).sum(-1) / torch.log(torch.tensor(2.0)), "bits"),
    ],
}
