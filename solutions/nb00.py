"""Solutions to the exercises of notebook 00, and typical wrong answers with the hint each must get."""

import math

import torch

from attention_lib import causal_mask, padding_mask

# --- 00.1: make "bank" look at "loan" -------------------------------------------------------------------------------


def bank_query():
    return torch.tensor([0.0, 3.0, 0.0, 0.0])  # the money position: score 3 * 3 / 2 = 4.5 against 0 for the rest


def bank_query_too_weak():
    return torch.tensor([2.0, 2.0, 0.0, 0.0])  # the river sentence's query: loan gets only 0.83


def bank_query_water():
    return torch.tensor([3.0, 0.0, 0.0, 0.0])  # asks for water: every score is 0, the weights are uniform


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


SOLUTIONS = {
    "check_00_1": bank_query,
    "check_00_2": my_attention,
    "check_00_3": decoder_mask,
    "check_00_4": my_masked_softmax,
}

WRONG = {
    "check_00_1": [(bank_query_too_weak, "only 0.83"), (bank_query_water, "only the money position counts")],
    "check_00_2": [
        (attention_without_scale, "forgot to scale"),
        (attention_softmax_over_queries, "wrong axis"),
        (attention_with_3d_transpose, "k.transpose(-2, -1)"),
        (attention_with_dot_T, "k.T reverses all the axes"),
    ],
    "check_00_3": [
        (decoder_mask_inverted, "opposite of the convention"),
        (decoder_mask_upper, "in its future"),
        (decoder_mask_or, "padded key is visible"),
        (decoder_mask_causal_only, "(B, S, S)"),
        (decoder_mask_padded_rows_half_done, "neither the rule of a real row"),
    ],
    "check_00_4": [
        (masked_softmax_with_nan, "gives NaN"),
        (masked_softmax_inverted, "True must mean 'may attend'"),
        (masked_softmax_zeroed_after, "must sum to 1"),
    ],
}
