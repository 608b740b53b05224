"""Solutions to the exercises of notebook 05, and typical wrong answers the graders must catch."""

import torch


def _cross(x, context, Wq, Wkv, Wo, num_heads, context_mask, causal=False):
    B, S, C = x.shape
    S_kv, HS = context.shape[1], C // num_heads
    q = Wq(x).reshape(B, S, num_heads, HS).transpose(1, 2)  # (B, NH, S, HS)
    k, v = Wkv(context).reshape(B, S_kv, 2, num_heads, HS).permute(2, 0, 3, 1, 4)  # 2 x (B, NH, S_kv, HS)
    mask = context_mask[:, None, None, :]  # (B, 1, 1, S_kv)
    if causal:
        mask = mask & torch.ones(S, S_kv, dtype=torch.bool).tril()
    ctx = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, NH, S, HS)
    return Wo(ctx.transpose(1, 2).reshape(B, S, C))  # (B, S, C)


def cross_attention(x, context, Wq, Wkv, Wo, num_heads, context_mask):
    return _cross(x, context, Wq, Wkv, Wo, num_heads, context_mask)


def post_norm_block(block, x, context):
    x = block.norm1(x + block.self_attn(x))  # (B, S, C)
    x = block.norm2(x + block.cross_attn(x, context))  # (B, S, C)
    return block.norm3(x + block.ffn(x))  # (B, S, C)


def post_norm_block_as_pre_norm(block, x, context):
    x = x + block.self_attn(block.norm1(x))
    x = x + block.cross_attn(block.norm2(x), context)
    return x + block.ffn(block.norm3(x))


def post_norm_block_without_residual(block, x, context):
    x = block.norm1(block.self_attn(x))
    x = block.norm2(block.cross_attn(x, context))
    return block.norm3(block.ffn(x))


def post_norm_block_last_norm_missing(block, x, context):
    x = block.norm1(x + block.self_attn(x))
    x = block.norm2(x + block.cross_attn(x, context))
    return x + block.ffn(x)


def decode_queries(layer, x, context):
    kv = layer.project_context(context)  # ContextKV, projected once
    return torch.cat([layer(x[:, t : t + 1], kv) for t in range(x.shape[1])], dim=1)  # (B, S, C)


def decode_queries_projecting_every_step(layer, x, context):
    return torch.cat([layer(x[:, t : t + 1], context) for t in range(x.shape[1])], dim=1)


SOLUTIONS = {
    "check_05_1": cross_attention,
    "check_05_2": post_norm_block,
    "check_05_3": decode_queries,
}

WRONG = {
    "check_05_1": [
        (lambda *args: _cross(*args, causal=True), "not causal"),
        (lambda x, c, Wq, Wkv, Wo, NH, m: _cross(x, c, Wq, Wkv, Wo, NH, torch.ones_like(m)), "padding is not masked"),
    ],
    "check_05_2": [
        (post_norm_block_as_pre_norm, "pre-norm"),
        (post_norm_block_without_residual, "no residual"),
        (post_norm_block_last_norm_missing, "not normalised"),
        (lambda block, x, context: block(x, context), "from its parts"),
    ],
    "check_05_3": [
        (decode_queries_projecting_every_step, "project_context"),
        (lambda layer, x, context: layer(x, context), "one at a time"),
    ],
}
