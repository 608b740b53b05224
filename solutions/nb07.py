"""Solutions to the exercises of notebook 07, and typical wrong answers with a fragment of the hint each must get."""

from __future__ import annotations

import torch

# --- 07.1: merge the running softmax statistics of two blocks ------------------------------------------------------


def merge(m1, l1, m2, l2):
    m = torch.maximum(m1, m2)  # (rows,)
    m_safe = m.masked_fill(m == float("-inf"), 0.0)  # (rows,): a row that saw nothing
    return m, l1 * torch.exp(m1 - m_safe) + l2 * torch.exp(m2 - m_safe)  # (rows,), (rows,)


def merge_without_rescaling(m1, l1, m2, l2):
    return torch.maximum(m1, m2), l1 + l2


def merge_with_nan(m1, l1, m2, l2):
    m = torch.maximum(m1, m2)
    return m, l1 * torch.exp(m1 - m) + l2 * torch.exp(m2 - m)


def merge_wrong_max(m1, l1, m2, l2):
    m = torch.minimum(m1, m2).nan_to_num(neginf=0.0)
    return m, l1 + l2


# --- 07.2: the key blocks of a causal query block ------------------------------------------------------------------


def key_blocks(i0, i1, S, S_kv, block_size):
    kv_end = min(S_kv, i1 + S_kv - S)  # keys 0..kv_end - 1 are seen by some query of the block
    return list(range(0, max(kv_end, 0), block_size))


def key_blocks_top_left(i0, i1, S, S_kv, block_size):
    return list(range(0, min(S_kv, i1), block_size))  # forgets that the queries are the last S positions


def key_blocks_all(i0, i1, S, S_kv, block_size):
    return list(range(0, S_kv, block_size))  # no skipping


def key_blocks_first_query(i0, i1, S, S_kv, block_size):
    return list(range(0, max(0, min(S_kv, i0 + 1 + S_kv - S)), block_size))  # what the FIRST query sees


# --- 07.3: the backward of the softmax -----------------------------------------------------------------------------


def softmax_backward(p, dp):
    return p * (dp - (p * dp).sum(dim=-1, keepdim=True))


def softmax_backward_without_d(p, dp):
    return p * dp


def softmax_backward_wrong_axis(p, dp):
    return p * (dp - (p * dp).sum(dim=0, keepdim=True))


SOLUTIONS = {"check_07_1": merge, "check_07_2": key_blocks, "check_07_3": softmax_backward}

WRONG = {
    "check_07_1": [
        (merge_without_rescaling, "rescale l1 by exp(m1 - m)"),
        (merge_with_nan, "gives NaN"),
        (merge_wrong_max, "larger of m1 and m2"),
    ],
    "check_07_2": [
        (key_blocks_top_left, "the queries are the LAST S"),
        (key_blocks_all, "entirely in the future"),
        (key_blocks_first_query, "the LAST query of the block"),
    ],
    "check_07_3": [
        (softmax_backward_without_d, "subtract D_i"),
        (softmax_backward_wrong_axis, "sum over the keys of each row"),
    ],
}
