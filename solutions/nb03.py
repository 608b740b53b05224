"""Solutions to the exercises of notebook 03, and typical wrong answers the graders must catch."""

import math

import torch


def merge_heads(context):
    B, NH, S, HS = context.shape
    return context.transpose(1, 2).reshape(B, S, NH * HS)  # (B, S, C)


def merge_heads_without_transpose(context):
    B, NH, S, HS = context.shape
    return context.reshape(B, S, NH * HS)  # tokens and heads mixed up


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
    "check_03_1": merge_heads,
    "check_03_2": multi_head_attention,
    "check_03_3": torch_attention,
}

WRONG = {
    "check_03_1": [(merge_heads_without_transpose, "transpose(1, 2)")],
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
