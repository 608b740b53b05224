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


def decode_stack(blocks, x, context):
    caches = [block.new_cache(len(x)) for block in blocks]  # one KV cache per block
    kvs = [block.cross_attn.project_context(context) for block in blocks]  # the context projected once per block
    outs = []
    for t in range(x.shape[1]):
        h = x[:, t : t + 1]  # (B, 1, C): token t
        for block, cache, kv in zip(blocks, caches, kvs, strict=True):
            h = block.decode(h, cache, kv)  # (B, 1, C)
        outs.append(h)
    return torch.cat(outs, dim=1)  # (B, S, C)


def decode_stack_projecting_every_step(blocks, x, context):
    caches = [block.new_cache(len(x)) for block in blocks]
    outs = []
    for t in range(x.shape[1]):
        h = x[:, t : t + 1]
        for block, cache in zip(blocks, caches, strict=True):
            h = block.decode(h, cache, context)  # projects the context again at every step
        outs.append(h)
    return torch.cat(outs, dim=1)


def decode_stack_whole_sequence(blocks, x, context):
    for block in blocks:
        x = block(x, context)
    return x


def decode_stack_unchained(blocks, x, context):
    cache, kv = blocks[-1].new_cache(len(x)), blocks[-1].cross_attn.project_context(context)
    return torch.cat([blocks[-1].decode(x[:, t : t + 1], cache, kv) for t in range(x.shape[1])], dim=1)


SOLUTIONS = {
    "check_05_1": cross_attention,
    "check_05_2": post_norm_block,
    "check_05_3": decode_stack,
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
        (decode_stack_projecting_every_step, "projected"),
        (decode_stack_whole_sequence, "one token per step"),
        (decode_stack_unchained, "previous block"),
    ],
}
