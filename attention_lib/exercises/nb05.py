"""Graders of the exercises of notebook 05 (cross attention and the decoder block)."""

from __future__ import annotations

import torch
from torch import nn

from ._grading import Hint, expect_close, expect_shape, expect_tensor, grader

__all__ = ["check_05_1", "check_05_2", "check_05_3"]


def _cross(x, context, Wq, Wkv, Wo, num_heads, mask):
    """The reference (and its usual mistakes): cross attention with an explicit softmax; mask (S, S_kv)-broadcast."""
    B, S, C = x.shape
    S_kv, HS = context.shape[1], C // num_heads
    q = Wq(x).reshape(B, S, num_heads, HS).transpose(1, 2)  # (B, NH, S, HS)
    k, v = Wkv(context).reshape(B, S_kv, 2, num_heads, HS).permute(2, 0, 3, 1, 4)  # 2 x (B, NH, S_kv, HS)
    scores = q @ k.transpose(-2, -1) / HS**0.5  # (B, NH, S, S_kv)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return Wo((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, S, C))  # (B, S, C)


@grader("05.1")
def check_05_1(cross_attention) -> str:
    """cross_attention(x, context, Wq, Wkv, Wo, num_heads, context_mask) -> (B, S, C)."""
    B, S, S_kv, C, C_kv, NH = 2, 3, 5, 8, 12, 2
    Wq, Wkv, Wo = nn.Linear(C, C), nn.Linear(C_kv, 2 * C), nn.Linear(C, C)
    x, context = torch.randn(B, S, C), torch.randn(B, S_kv, C_kv)  # (B, S, C), (B, S_kv, C_kv)
    real = torch.arange(S_kv)[None, :] < torch.tensor([5, 4])[:, None]  # (B, S_kv): True = real context token
    with torch.no_grad():
        got = cross_attention(x.clone(), context.clone(), Wq, Wkv, Wo, NH, real.clone())
        got = expect_shape(expect_tensor(got, "the output"), (B, S, C), "the output").detach()
        pad = real[:, None, None, :]  # (B, 1, 1, S_kv)
        ones = torch.ones(S, S_kv, dtype=torch.bool)
        mistakes = [
            (pad & ones.tril(), "it is causal: query i only sees context tokens 0..i. Cross attention is not "
                                "causal: the whole source is known, so every query may see every real context token."),
            (pad & ones.tril(S_kv - S), "it is causal (aligned at the end of the keys). Cross attention is not "
                                        "causal: every query may see every real context token."),
            (None, "the context's padding is not masked: the padded context tokens get weight. Hide them with the "
                   "(B, S_kv) mask, as (B, 1, 1, S_kv)."),
            (~pad, "the mask is inverted: True means a real context token, which may be attended."),
        ]
        for mask, hint in mistakes:
            if torch.allclose(got, _cross(x, context, Wq, Wkv, Wo, NH, mask), atol=1e-5):
                raise Hint(hint)
        expected = _cross(x, context, Wq, Wkv, Wo, NH, pad)  # (B, S, C)
    expect_close(got, expected, "the output", why="Wq reads x, Wkv reads the context and is laid out [k | v]; "
                 "split both into heads of HS = C // num_heads and scale by √HS.")
    return "queries from x, keys and values from the context, its padding hidden, no triangle."


@grader("05.2")
def check_05_2(post_norm_block) -> str:
    """post_norm_block(block, x, context) -> the 2017 order, x = norm(x + f(x)), from the block's parts."""
    from attention_lib import DecoderBlock, causal_mask

    torch_layer = nn.TransformerDecoderLayer(16, 4, 32, dropout=0.0, norm_first=True, batch_first=True).eval()
    with torch.no_grad():  # norms that are not the identity, so that their place shows
        for norm in (torch_layer.norm1, torch_layer.norm2, torch_layer.norm3):
            norm.weight.uniform_(0.5, 1.5), norm.bias.uniform_(-0.5, 0.5)
    block = DecoderBlock.from_torch(torch_layer, context_size=6)  # the same weights
    torch_layer.norm_first = False  # PyTorch's post-norm layer, which the block's parts must reproduce
    x, context = torch.randn(2, 5, 16), torch.randn(2, 7, 16)  # (B, S, C), (B, S_kv, C)
    with torch.no_grad():
        expected = torch_layer(x, context, tgt_mask=~causal_mask(5)[0], tgt_is_causal=True)  # (B, S, C)

        def refuse(*args, **kwargs):
            raise Hint("compute the block from its parts (norm1..3, self_attn, cross_attn, ffn), not with block(...): "
                       "block(...) is the pre-norm order")

        block.forward = refuse
        try:
            got = post_norm_block(block, x.clone(), context.clone())
        finally:
            del block.forward
        got = expect_shape(expect_tensor(got, "the output"), (2, 5, 16), "the output").detach()
        b = block
        h = x + b.self_attn(b.norm1(x))
        h = h + b.cross_attn(b.norm2(h), context)
        if torch.allclose(got, h + b.ffn(b.norm3(h)), atol=1e-5):
            raise Hint("that is the pre-norm block of the main path, x + f(norm(x)). Post-norm adds first and "
                       "normalises the sum: x = norm(x + f(x)).")
        h = b.norm1(b.self_attn(x))
        h = b.norm2(b.cross_attn(h, context))
        if torch.allclose(got, b.norm3(b.ffn(h)), atol=1e-5):
            raise Hint("there is no residual connection: add each sub-layer's input to its output before the norm, "
                       "x = norm(x + f(x)).")
        h = b.norm1(x + b.self_attn(x))
        h = b.norm2(h + b.cross_attn(h, context))
        if torch.allclose(got, h + b.ffn(h), atol=1e-5):
            raise Hint("the last sub-layer is not normalised: the feed-forward step is norm3(x + ffn(x)) too.")
    expect_close(got, expected, "the output", why="Three steps, each x = norm_i(x + f(x)): self_attn, cross_attn "
                 "(with the context), ffn; the grader compares with nn.TransformerDecoderLayer(norm_first=False).")
    return "post-norm, as in the 2017 Transformer and nn.TransformerDecoderLayer(norm_first=False)."


@grader("05.3")
def check_05_3(decode_stack) -> str:
    """decode_stack(blocks, x (B, S, C), context (B, S_kv, C)) -> (B, S, C): a stack of blocks, one token per step."""
    from attention_lib import DecoderBlock

    B, S, S_kv, C = 2, 4, 5, 16
    blocks = [DecoderBlock(C, 4, 32, context_size=S).eval() for _ in range(2)]
    x, context = torch.randn(B, S, C), torch.randn(B, S_kv, C)  # (B, S, C), (B, S_kv, C)
    kv_calls, step_lengths = [[], []], [[], []]  # per block: one entry per call of Wkv, tokens per call of Wqkv
    hooks = []
    for n, block in enumerate(blocks):
        hooks.append(block.cross_attn.Wkv.register_forward_hook(lambda mod, args, out, n=n: kv_calls[n].append(1)))
        hooks.append(block.self_attn.Wqkv.register_forward_hook(
            lambda mod, args, out, n=n: step_lengths[n].append(args[0].shape[1])))
    try:
        with torch.no_grad():
            got = decode_stack(blocks, x.clone(), context.clone())
    finally:
        for hook in hooks:
            hook.remove()
    got = expect_shape(expect_tensor(got, "the output"), (B, S, C), "the output").detach()
    with torch.no_grad():
        expected, alone = x, []
        for block in blocks:
            expected = block(expected, context)  # (B, S, C): block n reads block n - 1's output
            alone.append(block(x, context))
    if any(torch.allclose(got, a, atol=1e-5) for a in alone):
        raise Hint("that is one block on x alone: in a stack, each block reads the previous block's output.")
    if any(n != 1 for lengths in step_lengths for n in lengths):
        raise Hint(f"the blocks' self-attention saw {step_lengths[0]} tokens per call: run one token per step, "
                   "x[:, t:t+1], through every block, with block.decode and a cache per block (block.new_cache(B)).")
    expect_close(got, expected, "the output", why="Each step runs token t through block 1, then its output through "
                 "block 2, each with its own cache; step t's outputs are row t of the whole stack's output.")
    if [len(calls) for calls in kv_calls] != [1, 1]:
        raise Hint(f"the context was projected {[len(calls) for calls in kv_calls]} times by the two blocks. It does not change between steps: "
                   "project it once per block with block.cross_attn.project_context(context), before the loop.")
    return "one token per step through both blocks, one cache each, the context projected once per block."
