"""Solutions to the exercises of notebook 00, and typical wrong answers with the hint each must get."""

import math

import numpy as np
import torch

from attention_lib import causal_mask, padding_mask

# --- 00.1: make "bank" look at "loan" -------------------------------------------------------------------------------


def bank_query():
    return torch.tensor([0.0, 3.0, 0.0, 0.0])  # the money position: score 3 * 3 / 2 = 4.5 against 0 for the rest


def bank_query_too_weak():
    return torch.tensor([2.0, 2.0, 0.0, 0.0])  # the river sentence's query: loan gets only 0.83


def bank_query_water():
    return torch.tensor([3.0, 0.0, 0.0, 0.0])  # asks for water: every score is 0, the weights are uniform


def bank_query_place():
    return torch.tensor([0.0, 0.0, 3.0, 0.0])  # asks for a place: "bank" itself is the place in this sentence


def bank_query_money_weak():
    return torch.tensor([0.0, 1.0, 0.0, 0.0])  # the right direction, too short: loan gets 0.53


def bank_query_row():
    return torch.tensor([[0.0, 3.0, 0.0, 0.0]])  # (1, 4): a batch of one query


def bank_query_nan():
    return torch.tensor([0.0, float("nan"), 0.0, 0.0])


def bank_query_against_money():
    return torch.tensor([0.0, -3.0, 0.0, 0.0])  # the sign flipped: loan scores -4.5, the four others tie at 0


def bank_query_changing_the_keys():
    from attention_lib.exercises import nb00

    nb00.LOAN_KEYS[4] = torch.tensor([0.0, 100.0, 0.0, 0.0])  # makes the task easy by changing the sentence
    return torch.tensor([0.0, 1.0, 0.0, 0.0])


# --- 00.2: attention in three lines ---------------------------------------------------------------------------------


def my_attention(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (..., S, S_kv)
    return scores.softmax(dim=-1) @ v  # (..., S, d)


def attention_without_scale(q, k, v):
    return (q @ k.transpose(-2, -1)).softmax(dim=-1) @ v


def attention_softmax_over_queries(q, k, v):
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-2) @ v


def attention_with_3d_transpose(q, k, v):
    return (q @ k.transpose(1, 2) / math.sqrt(q.size(-1))).softmax(dim=-1) @ v  # right for (B, S, d) only


def attention_with_dot_T(q, k, v):
    return (q @ k.T / math.sqrt(q.size(-1))).softmax(dim=-1) @ v  # the 2-D notation: k.T reverses every axis


def attention_divided_by_d(q, k, v):
    return (q @ k.transpose(-2, -1) / q.size(-1)).softmax(dim=-1) @ v


def attention_scaled_by_first_axis(q, k, v):
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(0))).softmax(dim=-1) @ v  # q.size(0) is B, not d


def attention_with_weights(q, k, v):
    weights = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1)
    return weights @ v, weights  # the layer's (context, weights), not the context alone


def attention_returns_weights(q, k, v):
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1)  # forgot @ v


def attention_mixes_keys(q, k, v):
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1) @ k  # the keys mixed, not the values


def attention_through_numpy(q, k, v):
    q, k, v = (t.detach().numpy() for t in (q, k, v))  # numpy's arithmetic: right numbers, no gradient
    scores = q @ k.swapaxes(-2, -1) / math.sqrt(q.shape[-1])
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return torch.from_numpy(weights / weights.sum(axis=-1, keepdims=True) @ v)


def attention_weights_detached(q, k, v):
    weights = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1)
    return weights.detach() @ v  # the gradient reaches v only: q and k never learn


# --- 00.3: the mask of a decoder ------------------------------------------------------------------------------------


def decoder_mask(lengths, S):
    return padding_mask(lengths, seq_len=S)[:, None, :] & causal_mask(S)  # (B, 1, S) & (1, S, S) -> (B, S, S)


def decoder_mask_inverted(lengths, S):
    return ~decoder_mask(lengths, S)  # True = hidden, nn.MultiheadAttention's convention


def decoder_mask_upper(lengths, S):
    triangle = torch.ones(S, S, dtype=torch.bool).triu()  # the future instead of the past
    return padding_mask(lengths, seq_len=S)[:, None, :] & triangle


def decoder_mask_or(lengths, S):
    return padding_mask(lengths, seq_len=S)[:, None, :] | causal_mask(S)


def decoder_mask_causal_only(lengths, S):
    return causal_mask(S)[0]  # (S, S): forgets the padding and the batch


def decoder_mask_hiding_padded_rows(lengths, S):
    pad = padding_mask(lengths, seq_len=S)  # (B, S)
    return pad[:, :, None] & pad[:, None, :] & causal_mask(S)  # padded queries see nothing: also accepted


def decoder_mask_as_ints(lengths, S):
    return decoder_mask(lengths, S).int()  # 0 and 1, not False and True


def decoder_mask_strict_triangle(lengths, S):
    strict = torch.ones(S, S, dtype=torch.bool).tril(diagonal=-1)  # j < i: a token no longer sees itself
    return padding_mask(lengths, seq_len=S)[:, None, :] & strict


def decoder_mask_one_short(lengths, S):
    return padding_mask([n - 1 for n in lengths], seq_len=S)[:, None, :] & causal_mask(S)  # the last real token hidden


def decoder_mask_sorting_lengths(lengths, S):
    lengths.sort(reverse=True)  # sorts the caller's list in place
    return padding_mask(lengths, seq_len=S)[:, None, :] & causal_mask(S)


def decoder_mask_padded_rows_half_done(lengths, S):
    mask = decoder_mask(lengths, S).clone()  # (B, S, S)
    pad = padding_mask(lengths, seq_len=S)  # (B, S)
    mask[~pad] = False
    mask[..., 0] |= ~pad  # a padded query sees key 0 only: neither the rule nor nothing
    return mask


# --- 00.4: masked softmax from scratch ------------------------------------------------------------------------------


def my_masked_softmax(scores, mask):
    scores = scores.masked_fill(~mask, float("-inf"))  # (..., S, S_kv)
    sees_something = mask.any(dim=-1, keepdim=True)  # (..., S, 1)
    weights = scores.masked_fill(~sees_something, 0.0).softmax(dim=-1)  # (..., S, S_kv)
    return weights * sees_something  # (..., S, S_kv)


def masked_softmax_with_nan(scores, mask):
    return scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)


def masked_softmax_inverted(scores, mask):
    return my_masked_softmax(scores, ~mask)


def masked_softmax_zeroed_after(scores, mask):
    return scores.softmax(dim=-1) * mask  # hidden weights are 0, but the rows no longer sum to 1


def masked_softmax_renormalised_after_exp(scores, mask):
    e = scores.exp() * mask  # e^100 is inf in float32: inf / inf is NaN
    return e / e.sum(dim=-1, keepdim=True).clamp_min(1e-12)


def masked_softmax_renormalised_after_softmax(scores, mask):
    w = scores.softmax(dim=-1) * mask  # the visible weights underflow to 0 when the hidden keys dominate
    return w / w.sum(dim=-1, keepdim=True).clamp_min(1e-12)


def masked_softmax_nan_to_num(scores, mask):
    return scores.masked_fill(~mask, float("-inf")).softmax(dim=-1).nan_to_num(0.0)  # right forward, NaN backward


def masked_softmax_where_isnan(scores, mask):
    w = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    return torch.where(w.isnan(), torch.zeros_like(w), w)  # the same: the NaN still flows back


def masked_softmax_in_place(scores, mask):
    scores.masked_fill_(~mask, float("-inf"))  # changes the caller's scores
    sees_something = mask.any(dim=-1, keepdim=True)
    return scores.masked_fill(~sees_something, 0.0).softmax(dim=-1) * sees_something


def masked_softmax_minus_1e9(scores, mask):
    return scores.masked_fill(~mask, -1e9).softmax(dim=-1)  # a row that sees nothing gets uniform weights


def masked_softmax_additive_minus_1e9(scores, mask):
    return (scores - 1e9 * (~mask)).softmax(dim=-1)  # a blind row keeps its scores' differences in float64


def masked_softmax_minus_1e4(scores, mask):
    sees_something = mask.any(dim=-1, keepdim=True)
    return scores.masked_fill(~mask, -1e4).softmax(dim=-1) * sees_something  # hides nothing below -1e4


def masked_softmax_minus_100(scores, mask):
    sees_something = mask.any(dim=-1, keepdim=True)
    return torch.where(sees_something, scores.masked_fill(~mask, -100.0).softmax(dim=-1), 0.0)


def masked_softmax_multiplied(scores, mask):
    return (scores * mask).softmax(dim=-1)  # a hidden score of 0 still gets e^0


def masked_softmax_ignoring_the_mask(scores, mask):
    sees_something = mask.any(dim=-1, keepdim=True)
    return scores.softmax(dim=-1) * sees_something  # blind rows zeroed, but no key hidden in the others


def masked_softmax_detached(scores, mask):
    return my_masked_softmax(scores.detach(), mask)  # right numbers, no gradient


def masked_softmax_rescaled(scores, mask):
    return my_masked_softmax(scores / math.sqrt(scores.size(-1)), mask)  # the scores were already scaled


SOLUTIONS = {
    "check_00_1": bank_query,
    "check_00_2": my_attention,
    "check_00_3": decoder_mask,
    "check_00_4": my_masked_softmax,
}

WRONG = {
    "check_00_1": [
        (bank_query_too_weak, "only 0.83"),
        (bank_query_water, "only the money position counts"),
        (bank_query_place, "looks mostly at 'bank'"),
        (bank_query_money_weak, "largest weight but only 0.53"),
        (bank_query_row, "shape (4,)"),
        (bank_query_nan, "NaN weights"),
        (bank_query_against_money, "looks equally at 'the', 'bank', 'gave' and 'a'"),
        (bank_query_changing_the_keys, "changed LOAN_KEYS"),
    ],
    "check_00_2": [
        (attention_without_scale, "forgot to scale"),
        (attention_softmax_over_queries, "wrong axis"),
        (attention_with_3d_transpose, "k.transpose(-2, -1)"),
        (attention_with_dot_T, "k.T reverses all the axes"),
        (attention_divided_by_d, "divided the scores by d"),
        (attention_scaled_by_first_axis, "the size of axis"),
        (attention_with_weights, "not a tuple"),
        (attention_returns_weights, "one row per query"),
        (attention_mixes_keys, "off by up to"),
        (attention_through_numpy, "carries no gradient"),
        (attention_weights_detached, "is right, but its gradient is off by up to"),
    ],
    "check_00_3": [
        (decoder_mask_inverted, "opposite of the convention"),
        (decoder_mask_upper, "in its future"),
        (decoder_mask_or, "padded key is visible"),
        (decoder_mask_causal_only, "(B, S, S)"),
        (decoder_mask_padded_rows_half_done, "neither the rule of a real row"),
        (decoder_mask_as_ints, "torch.bool"),
        (decoder_mask_strict_triangle, "no real token sees itself"),
        (decoder_mask_one_short, "misses a real key"),
        (decoder_mask_sorting_lengths, "changed its input `lengths` in place"),
    ],
    "check_00_4": [
        (masked_softmax_with_nan, "gives NaN"),
        (masked_softmax_inverted, "True must mean 'may attend'"),
        (masked_softmax_zeroed_after, "must sum to 1"),
        (masked_softmax_renormalised_after_exp, "an exponential overflowed"),
        (masked_softmax_renormalised_after_softmax, "all-zero weights"),
        (masked_softmax_nan_to_num, "the backward pass goes through NaN"),
        (masked_softmax_where_isnan, "the backward pass goes through NaN"),
        (masked_softmax_in_place, "changed its input `scores` in place"),
        (masked_softmax_minus_1e9, "A large negative fill instead of -inf gives such a row weights that sum to 1"),
        (masked_softmax_additive_minus_1e9, "must get zero weights"),
        (masked_softmax_minus_1e4, "a finite fill such as -1e4 or -100"),
        (masked_softmax_minus_100, "a finite fill such as -1e4 or -100"),
        (masked_softmax_ignoring_the_mask, "set its score to -inf before the softmax"),
        (masked_softmax_detached, "carry no gradient"),
        (masked_softmax_multiplied, "a score of 0 is not hidden"),
        (masked_softmax_rescaled, "off by up to"),
    ],
}
