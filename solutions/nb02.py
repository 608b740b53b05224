"""Solutions to the exercises of notebook 02, and typical wrong answers with the hint each must get."""

import math

import torch

# --- 02.1: split the fused output -----------------------------------------------------------------------------------


def split_qkv(qkv, head_size):
    return qkv.reshape(*qkv.shape[:-1], 3, head_size).unbind(dim=-2)  # each (B, S, HS)


def split_qkv_interleaved(qkv, head_size):
    return qkv.reshape(*qkv.shape[:-1], head_size, 3).unbind(dim=-1)  # (HS, 3): q, k, v interleaved


def split_qkv_over_tokens(qkv, head_size):
    return qkv.chunk(3, dim=1)  # splits the tokens, not the features


# --- 02.2: the forward pass as one function ------------------------------------------------------------------------


def forward(x, Wqkv, Wo, mask=None):
    HS = Wo.in_features
    q, k, v = Wqkv(x).split(HS, dim=-1)  # each (B, S, HS)
    scores = q @ k.transpose(-2, -1) / math.sqrt(HS)  # (B, S, S_kv)
    if mask is not None:
        scores = scores.masked_fill(~mask[:, None, :], float("-inf"))  # padding hides key columns
    return Wo(scores.softmax(dim=-1) @ v)  # (B, S, C)


def forward_without_scale(x, Wqkv, Wo, mask=None):
    HS = Wo.in_features
    q, k, v = Wqkv(x).split(HS, dim=-1)
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask[:, None, :], float("-inf"))
    return Wo(scores.softmax(dim=-1) @ v)


def forward_scaled_by_sqrt_C(x, Wqkv, Wo, mask=None):
    HS = Wo.in_features
    q, k, v = Wqkv(x).split(HS, dim=-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(x.size(-1))  # √C: the width of the tokens, not of the head
    if mask is not None:
        scores = scores.masked_fill(~mask[:, None, :], float("-inf"))
    return Wo(scores.softmax(dim=-1) @ v)


def forward_masking_queries_softly(x, Wqkv, Wo, mask=None):
    HS = Wo.in_features
    q, k, v = Wqkv(x).split(HS, dim=-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(HS)
    if mask is not None:
        scores = scores.masked_fill(~mask[:, :, None], -1e9)  # hides the padded queries' rows, no NaN
    return Wo(scores.softmax(dim=-1) @ v)


def forward_masking_query_rows(x, Wqkv, Wo, mask=None):
    HS = Wo.in_features
    q, k, v = Wqkv(x).split(HS, dim=-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(HS)
    if mask is not None:
        scores = scores.masked_fill(~mask[:, :, None], float("-inf"))  # hides rows: padded queries get NaN
    return Wo(scores.softmax(dim=-1) @ v)


def forward_without_wo(x, Wqkv, Wo, mask=None):
    HS = Wo.in_features
    q, k, v = Wqkv(x).split(HS, dim=-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(HS)
    if mask is not None:
        scores = scores.masked_fill(~mask[:, None, :], float("-inf"))
    return scores.softmax(dim=-1) @ v


def forward_ignoring_the_mask(x, Wqkv, Wo, mask=None):
    return forward(x, Wqkv, Wo)


# --- 02.3: your own attention path ---------------------------------------------------------------------------------


def einsum_attention(q, k, v, *, mask, bias, scale, dropout_p, is_causal):
    S, S_kv = q.size(-2), k.size(-2)
    scale = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = torch.einsum("...id,...jd->...ij", q, k) * scale  # (..., S, S_kv)
    if bias is not None:
        scores = scores + bias  # (..., S, S_kv)
    if is_causal:  # the S queries are the last S positions: query i sees keys 0..S_kv - S + i
        triangle = torch.ones(S, S_kv, dtype=torch.bool, device=q.device).tril(diagonal=S_kv - S)  # (S, S_kv)
        mask = triangle if mask is None else mask & triangle
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
        sees = mask.any(dim=-1, keepdim=True)  # (..., S, 1)
        weights = scores.masked_fill(~sees, 0.0).softmax(dim=-1) * sees  # (..., S, S_kv): zeros for a blind row
    else:
        weights = scores.softmax(dim=-1)  # (..., S, S_kv)
    return torch.einsum("...ij,...jd->...id", weights, v), weights  # (..., S, HS), (..., S, S_kv)


def einsum_attention_ignoring_the_mask(q, k, v, *, mask, bias, scale, dropout_p, is_causal):
    return einsum_attention(q, k, v, mask=None, bias=bias, scale=scale, dropout_p=dropout_p, is_causal=is_causal)


def einsum_attention_with_nan(q, k, v, *, mask, bias, scale, dropout_p, is_causal):
    scores = torch.einsum("...id,...jd->...ij", q, k) / math.sqrt(q.size(-1))
    if is_causal:
        triangle = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril(diagonal=k.size(-2) - q.size(-2))
        mask = triangle if mask is None else mask & triangle
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)  # NaN in a row that sees nothing
    return torch.einsum("...ij,...jd->...id", weights, v), weights


def einsum_attention_not_causal(q, k, v, *, mask, bias, scale, dropout_p, is_causal):
    return einsum_attention(q, k, v, mask=mask, bias=bias, scale=scale, dropout_p=dropout_p, is_causal=False)


def einsum_attention_top_left(q, k, v, *, mask, bias, scale, dropout_p, is_causal):
    if is_causal:  # the triangle from the first key: right only when S == S_kv
        triangle = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril()
        mask = triangle if mask is None else mask & triangle
    return einsum_attention(q, k, v, mask=mask, bias=bias, scale=scale, dropout_p=dropout_p, is_causal=False)


def einsum_attention_without_bias(q, k, v, *, mask, bias, scale, dropout_p, is_causal):
    return einsum_attention(q, k, v, mask=mask, bias=None, scale=scale, dropout_p=dropout_p, is_causal=is_causal)


def einsum_attention_without_scale(q, k, v, *, mask, bias, scale, dropout_p, is_causal):
    return einsum_attention(q, k, v, mask=mask, bias=bias, scale=None, dropout_p=dropout_p, is_causal=is_causal)


def einsum_attention_inverted_mask(q, k, v, *, mask, bias, scale, dropout_p, is_causal):
    mask = None if mask is None else ~mask
    return einsum_attention(q, k, v, mask=mask, bias=bias, scale=scale, dropout_p=dropout_p, is_causal=is_causal)


def einsum_attention_context_only(q, k, v, **kwargs):
    return einsum_attention(q, k, v, **kwargs)[0]


SOLUTIONS = {"check_02_1": split_qkv, "check_02_2": forward, "check_02_3": einsum_attention}

WRONG = {
    "check_02_1": [(split_qkv_interleaved, "not (HS, 3)"), (split_qkv_over_tokens, "split the last axis")],
    "check_02_2": [
        (forward_without_scale, "forgot to scale"),
        (forward_scaled_by_sqrt_C, "1/√C"),
        (forward_masking_query_rows, "mask[:, None, :]"),
        (forward_masking_queries_softly, "instead of the padded keys"),
        (forward_without_wo, "project it back"),
        (forward_ignoring_the_mask, "does not change with the mask"),
    ],
    "check_02_3": [
        (einsum_attention_ignoring_the_mask, "hide the keys where the mask is False"),
        (einsum_attention_with_nan, "NaN in the context"),
        (einsum_attention_not_causal, "must hide the future"),
        (einsum_attention_top_left, "tril(diagonal=S_kv - S)"),
        (einsum_attention_without_bias, "the bias is added to the scores"),
        (einsum_attention_without_scale, "scale=None means 1/√HS"),
        (einsum_attention_inverted_mask, "True must mean 'may attend'"),
        (einsum_attention_context_only, "returns a pair"),
    ],
}
