"""Solutions to the exercises of notebook 03, and typical wrong answers with the hint each must get."""

import math

import torch
from torch import nn
from torch.nn.functional import scaled_dot_product_attention

# --- 03.1: another fused layout -------------------------------------------------------------------------------------


def split_interleaved(qkv, num_heads):
    B, S, three_C = qkv.shape
    HS = three_C // (3 * num_heads)
    return qkv.reshape(B, S, num_heads, 3, HS).permute(3, 0, 2, 1, 4).unbind(0)  # 3 x (B, NH, S, HS)


def split_as_q_k_v_thirds(qkv, num_heads):
    B, S, three_C = qkv.shape
    HS = three_C // (3 * num_heads)
    return qkv.reshape(B, S, 3, num_heads, HS).permute(2, 0, 3, 1, 4).unbind(0)  # the main path's layout


def split_interleaved_parts_reversed(qkv, num_heads):
    q, k, v = split_interleaved(qkv, num_heads)
    return v, k, q


def split_returns_the_input(qkv, num_heads):
    return qkv


def split_heads_after_sequence(qkv, num_heads):
    B, S, three_C = qkv.shape
    HS = three_C // (3 * num_heads)
    return qkv.reshape(B, S, num_heads, 3, HS).permute(3, 0, 1, 2, 4).unbind(0)  # 3 x (B, S, NH, HS): no transpose


def split_columns_before_parts(qkv, num_heads):
    B, S, three_C = qkv.shape
    HS = three_C // (3 * num_heads)
    return qkv.reshape(B, S, num_heads, HS, 3).permute(4, 0, 2, 1, 3).unbind(0)  # reads (head, column, part)


def split_head_size_of_the_whole(qkv, num_heads):
    B, S, three_C = qkv.shape
    HS = three_C // num_heads  # the width of a head's whole block (3 HS), taken for HS
    return qkv.reshape(B, S, num_heads, 3, HS).permute(3, 0, 2, 1, 4).unbind(0)


# --- 03.2: multi-head attention by hand -----------------------------------------------------------------------------


def multi_head_attention(x, Wqkv, Wo, num_heads):
    B, S, C = x.shape
    HS = C // num_heads
    q, k, v = Wqkv(x).reshape(B, S, 3, num_heads, HS).permute(2, 0, 3, 1, 4)  # 3 x (B, NH, S, HS)
    weights = (q @ k.transpose(-2, -1) / math.sqrt(HS)).softmax(dim=-1)  # (B, NH, S, S)
    context = weights @ v  # (B, NH, S, HS)
    return Wo(context.transpose(1, 2).reshape(B, S, C))  # (B, S, C)


def _mha(x, Wqkv, Wo, num_heads, divisor=None, transpose=True):
    B, S, C = x.shape
    HS = C // num_heads
    q, k, v = Wqkv(x).reshape(B, S, 3, num_heads, HS).permute(2, 0, 3, 1, 4)  # 3 x (B, NH, S, HS)
    scores = q @ k.transpose(-2, -1) / (math.sqrt(HS) if divisor is None else divisor)  # (B, NH, S, S)
    context = scores.softmax(dim=-1) @ v  # (B, NH, S, HS)
    merged = context.transpose(1, 2) if transpose else context
    return Wo(merged.reshape(B, S, C))  # (B, S, C)


def mha_without_scale(x, Wqkv, Wo, num_heads):
    return _mha(x, Wqkv, Wo, num_heads, divisor=1.0)


def mha_scaled_by_hidden_size(x, Wqkv, Wo, num_heads):
    return _mha(x, Wqkv, Wo, num_heads, divisor=math.sqrt(x.shape[-1]))  # √C instead of √HS


def mha_merged_without_transpose(x, Wqkv, Wo, num_heads):
    return _mha(x, Wqkv, Wo, num_heads, transpose=False)


def mha_through_sdpa(x, Wqkv, Wo, num_heads):
    return torch.nn.functional.scaled_dot_product_attention(x, x, x)


def mha_through_imported_sdpa(x, Wqkv, Wo, num_heads):
    B, S, C = x.shape
    q, k, v = Wqkv(x).reshape(B, S, 3, num_heads, C // num_heads).permute(2, 0, 3, 1, 4)
    return Wo(scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, S, C))  # the name imported above


def mha_through_our_layer(x, Wqkv, Wo, num_heads):
    from attention_lib import BidirectionalAttention

    layer = BidirectionalAttention(x.shape[-1], num_heads).to(x.dtype)
    layer.Wqkv.load_state_dict(Wqkv.state_dict())
    layer.Wo.load_state_dict(Wo.state_dict())
    layer.attn_impl = "explicit"  # not even SDPA: the grader must still notice the layer
    return layer(x)


def mha_through_torch_functional(x, Wqkv, Wo, num_heads):
    xt = x.transpose(0, 1)  # (S, B, C): the function's own layout
    out, _ = torch.nn.functional.multi_head_attention_forward(
        xt, xt, xt, x.shape[-1], num_heads, Wqkv.weight, Wqkv.bias, None, None, False, 0.0, Wo.weight, Wo.bias,
        need_weights=False)
    return out.transpose(0, 1)


def mha_through_torch_module(x, Wqkv, Wo, num_heads):
    mha = nn.MultiheadAttention(x.shape[-1], num_heads, batch_first=True, dtype=x.dtype)  # a fresh module
    with torch.no_grad():  # a copy of the weights: Wqkv and Wo would never learn through it either
        mha.in_proj_weight.copy_(Wqkv.weight)
        mha.in_proj_bias.copy_(Wqkv.bias)
        mha.out_proj.weight.copy_(Wo.weight)
        mha.out_proj.bias.copy_(Wo.bias)
    return mha(x, x, x, need_weights=False)[0]


def mha_under_no_grad(x, Wqkv, Wo, num_heads):
    with torch.no_grad():  # right numbers, but nothing for training to follow back
        return multi_head_attention(x, Wqkv, Wo, num_heads)


def mha_split_without_transpose(x, Wqkv, Wo, num_heads):
    B, S, C = x.shape
    HS = C // num_heads
    q, k, v = (t.reshape(B, num_heads, S, HS) for t in Wqkv(x).chunk(3, dim=-1))  # should be (B, S, NH, HS).transpose
    context = (q @ k.transpose(-2, -1) / math.sqrt(HS)).softmax(dim=-1) @ v
    return Wo(context.transpose(1, 2).reshape(B, S, C))


def mha_heads_after_sequence(x, Wqkv, Wo, num_heads):
    B, S, C = x.shape
    HS = C // num_heads
    q, k, v = Wqkv(x).reshape(B, S, 3, num_heads, HS).permute(2, 0, 1, 3, 4)  # 3 x (B, S, NH, HS): wrong permute
    context = (q @ k.transpose(-2, -1) / math.sqrt(HS)).softmax(dim=-1) @ v  # (B, S, NH, HS): heads attend to heads
    return Wo(context.reshape(B, S, C))


def mha_interleaved_layout(x, Wqkv, Wo, num_heads):
    B, S, C = x.shape
    HS = C // num_heads
    q, k, v = Wqkv(x).reshape(B, S, num_heads, 3, HS).permute(3, 0, 2, 1, 4)  # exercise 03.1's layout
    context = (q @ k.transpose(-2, -1) / math.sqrt(HS)).softmax(dim=-1) @ v
    return Wo(context.transpose(1, 2).reshape(B, S, C))


def mha_softmax_over_queries(x, Wqkv, Wo, num_heads):
    B, S, C = x.shape
    HS = C // num_heads
    q, k, v = Wqkv(x).reshape(B, S, 3, num_heads, HS).permute(2, 0, 3, 1, 4)
    context = (q @ k.transpose(-2, -1) / math.sqrt(HS)).softmax(dim=-2) @ v
    return Wo(context.transpose(1, 2).reshape(B, S, C))


def mha_without_Wo(x, Wqkv, Wo, num_heads):
    B, S, C = x.shape
    HS = C // num_heads
    q, k, v = Wqkv(x).reshape(B, S, 3, num_heads, HS).permute(2, 0, 3, 1, 4)
    context = (q @ k.transpose(-2, -1) / math.sqrt(HS)).softmax(dim=-1) @ v
    return context.transpose(1, 2).reshape(B, S, C)  # the concatenated heads, never projected


def mha_softmax_by_hand(x, Wqkv, Wo, num_heads):
    B, S, C = x.shape
    HS = C // num_heads
    q, k, v = Wqkv(x).reshape(B, S, 3, num_heads, HS).permute(2, 0, 3, 1, 4)
    e = (q @ k.transpose(-2, -1) / math.sqrt(HS)).exp()  # overflows to inf for a large score
    context = e / e.sum(dim=-1, keepdim=True) @ v
    return Wo(context.transpose(1, 2).reshape(B, S, C))


def mha_merged_with_view(x, Wqkv, Wo, num_heads):
    B, S, C = x.shape
    HS = C // num_heads
    q, k, v = Wqkv(x).reshape(B, S, 3, num_heads, HS).permute(2, 0, 3, 1, 4)
    context = (q @ k.transpose(-2, -1) / math.sqrt(HS)).softmax(dim=-1) @ v
    return Wo(context.transpose(1, 2).view(B, S, C))  # a transposed tensor is not contiguous: view refuses


def mha_with_weights(x, Wqkv, Wo, num_heads):
    B, S, C = x.shape
    HS = C // num_heads
    q, k, v = Wqkv(x).reshape(B, S, 3, num_heads, HS).permute(2, 0, 3, 1, 4)
    weights = (q @ k.transpose(-2, -1) / math.sqrt(HS)).softmax(dim=-1)
    return Wo((weights @ v).transpose(1, 2).reshape(B, S, C)), weights  # the layer's return_weights=True pair


# --- 03.3: talk to nn.MultiheadAttention ----------------------------------------------------------------------------


def torch_attention(mha, x, mask):
    return mha(x, x, x, key_padding_mask=~mask, need_weights=False)[0]  # (B, S, C)


def torch_attention_mask_not_inverted(mha, x, mask):
    return mha(x, x, x, key_padding_mask=mask, need_weights=False)[0]


def torch_attention_unmasked(mha, x, mask):
    return mha(x, x, x, need_weights=False)[0]


def torch_attention_pair(mha, x, mask):
    return mha(x, x, x, key_padding_mask=~mask)  # (output, weights)


def torch_attention_with_weights(mha, x, mask):
    return mha(x, x, x, key_padding_mask=~mask)[0]  # need_weights=True by default: NaN for a query that sees nothing


def torch_attention_without_grad(mha, x, mask):
    with torch.no_grad():  # eval mode without autograd: the fast path, NaN for a query that sees nothing
        return mha(x, x, x, key_padding_mask=~mask, need_weights=False)[0]


def torch_attention_nan_to_zero(mha, x, mask):
    return mha(x, x, x, key_padding_mask=~mask)[0].nan_to_num(0.0)  # the NaN hidden, Wo's bias lost


def torch_attention_padding_zeroed(mha, x, mask):
    return torch_attention(mha, x, mask) * mask[..., None]  # the padding queries' outputs set to 0


def torch_attention_outputs_masked(mha, x, mask):
    return mha(x, x, x, need_weights=False)[0] * mask[..., None]  # the padding keys are still seen


def torch_attention_attn_mask(mha, x, mask):
    return mha(x, x, x, attn_mask=~mask, need_weights=False)[0]  # a (B, S) mask where (S, S) pairs are expected


def torch_attention_rows_patched(mha, x, mask):
    out = mha(x, x, x, key_padding_mask=~mask)[0]  # need_weights=True: NaN in a sequence of only padding
    blind = ~mask.any(dim=-1)  # (B,): the sequences whose queries see no key
    return torch.where(blind[:, None, None], mha.out_proj.bias.expand_as(out), out)  # right numbers, NaN gradients


def torch_attention_nan_replaced_by_bias(mha, x, mask):
    out = mha(x, x, x, key_padding_mask=~mask)[0]
    return torch.where(out.isnan(), mha.out_proj.bias.expand_as(out), out)  # the same, found by its NaN


def torch_attention_float_mask(mha, x, mask):
    return mha(x, x, x, key_padding_mask=(~mask).float(), need_weights=False)[0]  # adds 1 to padding, hides none


def torch_attention_large_negative_mask(mha, x, mask):
    return mha(x, x, x, key_padding_mask=(~mask).float() * -1e9, need_weights=False)[0]  # even weights when blind


def torch_attention_not_inverted_with_weights(mha, x, mask):
    return mha(x, x, x, key_padding_mask=mask)[0]  # two mistakes: the mask hides the real keys, need_weights=True


SOLUTIONS = {
    "check_03_1": split_interleaved,
    "check_03_2": multi_head_attention,
    "check_03_3": torch_attention,
}

WRONG = {
    "check_03_1": [
        (split_as_q_k_v_thirds, "[q | k | v] layout"),
        (split_interleaved_parts_reversed, "order q, k, v"),
        (split_returns_the_input, "three tensors"),
        (split_heads_after_sequence, "heads must come before the sequence"),
        (split_columns_before_parts, "(head, part, column)"),
        (split_head_size_of_the_whole, "is invalid for input of size"),
    ],
    "check_03_2": [
        (mha_without_scale, "not scaled"),
        (mha_scaled_by_hidden_size, "divided by √C"),
        (mha_merged_without_transpose, "merged without the transpose"),
        (mha_through_sdpa, "write the attention out"),
        (mha_through_imported_sdpa, "write the attention out"),
        (mha_through_our_layer, "a layer of attention_lib"),
        (mha_through_torch_functional, "write the attention out"),
        (mha_through_torch_module, "nn.MultiheadAttention (or its F.multi_head_attention_forward)"),
        (mha_under_no_grad, "carries no gradient"),
        (mha_split_without_transpose, "split without the transpose"),
        (mha_heads_after_sequence, "heads attend to one another"),
        (mha_interleaved_layout, "interleaved layout of exercise 03.1"),
        (mha_softmax_over_queries, "runs over the queries"),
        (mha_without_Wo, "Wo is missing"),
        (mha_softmax_by_hand, "an exponential overflowed"),
        (mha_merged_with_view, "Use .reshape(...) instead"),
        (mha_with_weights, "not a tuple"),
    ],
    "check_03_3": [
        (torch_attention_mask_not_inverted, "opposite of our mask"),
        (torch_attention_unmasked, "not masked"),
        (torch_attention_pair, "pair"),
        (torch_attention_with_weights, "need_weights=True, its default"),
        (torch_attention_without_grad, "fast path"),
        (torch_attention_nan_to_zero, "drops the bias"),
        (torch_attention_padding_zeroed, "don't zero the outputs"),
        (torch_attention_outputs_masked, "not masked"),
        (torch_attention_attn_mask, "goes in key_padding_mask"),
        (torch_attention_rows_patched, "the output is right, but its gradient has NaN"),
        (torch_attention_nan_replaced_by_bias, "the output is right, but its gradient has NaN"),
        (torch_attention_float_mask, "hides nothing"),
        (torch_attention_large_negative_mask, "spread their weights evenly"),
        (torch_attention_not_inverted_with_weights, "which has no padding: every one of its keys was hidden"),
    ],
}
