"""Solutions to the exercises of notebook 02, and typical wrong answers with the hint each must get."""

import math

import torch

from attention_lib import causal_mask, masked_softmax

# --- 02.1: split the fused output -----------------------------------------------------------------------------------


def split_qkv(qkv, head_size):
    return qkv.reshape(*qkv.shape[:-1], 3, head_size).unbind(dim=-2)  # each (B, S, HS)


def split_qkv_interleaved(qkv, head_size):
    return qkv.reshape(*qkv.shape[:-1], head_size, 3).unbind(dim=-1)  # (HS, 3): q, k, v interleaved


def split_qkv_over_tokens(qkv, head_size):
    return qkv.chunk(3, dim=1)  # splits the tokens, not the features


def split_qkv_pieces_of_3(qkv, head_size):
    return qkv.split(3, dim=-1)  # pieces of size 3, not 3 pieces: HS tensors of (B, S, 3)


def split_qkv_without_unbind(qkv, head_size):
    return qkv.reshape(*qkv.shape[:-1], 3, head_size)  # (B, S, 3, HS): one tensor


def split_qkv_notebook_sizes(qkv, head_size):
    B, S, HS = 2, 5, 2  # the notebook's globals, copied with the cell
    return qkv.reshape(B, S, 3, HS).unbind(dim=2)


def split_qkv_with_view(qkv, head_size):
    rows = qkv.view(-1, 3, head_size)  # (B * S, 3, HS): merging B and S needs contiguous memory
    return tuple(t.view(*qkv.shape[:-1], head_size) for t in rows.unbind(dim=1))


def split_qkv_off_by_one(qkv, head_size):
    q, k = qkv[..., :head_size], qkv[..., head_size : 2 * head_size]
    return q, k, qkv[..., 2 * head_size + 1 :]  # v loses its first feature


def split_qkv_three_first(qkv, head_size):
    return qkv.reshape(3, *qkv.shape[:-1], head_size).unbind(0)  # (3, B, S, HS): cuts memory, not each token's row


def split_qkv_detached(qkv, head_size):
    return tuple(t.detach() for t in qkv.split(head_size, dim=-1))  # right numbers, cut from the graph


# --- 02.2: the forward pass as one function ------------------------------------------------------------------------


def forward(x, Wqkv, Wo, mask=None):
    HS = Wo.in_features
    q, k, v = Wqkv(x).split(HS, dim=-1)  # each (B, S, HS)
    scores = q @ k.transpose(-2, -1) / math.sqrt(HS)  # (B, S, S_kv)
    weights = masked_softmax(scores, None if mask is None else mask[:, None, :])  # padding hides key columns
    return Wo(weights @ v)  # (B, S, C); a query that sees nothing gets zero weights, so Wo's bias


def _scores(x, Wqkv, Wo, divisor):
    HS = Wo.in_features
    q, k, v = Wqkv(x).split(HS, dim=-1)  # each (B, S, HS)
    return q @ k.transpose(-2, -1) / divisor, v  # (B, S, S_kv), (B, S, HS)


def forward_without_scale(x, Wqkv, Wo, mask=None):
    scores, v = _scores(x, Wqkv, Wo, 1.0)
    return Wo(masked_softmax(scores, None if mask is None else mask[:, None, :]) @ v)


def forward_scaled_by_sqrt_C(x, Wqkv, Wo, mask=None):
    scores, v = _scores(x, Wqkv, Wo, math.sqrt(x.size(-1)))  # √C: the width of the tokens, not of the head
    return Wo(masked_softmax(scores, None if mask is None else mask[:, None, :]) @ v)


def forward_scaled_by_first_axis(x, Wqkv, Wo, mask=None):
    HS = Wo.in_features
    q, k, v = Wqkv(x).split(HS, dim=-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(0))  # q.size(0) is B, not HS
    return Wo(masked_softmax(scores, None if mask is None else mask[:, None, :]) @ v)


def forward_divided_by_HS(x, Wqkv, Wo, mask=None):
    scores, v = _scores(x, Wqkv, Wo, Wo.in_features)  # HS, not √HS
    return Wo(masked_softmax(scores, None if mask is None else mask[:, None, :]) @ v)


def forward_masking_queries_softly(x, Wqkv, Wo, mask=None):
    scores, v = _scores(x, Wqkv, Wo, math.sqrt(Wo.in_features))
    if mask is not None:
        scores = scores.masked_fill(~mask[:, :, None], -1e9)  # hides the padded queries' rows, no NaN
    return Wo(scores.softmax(dim=-1) @ v)


def forward_masking_query_rows(x, Wqkv, Wo, mask=None):
    scores, v = _scores(x, Wqkv, Wo, math.sqrt(Wo.in_features))
    if mask is not None:
        scores = scores.masked_fill(~mask[:, :, None], float("-inf"))  # hides rows: padded queries get NaN
    return Wo(scores.softmax(dim=-1) @ v)


def forward_without_wo(x, Wqkv, Wo, mask=None):
    scores, v = _scores(x, Wqkv, Wo, math.sqrt(Wo.in_features))
    return masked_softmax(scores, None if mask is None else mask[:, None, :]) @ v


def forward_ignoring_the_mask(x, Wqkv, Wo, mask=None):
    return forward(x, Wqkv, Wo)


def forward_nan_for_padding_only(x, Wqkv, Wo, mask=None):
    scores, v = _scores(x, Wqkv, Wo, math.sqrt(Wo.in_features))
    if mask is not None:
        scores = scores.masked_fill(~mask[:, None, :], float("-inf"))  # a sequence of padding only: a row of -inf
    return Wo(scores.softmax(dim=-1) @ v)


def forward_minus_1e9(x, Wqkv, Wo, mask=None):
    scores, v = _scores(x, Wqkv, Wo, math.sqrt(Wo.in_features))
    if mask is not None:
        scores = scores.masked_fill(~mask[:, None, :], -1e9)  # a sequence of padding only: uniform weights
    return Wo(scores.softmax(dim=-1) @ v)


def forward_multiplying_by_the_mask(x, Wqkv, Wo, mask=None):
    scores, v = _scores(x, Wqkv, Wo, math.sqrt(Wo.in_features))
    if mask is not None:
        scores = scores * mask[:, None, :]  # a hidden score of 0 still gets e^0
    return Wo(scores.softmax(dim=-1) @ v)


def forward_mask_not_spread(x, Wqkv, Wo, mask=None):
    scores, v = _scores(x, Wqkv, Wo, math.sqrt(Wo.in_features))
    return Wo(masked_softmax(scores, mask) @ v)  # (B, S_kv) against (B, S, S_kv): the batch meets the queries


def forward_mask_always(x, Wqkv, Wo, mask=None):
    scores, v = _scores(x, Wqkv, Wo, math.sqrt(Wo.in_features))
    return Wo(masked_softmax(scores, mask[:, None, :]) @ v)  # mask=None has no [:, None, :]


def forward_with_dot_T(x, Wqkv, Wo, mask=None):
    HS = Wo.in_features
    q, k, v = Wqkv(x).split(HS, dim=-1)
    scores = q @ k.T / math.sqrt(HS)  # the 2-D notation of notebook 01: k.T reverses every axis of (B, S, HS)
    return Wo(masked_softmax(scores, None if mask is None else mask[:, None, :]) @ v)


def forward_with_notebook_sizes(x, Wqkv, Wo, mask=None):
    B, S, HS = 2, 5, 2  # the notebook's globals
    q, k, v = Wqkv(x).reshape(B, S, 3, HS).unbind(dim=2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(HS)
    return Wo(masked_softmax(scores, None if mask is None else mask[:, None, :]) @ v)


def forward_softmax_over_queries(x, Wqkv, Wo, mask=None):
    scores, v = _scores(x, Wqkv, Wo, math.sqrt(Wo.in_features))
    if mask is not None:
        scores = scores.masked_fill(~mask[:, None, :], float("-inf"))
    return Wo(scores.softmax(dim=1) @ v)  # over the queries


def forward_interleaved(x, Wqkv, Wo, mask=None):
    HS = Wo.in_features
    q, k, v = Wqkv(x).reshape(*x.shape[:-1], HS, 3).unbind(dim=-1)  # (HS, 3): the layout of 02.1's mistake
    scores = q @ k.transpose(-2, -1) / math.sqrt(HS)
    return Wo(masked_softmax(scores, None if mask is None else mask[:, None, :]) @ v)


def forward_exp_by_hand(x, Wqkv, Wo, mask=None):
    scores, v = _scores(x, Wqkv, Wo, math.sqrt(Wo.in_features))
    e = scores.exp()  # e^100 is inf in float32
    if mask is not None:
        e = e * mask[:, None, :]
    return Wo(e / e.sum(dim=-1, keepdim=True).clamp_min(1e-30) @ v)


def forward_returns_weights(x, Wqkv, Wo, mask=None):
    scores, v = _scores(x, Wqkv, Wo, math.sqrt(Wo.in_features))
    weights = masked_softmax(scores, None if mask is None else mask[:, None, :])
    return Wo(weights @ v), weights  # the layer with return_weights=True, not the exercise


def forward_scaling_wqkv_in_place(x, Wqkv, Wo, mask=None):
    HS = Wo.in_features
    with torch.no_grad():  # folds 1/√HS into the queries' weights, in the caller's layer
        Wqkv.weight[:HS] /= math.sqrt(HS)
        Wqkv.bias[:HS] /= math.sqrt(HS)
    scores, v = _scores(x, Wqkv, Wo, 1.0)
    return Wo(masked_softmax(scores, None if mask is None else mask[:, None, :]) @ v)


def forward_mixes_keys(x, Wqkv, Wo, mask=None):
    HS = Wo.in_features
    q, k, v = Wqkv(x).split(HS, dim=-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(HS)
    return Wo(masked_softmax(scores, None if mask is None else mask[:, None, :]) @ k)  # the keys, not the values


def forward_under_no_grad(x, Wqkv, Wo, mask=None):
    with torch.no_grad():  # right numbers, but nothing for training to follow back
        return forward(x, Wqkv, Wo, mask)


def forward_detaching_qkv(x, Wqkv, Wo, mask=None):
    HS = Wo.in_features
    q, k, v = Wqkv(x).detach().split(HS, dim=-1)  # cut from the graph: Wqkv and x get no gradient
    scores = q @ k.transpose(-2, -1) / math.sqrt(HS)
    return Wo(masked_softmax(scores, None if mask is None else mask[:, None, :]) @ v)


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
    weights = masked_softmax(scores, mask)  # (..., S, S_kv): zeros for a query that sees nothing
    return torch.einsum("...ij,...jd->...id", weights, v), weights  # (..., S, HS), (..., S, S_kv)


def einsum_attention_ignoring_the_mask(q, k, v, *, mask, bias, scale, dropout_p, is_causal):
    return einsum_attention(q, k, v, mask=None, bias=bias, scale=scale, dropout_p=dropout_p, is_causal=is_causal)


def einsum_attention_with_nan(q, k, v, *, mask, bias, scale, dropout_p, is_causal):
    scale = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = torch.einsum("...id,...jd->...ij", q, k) * scale + (0 if bias is None else bias)
    if is_causal:
        triangle = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril(diagonal=k.size(-2) - q.size(-2))
        mask = triangle if mask is None else mask & triangle
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)  # NaN in a row that sees nothing
    return torch.einsum("...ij,...jd->...id", weights, v), weights


def einsum_attention_not_causal(q, k, v, *, mask, bias, scale, dropout_p, is_causal):
    return einsum_attention(q, k, v, mask=mask, bias=bias, scale=scale, dropout_p=dropout_p, is_causal=False)


def _with_triangle(q, k, v, triangle, *, mask, bias, scale, dropout_p):
    mask = triangle if mask is None else mask & triangle
    return einsum_attention(q, k, v, mask=mask, bias=bias, scale=scale, dropout_p=dropout_p, is_causal=False)


def einsum_attention_top_left(q, k, v, *, mask, bias, scale, dropout_p, is_causal):
    if not is_causal:
        return einsum_attention(q, k, v, mask=mask, bias=bias, scale=scale, dropout_p=dropout_p, is_causal=False)
    triangle = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril()  # from the first key: right if S == S_kv
    return _with_triangle(q, k, v, triangle, mask=mask, bias=bias, scale=scale, dropout_p=dropout_p)


def einsum_attention_diagonal_flipped(q, k, v, *, mask, bias, scale, dropout_p, is_causal):
    if not is_causal:
        return einsum_attention(q, k, v, mask=mask, bias=bias, scale=scale, dropout_p=dropout_p, is_causal=False)
    S, S_kv = q.size(-2), k.size(-2)
    triangle = torch.ones(S, S_kv, dtype=torch.bool).tril(diagonal=S - S_kv)  # the sign of the shift flipped
    return _with_triangle(q, k, v, triangle, mask=mask, bias=bias, scale=scale, dropout_p=dropout_p)


def einsum_attention_square_triangle(q, k, v, *, mask, bias, scale, dropout_p, is_causal):
    if not is_causal:
        return einsum_attention(q, k, v, mask=mask, bias=bias, scale=scale, dropout_p=dropout_p, is_causal=False)
    triangle = causal_mask(q.size(-2))  # (1, S, S): the triangle of self-attention, not (S, S_kv)
    return _with_triangle(q, k, v, triangle, mask=mask, bias=bias, scale=scale, dropout_p=dropout_p)


def einsum_attention_or(q, k, v, *, mask, bias, scale, dropout_p, is_causal):
    if not is_causal or mask is None:
        return einsum_attention(q, k, v, mask=mask, bias=bias, scale=scale, dropout_p=dropout_p, is_causal=is_causal)
    triangle = causal_mask(q.size(-2), k.size(-2))  # (1, S, S_kv)
    return einsum_attention(q, k, v, mask=mask | triangle, bias=bias, scale=scale, dropout_p=dropout_p,
                            is_causal=False)  # visible where either allows it


def einsum_attention_causal_without_mask_only(q, k, v, *, mask, bias, scale, dropout_p, is_causal):
    causal = is_causal and mask is None  # with a mask, the triangle is dropped
    return einsum_attention(q, k, v, mask=mask, bias=bias, scale=scale, dropout_p=dropout_p, is_causal=causal)


def einsum_attention_without_bias(q, k, v, *, mask, bias, scale, dropout_p, is_causal):
    return einsum_attention(q, k, v, mask=mask, bias=None, scale=scale, dropout_p=dropout_p, is_causal=is_causal)


def einsum_attention_bias_scaled(q, k, v, *, mask, bias, scale, dropout_p, is_causal):
    scale = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = torch.einsum("...id,...jd->...ij", q, k)
    if bias is not None:
        scores = scores + bias  # before the scaling: the bias gets scaled too
    if is_causal:
        triangle = causal_mask(q.size(-2), k.size(-2))
        mask = triangle if mask is None else mask & triangle
    weights = masked_softmax(scores * scale, mask)
    return torch.einsum("...ij,...jd->...id", weights, v), weights


def einsum_attention_without_scale(q, k, v, *, mask, bias, scale, dropout_p, is_causal):
    return einsum_attention(q, k, v, mask=mask, bias=bias, scale=None, dropout_p=dropout_p, is_causal=is_causal)


def einsum_attention_divided_by_scale(q, k, v, *, mask, bias, scale, dropout_p, is_causal):
    divisor = math.sqrt(q.size(-1)) if scale is None else scale  # scale read as the divisor, like √HS
    return einsum_attention(q, k, v, mask=mask, bias=bias, scale=1 / divisor, dropout_p=dropout_p,
                            is_causal=is_causal)


def einsum_attention_default_scale_one(q, k, v, *, mask, bias, scale, dropout_p, is_causal):
    return einsum_attention(q, k, v, mask=mask, bias=bias, scale=scale or 1.0, dropout_p=dropout_p,
                            is_causal=is_causal)  # None read as "no scaling"


def einsum_attention_inverted_mask(q, k, v, *, mask, bias, scale, dropout_p, is_causal):
    mask = None if mask is None else ~mask
    return einsum_attention(q, k, v, mask=mask, bias=bias, scale=scale, dropout_p=dropout_p, is_causal=is_causal)


def einsum_attention_minus_1e9(q, k, v, *, mask, bias, scale, dropout_p, is_causal):
    scale = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = torch.einsum("...id,...jd->...ij", q, k) * scale + (0 if bias is None else bias)
    if is_causal:
        triangle = causal_mask(q.size(-2), k.size(-2))
        mask = triangle if mask is None else mask & triangle
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)  # a row that sees nothing gets equal weights
    weights = scores.softmax(dim=-1)
    return torch.einsum("...ij,...jd->...id", weights, v), weights


def einsum_attention_exp_by_hand(q, k, v, *, mask, bias, scale, dropout_p, is_causal):
    scale = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = torch.einsum("...id,...jd->...ij", q, k) * scale + (0 if bias is None else bias)
    if is_causal:
        triangle = causal_mask(q.size(-2), k.size(-2))
        mask = triangle if mask is None else mask & triangle
    e = scores.exp() if mask is None else scores.exp() * mask  # e^100 is inf in float32
    weights = e / e.sum(dim=-1, keepdim=True).clamp_min(1e-30)  # a blind row: 0 / 1e-30 = 0
    return torch.einsum("...ij,...jd->...id", weights, v), weights


def einsum_attention_three_axes(q, k, v, *, mask, bias, scale, dropout_p, is_causal):
    scale = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = torch.einsum("bid,bjd->bij", q, k) * scale + (0 if bias is None else bias)  # (B, S, HS) only
    if is_causal:
        triangle = causal_mask(q.size(-2), k.size(-2))
        mask = triangle if mask is None else mask & triangle
    weights = masked_softmax(scores, mask)
    return torch.einsum("bij,bjd->bid", weights, v), weights


def einsum_attention_scales_q_in_place(q, k, v, *, mask, bias, scale, dropout_p, is_causal):
    q *= 1 / math.sqrt(q.size(-1)) if scale is None else scale  # changes the caller's q
    return einsum_attention(q, k, v, mask=mask, bias=bias, scale=1.0, dropout_p=dropout_p, is_causal=is_causal)


def einsum_attention_context_only(q, k, v, **kwargs):
    return einsum_attention(q, k, v, **kwargs)[0]


def einsum_attention_weights_first(q, k, v, **kwargs):
    context, weights = einsum_attention(q, k, v, **kwargs)
    return weights, context


def einsum_attention_returns_scores(q, k, v, *, mask, bias, scale, dropout_p, is_causal):
    context, _ = einsum_attention(q, k, v, mask=mask, bias=bias, scale=scale, dropout_p=dropout_p,
                                  is_causal=is_causal)
    scale = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    return context, torch.einsum("...id,...jd->...ij", q, k) * scale  # the scores, not the weights


def einsum_attention_context_detached(q, k, v, **kwargs):
    context, weights = einsum_attention(q, k, v, **kwargs)
    return context.detach(), weights  # right numbers, cut from the graph


def einsum_attention_bias_detached(q, k, v, *, mask, bias, scale, dropout_p, is_causal):
    bias = None if bias is None else bias.detach()  # a learned bias (ALiBi's slopes, a relative bias) gets no gradient
    return einsum_attention(q, k, v, mask=mask, bias=bias, scale=scale, dropout_p=dropout_p, is_causal=is_causal)


SOLUTIONS = {"check_02_1": split_qkv, "check_02_2": forward, "check_02_3": einsum_attention}

WRONG = {
    "check_02_1": [
        (split_qkv_interleaved, "not (HS, 3)"),
        (split_qkv_over_tokens, "split the last axis"),
        (split_qkv_pieces_of_3, "you returned 4 tensors, not 3"),
        (split_qkv_without_unbind, "you returned one tensor of shape (2, 3, 3, 4)"),
        (split_qkv_notebook_sizes, "not from the notebook's B, S and HS"),
        (split_qkv_with_view, "use .reshape"),
        (split_qkv_off_by_one, "it has 3 features per token"),
        (split_qkv_three_first, "q of token 1 of sequence 0 holds the numbers at positions [4, 5, 6, 7] of the row of "
                                "token 0"),
        (split_qkv_detached, "carries no gradient"),
    ],
    "check_02_2": [
        (forward_without_scale, "forgot to scale"),
        (forward_scaled_by_sqrt_C, "1/√C"),
        (forward_scaled_by_first_axis, "the size of axis 0 of q, the batch B"),
        (forward_divided_by_HS, "you divided the scores by HS"),
        (forward_masking_query_rows, "mask[:, None, :]"),
        (forward_masking_queries_softly, "instead of the padded keys"),
        (forward_without_wo, "project it back"),
        (forward_ignoring_the_mask, "does not change with the mask"),
        (forward_nan_for_padding_only, "a sequence of padding only has queries that see no key"),
        (forward_minus_1e9, "(-1e9)"),
        (forward_multiplying_by_the_mask, "a score of 0 is not hidden"),
        (forward_mask_not_spread, "Spread it over the query rows with mask[:, None, :]"),
        (forward_mask_always, "mask is optional"),
        (forward_with_dot_T, "k.T reverses all three axes"),
        (forward_with_notebook_sizes, "not from the notebook's B, S and HS"),
        (forward_softmax_over_queries, "wrong axis"),
        (forward_interleaved, "interleaved"),
        (forward_exp_by_hand, "an exponential overflowed"),
        (forward_returns_weights, "not a tuple"),
        (forward_scaling_wqkv_in_place, "changed the weights of `Wqkv` in place"),
        (forward_mixes_keys, "off by up to"),
        (forward_under_no_grad, "carries no gradient"),
        (forward_detaching_qkv, "is right, but its gradient is off by up to"),
    ],
    "check_02_3": [
        (einsum_attention_ignoring_the_mask, "hide the keys where the mask is False"),
        (einsum_attention_with_nan, "NaN in the context"),
        (einsum_attention_not_causal, "must hide the future"),
        (einsum_attention_causal_without_mask_only, "and with a mask too (AND the two)"),
        (einsum_attention_top_left, "at the top left, tril()"),
        (einsum_attention_diagonal_flipped, "you shifted the triangle by S - S_kv"),
        (einsum_attention_square_triangle, "not (S, S)"),
        (einsum_attention_or, "with & (AND), not | (OR)"),
        (einsum_attention_without_bias, "you left out the bias"),
        (einsum_attention_bias_scaled, "you scaled the bias"),
        (einsum_attention_without_scale, "a given scale replaces 1/√HS"),
        (einsum_attention_divided_by_scale, "you divided by scale"),
        (einsum_attention_default_scale_one, "scale=None means 1/√HS"),
        (einsum_attention_inverted_mask, "True must mean 'may attend'"),
        (einsum_attention_minus_1e9, "(-1e9)"),
        (einsum_attention_exp_by_hand, "an exponential overflowed"),
        (einsum_attention_three_axes, "with '...' for them"),
        (einsum_attention_scales_q_in_place, "changed its input `q` in place"),
        (einsum_attention_context_only, "returns a pair"),
        (einsum_attention_weights_first, "the context first"),
        (einsum_attention_returns_scores, "the weights with no mask"),
        (einsum_attention_context_detached, "carries no gradient"),
        (einsum_attention_bias_detached, "with a bias (1, S, S_kv) is right, but its gradient is off by up to"),
    ],
}
