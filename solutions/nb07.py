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
    return m, l1 * torch.exp(m1 - m) + l2 * torch.exp(m2 - m)  # -inf - (-inf) where both blocks are hidden


def merge_wrong_max(m1, l1, m2, l2):
    m = torch.minimum(m1, m2).nan_to_num(neginf=0.0)
    return m, l1 + l2


def merge_rescaling_first_only(m1, l1, m2, l2):
    m = torch.maximum(m1, m2)
    m_safe = m.masked_fill(m == float("-inf"), 0.0)
    return m, l1 * torch.exp(m1 - m_safe) + l2  # right only where block 2 holds the maximum


def merge_rescaling_second_only(m1, l1, m2, l2):
    m = torch.maximum(m1, m2)
    m_safe = m.masked_fill(m == float("-inf"), 0.0)
    return m, l1 + l2 * torch.exp(m2 - m_safe)  # right only where block 1 holds the maximum


def merge_inverted_factors(m1, l1, m2, l2):
    m = torch.maximum(m1, m2)
    m_safe = m.masked_fill(m == float("-inf"), 0.0)
    return m, l1 * torch.exp(m_safe - m1) + l2 * torch.exp(m_safe - m2)  # new minus old: factors >= 1


def merge_larger_sum(m1, l1, m2, l2):
    m = torch.maximum(m1, m2)
    m_safe = m.masked_fill(m == float("-inf"), 0.0)
    return m, torch.maximum(l1 * torch.exp(m1 - m_safe), l2 * torch.exp(m2 - m_safe))  # l merged like m


def merge_absolute_sums(m1, l1, m2, l2):
    return torch.maximum(m1, m2), l1 * torch.exp(m1) + l2 * torch.exp(m2)  # the sum of e^z, not of e^(z - m)


def merge_unstabilised(m1, l1, m2, l2):
    m = torch.maximum(m1, m2)
    m_safe = m.masked_fill(m == float("-inf"), 0.0)
    return m, (l1 * torch.exp(m1) + l2 * torch.exp(m2)) / torch.exp(m_safe)  # e^m overflows: inf / inf


def merge_guard_before_max(m1, l1, m2, l2):
    m1, m2 = m1.nan_to_num(neginf=0.0), m2.nan_to_num(neginf=0.0)  # 0 beats the negative scores of the other block
    m = torch.maximum(m1, m2)
    return m, l1 * torch.exp(m1 - m) + l2 * torch.exp(m2 - m)


def merge_returns_safe_max(m1, l1, m2, l2):
    m = torch.maximum(m1, m2).masked_fill(torch.maximum(m1, m2) == float("-inf"), 0.0)  # the guard leaks out
    return m, l1 * torch.exp(m1 - m) + l2 * torch.exp(m2 - m)


def merge_measured_against_m1(m1, l1, m2, l2):
    m1_safe = m1.masked_fill(m1 == float("-inf"), 0.0)
    return torch.maximum(m1, m2), l1 + l2 * torch.exp(m2 - m1_safe)  # block 2 measured against m1, not m


def merge_returns_l_only(m1, l1, m2, l2):
    m = torch.maximum(m1, m2)
    m_safe = m.masked_fill(m == float("-inf"), 0.0)
    return l1 * torch.exp(m1 - m_safe) + l2 * torch.exp(m2 - m_safe)  # the caller needs m too


def merge_base_2(m1, l1, m2, l2):
    m = torch.maximum(m1, m2)
    m_safe = m.masked_fill(m == float("-inf"), 0.0)
    return m, l1 * torch.exp2(m1 - m_safe) + l2 * torch.exp2(m2 - m_safe)  # the base of FlashAttention's kernels


def merge_in_place(m1, l1, m2, l2):
    m = torch.maximum(m1, m2)
    m_safe = m.masked_fill(m == float("-inf"), 0.0)
    l1 *= torch.exp(m1 - m_safe)  # the caller's l1 changes
    return m, l1 + l2 * torch.exp(m2 - m_safe)


# --- 07.2: the key blocks of a sliding-window query block ----------------------------------------------------------


def window_key_blocks(i0, i1, S, S_kv, block_size, window):
    oldest = i0 + S_kv - S - window + 1  # the oldest key the first query of the block sees
    newest = i1 - 1 + S_kv - S  # the newest key the last query of the block sees
    lo, hi = max(oldest, 0), min(newest, S_kv - 1)
    if lo > hi:  # the block sees no key at all (S > S_kv: queries before the first key)
        return []
    return list(range(lo // block_size * block_size, hi + 1, block_size))


def _blocks(oldest, newest, S_kv, block_size):
    lo, hi = max(oldest, 0), min(newest, S_kv - 1)
    return [] if lo > hi else list(range(lo // block_size * block_size, hi + 1, block_size))


def window_key_blocks_causal_only(i0, i1, S, S_kv, block_size, window):
    return list(range(0, max(0, min(S_kv, i1 + S_kv - S)), block_size))  # no window: every block from the start


def window_key_blocks_last_query(i0, i1, S, S_kv, block_size, window):
    newest = i1 - 1 + S_kv - S
    return _blocks(newest - window + 1, newest, S_kv, block_size)  # the window of the LAST query only


def window_key_blocks_one_too_many(i0, i1, S, S_kv, block_size, window):
    return _blocks(i0 + S_kv - S - window, i1 - 1 + S_kv - S, S_kv, block_size)  # p - window <= j: one key too many


def window_key_blocks_one_too_few(i0, i1, S, S_kv, block_size, window):
    return _blocks(i0 + S_kv - S - window + 2, i1 - 1 + S_kv - S, S_kv, block_size)  # window - 1 keys


def window_key_blocks_top_left(i0, i1, S, S_kv, block_size, window):
    return window_key_blocks(i0, i1, S_kv, S_kv, block_size, window)  # query i at position i


def window_key_blocks_newest_first(i0, i1, S, S_kv, block_size, window):
    return window_key_blocks(i0, i1, S, S_kv, block_size, window)[::-1]  # walked back from the diagonal


def window_key_blocks_as_set(i0, i1, S, S_kv, block_size, window):
    oldest, newest = max(i0 + S_kv - S - window + 1, 0), i1 - 1 + S_kv - S
    return {j // block_size * block_size for j in range(oldest, newest + 1)}  # the block of every key: no order


def window_key_blocks_as_numbers(i0, i1, S, S_kv, block_size, window):
    return [j0 // block_size for j0 in window_key_blocks(i0, i1, S, S_kv, block_size, window)]  # block numbers


def window_key_blocks_unaligned(i0, i1, S, S_kv, block_size, window):
    lo, hi = max(i0 + S_kv - S - window + 1, 0), min(i1 - 1 + S_kv - S, S_kv - 1)
    return list(range(lo, hi + 1, block_size))  # starts at the oldest key, not at the start of its block


def window_key_blocks_unclamped(i0, i1, S, S_kv, block_size, window):
    oldest, newest = i0 + S_kv - S - window + 1, i1 - 1 + S_kv - S
    return list(range(oldest // block_size * block_size, newest + 1, block_size))  # oldest may be below 0


def window_key_blocks_as_mask(i0, i1, S, S_kv, block_size, window):
    starts = torch.arange(0, S_kv, block_size)  # (n_blocks,)
    wanted = window_key_blocks(i0, i1, S, S_kv, block_size, window)
    return torch.isin(starts, torch.tensor(wanted, dtype=torch.long))  # (n_blocks,) bool: which blocks


def window_key_blocks_end_exclusive(i0, i1, S, S_kv, block_size, window):
    lo, newest = max(i0 + S_kv - S - window + 1, 0), i1 - 1 + S_kv - S
    return list(range(lo // block_size * block_size, newest, block_size))  # stops before the newest key's block


def window_key_blocks_offset_on_newest_only(i0, i1, S, S_kv, block_size, window):
    oldest, newest = max(i0 - window + 1, 0), i1 - 1 + S_kv - S  # the oldest key forgets the offset S_kv - S
    return [] if newest < 0 else list(range(oldest // block_size * block_size, newest + 1, block_size))


def window_key_blocks_rounded_up(i0, i1, S, S_kv, block_size, window):
    lo, hi = max(i0 + S_kv - S - window + 1, 0), i1 - 1 + S_kv - S
    return list(range(-(-lo // block_size) * block_size, hi + 1, block_size))  # the block after the oldest key's


def window_key_blocks_forgot_return(i0, i1, S, S_kv, block_size, window):
    blocks = []
    for j0 in range(0, S_kv, block_size):
        if j0 + block_size > i0 + S_kv - S - window + 1 and j0 <= i1 - 1 + S_kv - S:
            blocks.append(j0)  # the list is built, never returned: the function gives None


def window_key_blocks_to_the_end(i0, i1, S, S_kv, block_size, window):
    lo = max(i0 + S_kv - S - window + 1, 0)
    return list(range(lo // block_size * block_size, S_kv, block_size))  # forgets the causal rule's end


def window_key_blocks_as_floats(i0, i1, S, S_kv, block_size, window):
    return [j0 / block_size * block_size for j0 in window_key_blocks(i0, i1, S, S_kv, block_size, window)]  # 4.0


def window_key_blocks_end_marker(i0, i1, S, S_kv, block_size, window):
    return window_key_blocks(i0, i1, S, S_kv, block_size, window) + [math.inf]  # an end marker is no block


def window_key_blocks_as_column(i0, i1, S, S_kv, block_size, window):
    starts = window_key_blocks(i0, i1, S, S_kv, block_size, window)
    return torch.tensor(starts, dtype=torch.long)[:, None]  # (n, 1): one start per row, not a 1-D list


def window_key_blocks_on_meta(i0, i1, S, S_kv, block_size, window):
    starts = window_key_blocks(i0, i1, S, S_kv, block_size, window)
    return torch.tensor(starts, dtype=torch.long, device="meta")  # shapes only, no values to read


# --- 07.3: split-KV decoding: combine two ranges of keys -----------------------------------------------------------


def combine(out1, lse1, out2, lse2):
    a = lse1.masked_fill(lse1 == math.inf, -math.inf)  # (..., S): a range that sees nothing weighs nothing
    b = lse2.masked_fill(lse2 == math.inf, -math.inf)  # (..., S)
    lse = torch.logaddexp(a, b)  # (..., S): log(e^lse1 + e^lse2); NaN if a range saw a NaN
    seen = lse != -math.inf  # (..., S): a NaN row stays NaN rather than look empty (NaN > -inf is False)
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


def combine_unstabilised(out1, lse1, out2, lse2):
    e1 = torch.exp(lse1.masked_fill(lse1 == math.inf, -math.inf))  # e^lse: inf beyond 88.7 in float32
    e2 = torch.exp(lse2.masked_fill(lse2 == math.inf, -math.inf))
    total = e1 + e2
    out = torch.where(total[..., None] > 0, (e1[..., None] * out1 + e2[..., None] * out2) / total[..., None], 0.0)
    return out, torch.where(total > 0, torch.log(total), math.inf)


def combine_weighted_by_lse(out1, lse1, out2, lse2):
    _, lse = combine(out1, lse1, out2, lse2)
    return (lse1[..., None] * out1 + lse2[..., None] * out2) / (lse1 + lse2)[..., None], lse  # lse is a log


def combine_swapped(out1, lse1, out2, lse2):
    out, lse = combine(out2, lse1, out1, lse2)  # out1 weighted by the share of range 2
    return out, lse


def combine_unnormalised(out1, lse1, out2, lse2):
    a = lse1.masked_fill(lse1 == math.inf, -math.inf)
    b = lse2.masked_fill(lse2 == math.inf, -math.inf)
    top = torch.maximum(a, b)  # safe against overflow, but not the total
    top_safe = top.masked_fill(top == -math.inf, 0.0)
    _, lse = combine(out1, lse1, out2, lse2)
    return torch.exp(a - top_safe)[..., None] * out1 + torch.exp(b - top_safe)[..., None] * out2, lse


def combine_added_lse(out1, lse1, out2, lse2):
    out, lse = combine(out1, lse1, out2, lse2)
    a, b = (t.masked_fill(t == math.inf, 0.0) for t in (lse1, lse2))
    return out, torch.where(lse == math.inf, lse, a + b)  # a product of the sums, not their sum


def combine_mean_lse(out1, lse1, out2, lse2):
    out, lse = combine(out1, lse1, out2, lse2)
    return out, torch.where((lse1 < math.inf) & (lse2 < math.inf), (lse1 + lse2) / 2, lse)


def combine_log_weights(out1, lse1, out2, lse2):
    a = lse1.masked_fill(lse1 == math.inf, -math.inf)
    b = lse2.masked_fill(lse2 == math.inf, -math.inf)
    lse = torch.logaddexp(a, b)
    both = (a > -math.inf) & (b > -math.inf)
    out, _ = combine(out1, lse1, out2, lse2)
    mixed = (a - lse)[..., None] * out1 + (b - lse)[..., None] * out2  # the log of each weight, not the weight
    return torch.where(both[..., None], mixed, out), torch.where(lse == -math.inf, math.inf, lse)


def combine_empty_as_zero(out1, lse1, out2, lse2):
    a, b = (t.masked_fill(t == math.inf, 0.0) for t in (lse1, lse2))  # an empty range made a sum of e^0 = 1
    lse = torch.logaddexp(a, b)
    return torch.exp(a - lse)[..., None] * out1 + torch.exp(b - lse)[..., None] * out2, lse


def combine_returns_out_only(out1, lse1, out2, lse2):
    return combine(out1, lse1, out2, lse2)[0]  # the lse is needed too: by the backward, and by a further combine


def combine_in_place(out1, lse1, out2, lse2):
    a = lse1.masked_fill(lse1 == math.inf, -math.inf)
    b = lse2.masked_fill(lse2 == math.inf, -math.inf)
    lse = torch.logaddexp(a, b)
    seen = lse > -math.inf
    safe = torch.where(seen, lse, 0.0)
    out1 *= torch.exp(a - safe)[..., None]  # the caller's out1 changes
    out = out1 + torch.exp(b - safe)[..., None] * out2
    return torch.where(seen[..., None], out, 0.0), torch.where(seen, lse, math.inf)


def combine_nan_as_empty(out1, lse1, out2, lse2):
    a = torch.where(lse1.isfinite(), lse1, -math.inf)  # "not finite: an empty range", a NaN included
    b = torch.where(lse2.isfinite(), lse2, -math.inf)
    lse = torch.logaddexp(a, b)
    seen = lse > -math.inf
    safe = torch.where(seen, lse, 0.0)
    w1, w2 = torch.exp(a - safe)[..., None], torch.exp(b - safe)[..., None]  # (..., S, 1) each
    out = (w1 * out1).nan_to_num(0.0) + (w2 * out2).nan_to_num(0.0)  # the NaN of a range cleaned away
    return torch.where(seen[..., None], out, 0.0), torch.where(seen, lse, math.inf)


def combine_nan_cleaned(out1, lse1, out2, lse2):
    out, lse = combine(out1, lse1, out2, lse2)
    return out.nan_to_num(0.0), torch.where(lse.isnan(), math.inf, lse)  # a NaN row made to look empty


SOLUTIONS = {"check_07_1": merge, "check_07_2": window_key_blocks, "check_07_3": combine}

WRONG = {
    "check_07_1": [
        (merge_without_rescaling, "measure both against the merged maximum"),
        (merge_with_nan, "gives NaN"),
        (merge_wrong_max, "larger of m1 and m2"),
        (merge_rescaling_first_only, "you rescaled l1 but not l2"),
        (merge_rescaling_second_only, "you rescaled l2 but not l1"),
        (merge_inverted_factors, "shrinks"),
        (merge_larger_sum, "rather than keeping the larger one"),
        (merge_absolute_sums, "your l is the sum of e^z"),
        (merge_unstabilised, "never exponentiate a maximum"),
        (merge_guard_before_max, "before taking the maximum"),
        (merge_returns_safe_max, "must keep m = -inf and l = 0"),
        (merge_measured_against_m1, "The maximum of this row is in block 2"),
        (merge_in_place, "changed its input `l1` in place"),
        (merge_returns_l_only, "should return a pair (m, l)"),
        (merge_base_2, "your factors are powers of 2 (torch.exp2)"),
    ],
    "check_07_2": [
        (window_key_blocks_causal_only, "the loop may start late too"),
        (window_key_blocks_last_query, "the blocks of the last query's window"),
        (window_key_blocks_one_too_many, "one key too many"),
        (window_key_blocks_offset_on_newest_only, "its own position included?"),
        (window_key_blocks_rounded_up, "round down to the start of the block"),
        (window_key_blocks_one_too_few, "one key further back"),
        (window_key_blocks_top_left, "the queries are the LAST S"),
        (window_key_blocks_newest_first, "in increasing order, each once"),
        (window_key_blocks_as_set, "a set has no order"),
        (window_key_blocks_as_numbers, "the numbers of the blocks"),
        (window_key_blocks_unaligned, "are not multiples of block_size"),
        (window_key_blocks_unclamped, "a block start is negative"),
        (window_key_blocks_as_mask, "not a mask over the blocks"),
        (window_key_blocks_end_exclusive, "the end of a range is exclusive"),
        (window_key_blocks_to_the_end, "entirely in the future"),
        (window_key_blocks_forgot_return, "list of block starts j0 (whole numbers), got None"),
        (window_key_blocks_as_floats, "you returned 4.0 among the block starts"),
        (window_key_blocks_end_marker, "you returned inf among the block starts"),
        (window_key_blocks_as_column, "you returned a tensor of shape (2, 1)"),
        (window_key_blocks_on_meta, "an ordinary dense tensor on the CPU"),
    ],
    "check_07_3": [
        (combine_average, "share of the total sum"),
        (combine_with_nan, "NaN appears"),
        (combine_blind_minus_inf, "lse = +inf"),
        (combine_wrong_lse, "the sum over both"),
        (combine_unstabilised, "Stay in log space"),
        (combine_weighted_by_lse, "you weighted the outputs by lse1 and lse2"),
        (combine_swapped, "the weights are swapped"),
        (combine_unnormalised, "do not sum to 1"),
        (combine_added_lse, "adding two logarithms"),
        (combine_mean_lse, "torch.logaddexp"),
        (combine_log_weights, "range 1 weighs"),
        (combine_empty_as_zero, "weighs nothing"),
        (combine_in_place, "changed its input `out1` in place"),
        (combine_returns_out_only, "should return a pair (out, lse)"),
        (combine_nan_as_empty, "must make the row NaN, not look empty"),
        (combine_nan_cleaned, "must make the row NaN, not look empty"),
    ],
}
