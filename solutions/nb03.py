"""Solutions to the exercises of notebook 03, and typical wrong answers the graders must catch."""

import math

import torch


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


def _mha(x, Wqkv, Wo, num_heads, divisor=None, transpose=True):
    B, S, C = x.shape
    HS = C // num_heads
    q, k, v = Wqkv(x).reshape(B, S, 3, num_heads, HS).permute(2, 0, 3, 1, 4)  # 3 x (B, NH, S, HS)
    scores = q @ k.transpose(-2, -1) / (math.sqrt(HS) if divisor is None else divisor)  # (B, NH, S, S)
    context = scores.softmax(dim=-1) @ v  # (B, NH, S, HS)
    merged = context.transpose(1, 2) if transpose else context
    return Wo(merged.reshape(B, S, C))  # (B, S, C)


def multi_head_attention(x, Wqkv, Wo, num_heads):
    return _mha(x, Wqkv, Wo, num_heads)


def through_our_layer(x, Wqkv, Wo, num_heads):
    from attention_lib import BidirectionalAttention

    layer = BidirectionalAttention(x.shape[-1], num_heads)
    layer.Wqkv.load_state_dict(Wqkv.state_dict())
    layer.Wo.load_state_dict(Wo.state_dict())
    layer.attn_impl = "explicit"  # not even SDPA: the grader must still notice the layer
    return layer(x)


def torch_attention(mha, x, mask):
    return mha(x, x, x, key_padding_mask=~mask, need_weights=False)[0]  # (B, S, C)


SOLUTIONS = {
    "check_03_1": split_interleaved,
    "check_03_2": multi_head_attention,
    "check_03_3": torch_attention,
}

WRONG = {
    "check_03_1": [
        (split_as_q_k_v_thirds, "[q | k | v] layout"),
        (split_interleaved_parts_reversed, "order q, k, v"),
        (lambda qkv, num_heads: qkv, "three tensors"),
    ],
    "check_03_2": [
        (lambda x, Wqkv, Wo, NH: _mha(x, Wqkv, Wo, NH, divisor=1.0), "√HS"),
        (lambda x, Wqkv, Wo, NH: _mha(x, Wqkv, Wo, NH, divisor=math.sqrt(x.shape[-1])), "head size"),
        (lambda x, Wqkv, Wo, NH: _mha(x, Wqkv, Wo, NH, transpose=False), "without the transpose"),
        (lambda x, Wqkv, Wo, NH: torch.nn.functional.scaled_dot_product_attention(x, x, x), "write the attention out"),
        (through_our_layer, "a layer of attention_lib"),
    ],
    "check_03_3": [
        (lambda mha, x, mask: mha(x, x, x, key_padding_mask=mask, need_weights=False)[0], "~mask"),
        (lambda mha, x, mask: mha(x, x, x, need_weights=False)[0], "not masked"),
        (lambda mha, x, mask: mha(x, x, x, key_padding_mask=~mask), "pair"),
    ],
}
