"""Solutions to the exercises of notebook 07, and typical wrong answers with a fragment of the hint each must get."""

from __future__ import annotations

import math

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


# --- 07.2: the key blocks of a sliding-window query block ----------------------------------------------------------


def window_key_blocks(i0, i1, S, S_kv, block_size, window):
    oldest = i0 + S_kv - S - window + 1  # the oldest key the first query of the block sees
    newest = i1 - 1 + S_kv - S  # the newest key the last query of the block sees
    lo, hi = max(oldest, 0), min(newest, S_kv - 1)
    if lo > hi:  # the block sees no key at all (S > S_kv: queries before the first key)
        return []
    return list(range(lo // block_size * block_size, hi + 1, block_size))


def window_key_blocks_causal_only(i0, i1, S, S_kv, block_size, window):
    return list(range(0, max(0, min(S_kv, i1 + S_kv - S)), block_size))  # no window: every block from the start


def window_key_blocks_last_query(i0, i1, S, S_kv, block_size, window):
    oldest = i1 - 1 + S_kv - S - window + 1  # the window of the LAST query: misses what the first one sees
    newest = i1 - 1 + S_kv - S
    lo, hi = max(oldest, 0), min(newest, S_kv - 1)
    return [] if lo > hi else list(range(lo // block_size * block_size, hi + 1, block_size))


def window_key_blocks_one_too_many(i0, i1, S, S_kv, block_size, window):
    oldest = i0 + S_kv - S - window  # p - window <= j: one key too many
    newest = i1 - 1 + S_kv - S
    lo, hi = max(oldest, 0), min(newest, S_kv - 1)
    return [] if lo > hi else list(range(lo // block_size * block_size, hi + 1, block_size))


def window_key_blocks_top_left(i0, i1, S, S_kv, block_size, window):
    return window_key_blocks(i0, i1, S_kv, S_kv, block_size, window)  # query i at position i


# --- 07.3: split-KV decoding: combine two ranges of keys -----------------------------------------------------------


def combine(out1, lse1, out2, lse2):
    a = lse1.masked_fill(lse1 == math.inf, -math.inf)  # (..., S): a range that sees nothing weighs nothing
    b = lse2.masked_fill(lse2 == math.inf, -math.inf)  # (..., S)
    lse = torch.logaddexp(a, b)  # (..., S): log(e^lse1 + e^lse2)
    seen = lse > -math.inf  # (..., S)
    safe = torch.where(seen, lse, 0.0)  # (..., S)
    out = torch.exp(a - safe)[..., None] * out1 + torch.exp(b - safe)[..., None] * out2  # (..., S, HS)
    return torch.where(seen[..., None], out, 0.0), torch.where(seen, lse, math.inf)  # (..., S, HS), (..., S)


def combine_average(out1, lse1, out2, lse2):
    return (out1 + out2) / 2, torch.maximum(lse1, lse2)


def combine_with_nan(out1, lse1, out2, lse2):
    lse = torch.logaddexp(lse1, lse2)  # +inf for a range that sees nothing: +inf - (+inf) below
    return torch.exp(lse1 - lse)[..., None] * out1 + torch.exp(lse2 - lse)[..., None] * out2, lse


def combine_blind_minus_inf(out1, lse1, out2, lse2):
    out, lse = combine(out1, lse1, out2, lse2)
    return out, lse.masked_fill(lse == math.inf, -math.inf)  # torch.logsumexp's convention, not tiled_forward's


def combine_wrong_lse(out1, lse1, out2, lse2):
    out, lse = combine(out1, lse1, out2, lse2)
    a, b = (t.masked_fill(t == math.inf, -math.inf) for t in (lse1, lse2))
    return out, torch.where(lse == math.inf, lse, torch.maximum(a, b))  # the larger lse, not the log of the sum


SOLUTIONS = {"check_07_1": merge, "check_07_2": window_key_blocks, "check_07_3": combine}

WRONG = {
    "check_07_1": [
        (merge_without_rescaling, "measure both against the merged maximum"),
        (merge_with_nan, "gives NaN"),
        (merge_wrong_max, "larger of m1 and m2"),
    ],
    "check_07_2": [
        (window_key_blocks_causal_only, "entirely before the window"),
        (window_key_blocks_last_query, "every query of the block counts"),
        (window_key_blocks_one_too_many, "its own position included"),
        (window_key_blocks_top_left, "the queries are the LAST S"),
    ],
    "check_07_3": [
        (combine_average, "share of the total sum"),
        (combine_with_nan, "NaN appears"),
        (combine_blind_minus_inf, "lse = +inf"),
        (combine_wrong_lse, "the sum over both"),
    ],
}
