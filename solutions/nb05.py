"""Solutions to the exercises of notebook 05, and typical wrong answers with a fragment of the hint each must get."""

import torch
import torch.nn.functional as F

from attention_lib import causal_mask

# --- 05.1: cross attention by hand ----------------------------------------------------------------------------------


def _project(x, context, Wq, Wkv, num_heads):
    """q (B, NH, S, HS) from x, k and v (B, NH, S_kv, HS) from the context, as in the notebook."""
    B, S, C = x.shape
    S_kv, HS = context.shape[1], C // num_heads
    q = Wq(x).reshape(B, S, num_heads, HS).transpose(1, 2)  # (B, NH, S, HS)
    k, v = Wkv(context).chunk(2, dim=-1)  # 2 x (B, S_kv, C): the [k | v] halves
    k = k.reshape(B, S_kv, num_heads, HS).transpose(1, 2)  # (B, NH, S_kv, HS)
    v = v.reshape(B, S_kv, num_heads, HS).transpose(1, 2)  # (B, NH, S_kv, HS)
    return q, k, v


def _merge(ctx, Wo):
    B, NH, S, HS = ctx.shape
    return Wo(ctx.transpose(1, 2).reshape(B, S, NH * HS))  # (B, S, C)


def cross_attention(x, context, Wq, Wkv, Wo, num_heads, context_mask):
    q, k, v = _project(x, context, Wq, Wkv, num_heads)
    mask = context_mask[:, None, None, :]  # (B, 1, 1, S_kv): the same for every head and every query
    ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, NH, S, HS); a query that sees nothing: 0
    return _merge(ctx, Wo)  # (B, S, C)


def _sdpa_cross(x, context, Wq, Wkv, Wo, num_heads, mask):
    q, k, v = _project(x, context, Wq, Wkv, num_heads)
    return _merge(F.scaled_dot_product_attention(q, k, v, attn_mask=mask), Wo)


def cross_attention_causal(x, context, Wq, Wkv, Wo, num_heads, context_mask):
    S, S_kv = x.shape[1], context.shape[1]
    triangle = torch.ones(S, S_kv, dtype=torch.bool).tril()  # the decoder's habit, where it does not belong
    return _sdpa_cross(x, context, Wq, Wkv, Wo, num_heads, context_mask[:, None, None, :] & triangle)


def cross_attention_causal_mask(x, context, Wq, Wkv, Wo, num_heads, context_mask):
    mask = context_mask[:, None, None, :] & causal_mask(x.shape[1], context.shape[1])  # the package's triangle
    return _sdpa_cross(x, context, Wq, Wkv, Wo, num_heads, mask)


def cross_attention_unmasked(x, context, Wq, Wkv, Wo, num_heads, context_mask):
    return _sdpa_cross(x, context, Wq, Wkv, Wo, num_heads, None)  # the padded context tokens get weight


def cross_attention_inverted_mask(x, context, Wq, Wkv, Wo, num_heads, context_mask):
    return _sdpa_cross(x, context, Wq, Wkv, Wo, num_heads, ~context_mask[:, None, None, :])  # nn.MHA's convention


def _explicit(x, context, Wq, Wkv, Wo, num_heads, context_mask, fill=float("-inf"), dim=-1):
    q, k, v = _project(x, context, Wq, Wkv, num_heads)
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5  # (B, NH, S, S_kv)
    scores = scores.masked_fill(~context_mask[:, None, None, :], fill)
    return _merge(scores.softmax(dim=dim) @ v, Wo)


def cross_attention_nan_on_empty_context(x, context, Wq, Wkv, Wo, num_heads, context_mask):
    return _explicit(x, context, Wq, Wkv, Wo, num_heads, context_mask)  # notebook's cell 12: NaN if all padding


def cross_attention_minus_1e9(x, context, Wq, Wkv, Wo, num_heads, context_mask):
    return _explicit(x, context, Wq, Wkv, Wo, num_heads, context_mask, fill=-1e9)  # uniform over the padding


def cross_attention_softmax_over_queries(x, context, Wq, Wkv, Wo, num_heads, context_mask):
    return _explicit(x, context, Wq, Wkv, Wo, num_heads, context_mask, dim=-2)


def cross_attention_exp_renormalised(x, context, Wq, Wkv, Wo, num_heads, context_mask):
    q, k, v = _project(x, context, Wq, Wkv, num_heads)
    e = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).exp() * context_mask[:, None, None, :]  # e^score overflows
    weights = e / e.sum(dim=-1, keepdim=True).clamp_min(1e-12)  # zeros where nothing is seen, inf / inf = NaN
    return _merge(weights @ v, Wo)


def cross_attention_zeroed_output(x, context, Wq, Wkv, Wo, num_heads, context_mask):
    out = _explicit(x, context, Wq, Wkv, Wo, num_heads, context_mask)  # NaN where the context is all padding
    return out.masked_fill(~context_mask.any(dim=-1)[:, None, None], 0.0)  # zeroes the output, not the weights


def cross_attention_merged_without_transpose(x, context, Wq, Wkv, Wo, num_heads, context_mask):
    q, k, v = _project(x, context, Wq, Wkv, num_heads)
    ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=context_mask[:, None, None, :])  # (B, NH, S, HS)
    return Wo(ctx.reshape(x.shape))  # tokens and heads mixed up


def cross_attention_split_without_transpose(x, context, Wq, Wkv, Wo, num_heads, context_mask):
    B, S, C = x.shape
    S_kv, HS = context.shape[1], C // num_heads
    q = Wq(x).reshape(B, num_heads, S, HS)  # no transpose: a head gets pieces of several tokens
    k, v = (t.reshape(B, num_heads, S_kv, HS) for t in Wkv(context).chunk(2, dim=-1))
    ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=context_mask[:, None, None, :])
    return _merge(ctx, Wo)


def _scaled(x, context, Wq, Wkv, Wo, num_heads, context_mask, scale):
    q, k, v = _project(x, context, Wq, Wkv, num_heads)
    return _merge(F.scaled_dot_product_attention(q, k, v, attn_mask=context_mask[:, None, None, :], scale=scale), Wo)


def cross_attention_scaled_by_C(x, context, Wq, Wkv, Wo, num_heads, context_mask):
    return _scaled(x, context, Wq, Wkv, Wo, num_heads, context_mask, 1 / x.shape[-1] ** 0.5)  # √C, not √HS


def cross_attention_unscaled(x, context, Wq, Wkv, Wo, num_heads, context_mask):
    return _scaled(x, context, Wq, Wkv, Wo, num_heads, context_mask, 1.0)


def cross_attention_divided_by_HS(x, context, Wq, Wkv, Wo, num_heads, context_mask):
    return _scaled(x, context, Wq, Wkv, Wo, num_heads, context_mask, num_heads / x.shape[-1])  # 1 / HS


def cross_attention_v_k(x, context, Wq, Wkv, Wo, num_heads, context_mask):
    q, k, v = _project(x, context, Wq, Wkv, num_heads)
    return _merge(F.scaled_dot_product_attention(q, v, k, attn_mask=context_mask[:, None, None, :]), Wo)  # [v | k]


def cross_attention_per_head_layout(x, context, Wq, Wkv, Wo, num_heads, context_mask):
    B, S, C = x.shape
    S_kv, HS = context.shape[1], C // num_heads
    q = Wq(x).reshape(B, S, num_heads, HS).transpose(1, 2)
    kv = Wkv(context).reshape(B, S_kv, num_heads, 2 * HS).transpose(1, 2)  # (B, NH, S_kv, 2HS): heads cut first
    k, v = kv.chunk(2, dim=-1)  # [k_h | v_h] per head: not the layout of Wkv
    return _merge(F.scaled_dot_product_attention(q, k, v, attn_mask=context_mask[:, None, None, :]), Wo)


def cross_attention_without_Wo(x, context, Wq, Wkv, Wo, num_heads, context_mask):
    q, k, v = _project(x, context, Wq, Wkv, num_heads)
    ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=context_mask[:, None, None, :])
    return ctx.transpose(1, 2).reshape(x.shape)  # the merged heads, never projected


def cross_attention_mask_as_in_nb00(x, context, Wq, Wkv, Wo, num_heads, context_mask):
    q, k, v = _project(x, context, Wq, Wkv, num_heads)
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5  # (B, NH, S, S_kv)
    weights = scores.masked_fill(~context_mask[:, None, :], float("-inf")).softmax(-1)  # (B, 1, S_kv) meets NH
    return _merge(weights @ v, Wo)


def cross_attention_kv_reshaped_with_S(x, context, Wq, Wkv, Wo, num_heads, context_mask):
    B, S, C = x.shape
    HS = C // num_heads
    q = Wq(x).reshape(B, S, num_heads, HS).transpose(1, 2)
    k, v = (t.reshape(B, S, num_heads, HS).transpose(1, 2) for t in Wkv(context).chunk(2, dim=-1))  # S, not S_kv
    return _merge(F.scaled_dot_product_attention(q, k, v, attn_mask=context_mask[:, None, None, :]), Wo)


def cross_attention_Wq_on_context(x, context, Wq, Wkv, Wo, num_heads, context_mask):
    return cross_attention(context, x, Wq, Wkv, Wo, num_heads, context_mask)  # the two inputs taken for each other


def cross_attention_mask_from_lengths(x, context, Wq, Wkv, Wo, num_heads, context_mask):
    lengths = context_mask.sum(dim=-1)  # (B,): the number of real tokens, taken to be the first ones
    rebuilt = torch.arange(context.shape[1]) < lengths[:, None]  # (B, S_kv): wrong for left padding and holes
    return cross_attention(x, context, Wq, Wkv, Wo, num_heads, rebuilt)


def cross_attention_minus_1e4(x, context, Wq, Wkv, Wo, num_heads, context_mask):
    return _explicit(x, context, Wq, Wkv, Wo, num_heads, context_mask, fill=-1e4)  # uniform over the padding


def cross_attention_without_gradients(x, context, Wq, Wkv, Wo, num_heads, context_mask):
    with torch.no_grad():  # right numbers, but a model could not learn through them
        return cross_attention(x, context, Wq, Wkv, Wo, num_heads, context_mask)


def cross_attention_detached_context(x, context, Wq, Wkv, Wo, num_heads, context_mask):
    return cross_attention(x, context.detach(), Wq, Wkv, Wo, num_heads, context_mask)  # the encoder learns nothing


def cross_attention_nan_replaced_by_the_bias(x, context, Wq, Wkv, Wo, num_heads, context_mask):
    out = _explicit(x, context, Wq, Wkv, Wo, num_heads, context_mask)  # NaN where the context is all padding
    return torch.where(out.isnan(), Wo.bias, out)  # right numbers; the NaN is still in the graph


def cross_attention_zeroing_the_padding_in_place(x, context, Wq, Wkv, Wo, num_heads, context_mask):
    context[~context_mask] = 0.0  # "masks" the padded tokens by changing the caller's context
    return cross_attention(x, context, Wq, Wkv, Wo, num_heads, context_mask)


# --- 05.2: post-norm ------------------------------------------------------------------------------------------------


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


def post_norm_block_calling_the_block(block, x, context):
    return block(x, context)


def post_norm_block_normalising_the_output(block, x, context):
    x = x + block.norm1(block.self_attn(x))  # norm(f(x)) added: the norm is inside the branch
    x = x + block.norm2(block.cross_attn(x, context))
    return x + block.norm3(block.ffn(x))


def post_norm_block_every_step_reads_the_input(block, x, context):
    h = block.norm1(x + block.self_attn(x))
    h = block.norm2(h + block.cross_attn(x, context))  # f(x) taken literally: the sub-layers read the block's input
    return block.norm3(h + block.ffn(x))


def post_norm_block_cross_first(block, x, context):
    x = block.norm1(x + block.cross_attn(x, context))
    x = block.norm2(x + block.self_attn(x))
    return block.norm3(x + block.ffn(x))


def post_norm_block_norm1_everywhere(block, x, context):
    x = block.norm1(x + block.self_attn(x))
    x = block.norm1(x + block.cross_attn(x, context))
    return block.norm1(x + block.ffn(x))


def post_norm_block_normalised_context(block, x, context):
    x = block.norm1(x + block.self_attn(x))
    x = block.norm2(x + block.cross_attn(x, block.norm2(context)))  # the encoder's output is not the block's stream
    return block.norm3(x + block.ffn(x))


def post_norm_block_in_place(block, x, context):
    x += block.self_attn(x)  # changes the caller's x
    x = block.norm1(x)
    x = block.norm2(x + block.cross_attn(x, context))
    return block.norm3(x + block.ffn(x))


def post_norm_block_default_eps(block, x, context):
    def norm(n, h):  # F.layer_norm's eps is 1e-5 unless given: the block's norms may have another
        return F.layer_norm(h, n.normalized_shape, n.weight, n.bias)

    x = norm(block.norm1, x + block.self_attn(x))
    x = norm(block.norm2, x + block.cross_attn(x, context))
    return norm(block.norm3, x + block.ffn(x))


def post_norm_block_without_gradients(block, x, context):
    with torch.no_grad():  # right numbers, but no weight of the block could learn through them
        return post_norm_block(block, x, context)


def post_norm_block_detached_context(block, x, context):
    return post_norm_block(block, x, context.detach())  # the encoder below would never learn


# --- 05.3: generate through a stack ---------------------------------------------------------------------------------


@torch.no_grad()  # a cache keeps keys and values without gradients: generation runs without them
def decode_stack(blocks, x, context):
    caches = [block.new_cache(len(x)) for block in blocks]  # one KV cache per block
    kvs = [block.cross_attn.project_context(context) for block in blocks]  # the context projected once per block
    outs = []
    for t in range(x.shape[1]):
        h = x[:, t : t + 1]  # (B, 1, C): token t
        for block, cache, kv in zip(blocks, caches, kvs, strict=True):
            h = block(h, kv, cache=cache)  # (B, 1, C)
        outs.append(h)
    return torch.cat(outs, dim=1)  # (B, S, C)


def decode_stack_with_gradients(blocks, x, context):
    return decode_stack.__wrapped__(blocks, x, context)  # the same loop, without torch.no_grad()


@torch.no_grad()
def decode_stack_projecting_every_step(blocks, x, context):
    caches = [block.new_cache(len(x)) for block in blocks]
    outs = []
    for t in range(x.shape[1]):
        h = x[:, t : t + 1]
        for block, cache in zip(blocks, caches, strict=True):
            h = block(h, context, cache=cache)  # projects the context again at every step
        outs.append(h)
    return torch.cat(outs, dim=1)


def decode_stack_whole_sequence(blocks, x, context):
    for block in blocks:
        x = block(x, context)
    return x


@torch.no_grad()
def decode_stack_last_block_only(blocks, x, context):
    cache, kv = blocks[-1].new_cache(len(x)), blocks[-1].cross_attn.project_context(context)
    return torch.cat([blocks[-1](x[:, t : t + 1], kv, cache=cache) for t in range(x.shape[1])], dim=1)


@torch.no_grad()
def decode_stack_layer_by_layer(blocks, x, context):
    h = x
    for block in blocks:  # the blocks outside, the tokens inside: block 2 waits for every token of block 1
        cache, kv = block.new_cache(len(x)), block.cross_attn.project_context(context)
        h = torch.cat([block(h[:, t : t + 1], kv, cache=cache) for t in range(x.shape[1])], dim=1)
    return h


def decode_stack_reversed(blocks, x, context):
    return decode_stack(blocks[::-1], x, context)  # the last block first


@torch.no_grad()
def decode_stack_shared_cache(blocks, x, context):
    cache = blocks[0].new_cache(len(x))  # one cache for the whole stack
    kvs = [block.cross_attn.project_context(context) for block in blocks]
    outs = []
    for t in range(x.shape[1]):
        h = x[:, t : t + 1]
        for block, kv in zip(blocks, kvs, strict=True):
            h = block(h, kv, cache=cache)
        outs.append(h)
    return torch.cat(outs, dim=1)


def decode_stack_without_cache(blocks, x, context):
    kvs = [block.cross_attn.project_context(context) for block in blocks]
    outs = []
    for t in range(x.shape[1]):
        h = x[:, t : t + 1]
        for block, kv in zip(blocks, kvs, strict=True):
            h = block(h, kv)  # no cache: token t sees only itself
        outs.append(h)
    return torch.cat(outs, dim=1)


@torch.no_grad()
def decode_stack_fresh_cache_each_step(blocks, x, context):
    kvs = [block.cross_attn.project_context(context) for block in blocks]
    outs = []
    for t in range(x.shape[1]):
        h = x[:, t : t + 1]
        for block, kv in zip(blocks, kvs, strict=True):
            h = block(h, kv, cache=block.new_cache(len(x)))  # a new, empty cache at every step
        outs.append(h)
    return torch.cat(outs, dim=1)


@torch.no_grad()
def decode_stack_first_projection_for_all(blocks, x, context):
    caches = [block.new_cache(len(x)) for block in blocks]
    kv = blocks[0].cross_attn.project_context(context)  # the first block's keys and values, given to every block
    outs = []
    for t in range(x.shape[1]):
        h = x[:, t : t + 1]
        for block, cache in zip(blocks, caches, strict=True):
            h = block(h, kv, cache=cache)
        outs.append(h)
    return torch.cat(outs, dim=1)


@torch.no_grad()
def decode_stack_not_chained(blocks, x, context):
    caches = [block.new_cache(len(x)) for block in blocks]
    kvs = [block.cross_attn.project_context(context) for block in blocks]
    outs = []
    for t in range(x.shape[1]):
        for block, cache, kv in zip(blocks, caches, kvs, strict=True):
            h = block(x[:, t : t + 1], kv, cache=cache)  # every block reads token t itself
        outs.append(h)
    return torch.cat(outs, dim=1)


def decode_stack_regrowing_prefix(blocks, x, context):
    outs = []
    for t in range(x.shape[1]):
        h = x[:, : t + 1]  # the whole prefix again at every step, no cache: right numbers, S² work
        for block in blocks:
            h = block(h, context)
        outs.append(h[:, -1:])
    return torch.cat(outs, dim=1)


@torch.no_grad()
def decode_stack_feeding_outputs_back(blocks, x, context):
    caches = [block.new_cache(len(x)) for block in blocks]
    kvs = [block.cross_attn.project_context(context) for block in blocks]
    h, outs = x[:, :1], []
    for _ in range(x.shape[1]):
        for block, cache, kv in zip(blocks, caches, kvs, strict=True):
            h = block(h, kv, cache=cache)
        outs.append(h)  # and h, the stack's output, becomes the next step's input instead of token t + 1
    return torch.cat(outs, dim=1)


@torch.no_grad()
def decode_stack_writing_into_x(blocks, x, context):
    caches = [block.new_cache(len(x)) for block in blocks]
    kvs = [block.cross_attn.project_context(context) for block in blocks]
    for t in range(x.shape[1]):
        h = x[:, t : t + 1]
        for block, cache, kv in zip(blocks, caches, kvs, strict=True):
            h = block(h, kv, cache=cache)
        x[:, t : t + 1] = h  # the outputs stored in the caller's x
    return x


SOLUTIONS = {
    "check_05_1": cross_attention,
    "check_05_2": post_norm_block,
    "check_05_3": decode_stack,
}

WRONG = {
    "check_05_1": [
        (cross_attention_causal, "query i only sees context tokens 0..i"),
        (cross_attention_causal_mask, "aligned at the end of the keys"),
        (cross_attention_unmasked, "padding is not masked"),
        (cross_attention_inverted_mask, "the mask is inverted"),
        (cross_attention_nan_on_empty_context, "never NaN"),
        (cross_attention_minus_1e9, "uniform weights over the padded tokens"),
        (cross_attention_zeroed_output, "its output is Wo's bias"),
        (cross_attention_exp_renormalised, "an exponential overflowed"),
        (cross_attention_softmax_over_queries, "runs over the queries"),
        (cross_attention_merged_without_transpose, "merged without the transpose"),
        (cross_attention_split_without_transpose, "split by reshape(B, NH, S, HS) alone"),
        (cross_attention_scaled_by_C, "1/√C = 1/√10"),
        (cross_attention_unscaled, "forgot to scale"),
        (cross_attention_divided_by_HS, "divided the scores by HS"),
        (cross_attention_v_k, "k and v are swapped"),
        (cross_attention_per_head_layout, "cut it per head"),
        (cross_attention_without_Wo, "Wo is missing"),
        (cross_attention_mask_as_in_nb00, "the mask does not fit the scores"),
        (cross_attention_kv_reshaped_with_S, "A reshape does not fit"),
        (cross_attention_Wq_on_context, "Wq reads x"),
        (cross_attention_zeroing_the_padding_in_place, "changed its input `context` in place"),
        (cross_attention_mask_from_lengths, "you rebuilt the mask from the number of real tokens"),
        (cross_attention_minus_1e4, "a large negative number rather than -inf"),
        (cross_attention_without_gradients, "carries no gradient"),
        (cross_attention_detached_context, "is cut from the graph"),
        (cross_attention_nan_replaced_by_the_bias, "its gradient has NaN or inf"),
    ],
    "check_05_2": [
        (post_norm_block_as_pre_norm, "pre-norm block"),
        (post_norm_block_without_residual, "no residual"),
        (post_norm_block_last_norm_missing, "not normalised"),
        (post_norm_block_calling_the_block, "from its parts"),
        (post_norm_block_normalising_the_output, "normalised the sub-layer's output before adding"),
        (post_norm_block_every_step_reads_the_input, "every sub-layer reads the block's input x"),
        (post_norm_block_cross_first, "cross attention runs before the self-attention"),
        (post_norm_block_norm1_everywhere, "every step uses norm1"),
        (post_norm_block_normalised_context, "the context went through norm2"),
        (post_norm_block_in_place, "changed its input `x` in place"),
        (post_norm_block_default_eps, "your layer norm does not use the norms' own eps"),
        (post_norm_block_without_gradients, "carries no gradient"),
        (post_norm_block_detached_context, "is cut from the graph"),
    ],
    "check_05_3": [
        (decode_stack_projecting_every_step, "It does not change between steps"),
        (decode_stack_whole_sequence, "tokens per call"),
        (decode_stack_last_block_only, "only blocks [1] of the 2 ran"),
        (decode_stack_layer_by_layer, "you decoded layer by layer"),
        (decode_stack_reversed, "in the order of the list"),
        (decode_stack_shared_cache, "one cache serves two blocks"),
        (decode_stack_without_cache, "a block ran without a cache"),
        (decode_stack_fresh_cache_each_step, "a new cache at every step"),
        (decode_stack_first_projection_for_all, "its own Wkv"),
        (decode_stack_not_chained, "did not read the output of blocks[0]"),
        (decode_stack_regrowing_prefix, "tokens per call"),
        (decode_stack_feeding_outputs_back, "other than token 1 of x"),
        (decode_stack_writing_into_x, "changed its input `x` in place"),
        (decode_stack_with_gradients, "your code raised RuntimeError: a cache keeps keys and values without gradients"),
    ],
}
