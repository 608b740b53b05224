"""CausalAttention (default SDPA path) against nn.MultiheadAttention with a causal mask, and the KV cache.

Layers: same weights (`CausalAttention.from_torch`), B=4, C=512, NH=8, float32, S in {512, 1024, 2048}.
nn.MultiheadAttention gets the causal mask as PyTorch documents it: `attn_mask` (bool, True = do not attend, built
once per row, not per call) plus the hint `is_causal=True`, `need_weights=False`.
"forward": inference, both modules in eval() under torch.no_grad() (nn.MultiheadAttention then takes its native
fast path, which applies `attn_mask`; ours passes `is_causal=True` to SDPA). "forward+backward": a training step's
work, both in train() (dropout 0), the input requiring grad, backward from a fixed upstream gradient, gradients
reset to None before each call (both sides then run SDPA with `is_causal=True`).

Decoding: one sequence (B=1), C=512, NH=8, a prompt of 1 token and 512 decoded tokens, under torch.no_grad().
"ours" is `CausalAttention.decode` with a `KVCache` (the prompt, then one token per call); "theirs" is the same
layer without a cache, the full causal `forward` on all tokens so far at every step, keeping the last output. The
inputs are fixed random vectors (the work of generation without the sampling). The row fails unless the cache is
at least 5x faster (time ratio <= 0.2).

One decoding step: B=1, C=512, NH=8, 128 tokens cached, one new token, under torch.no_grad(). "ours" is
`CausalAttention(x_t, cache=cache)` with a `KVCache` (every check, the cache's two steps, the registry of paths);
"theirs" is a bare step written as nanoGPT's CausalSelfAttention, with the same two nn.Linear modules (so the same
weights and the same module calls): c_attn, split, heads, torch.cat onto the cached keys and values, SDPA, c_proj,
with no check at all. A call is 64 such steps (each of ours first crops the cache back to 128 tokens). The row fails
when ours takes more than 1.10 times as long: what the library adds to a step must stay small.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from harness import Row, inference_calls, training_steps
from torch import nn

from attention_lib import CausalAttention, causal_mask

B, C, NH = 4, 512, 8
SEQ_LENS = (512, 1024, 2048)
DECODE_TOKENS = 512
STEP_CACHED, STEP_CALLS = 128, 64


def _layers(S: int):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(C, NH, batch_first=True)
    ours = CausalAttention.from_torch(mha, context_size=S)
    x = torch.randn(B, S, C)  # (B, S, C)
    future = ~causal_mask(S)[0]  # (S, S): True = do not attend, nn.MultiheadAttention's convention
    return ours, mha, x, future


def make_forward(S: int):
    ours, mha, x, future = _layers(S)
    return inference_calls(
        ours, mha, lambda: ours(x), lambda: mha(x, x, x, attn_mask=future, is_causal=True, need_weights=False)[0]
    )  # each (B, S, C)


def make_forward_backward(S: int):
    ours, mha, x, future = _layers(S)
    grad_out = torch.randn(B, S, C)  # (B, S, C): the upstream gradient
    return training_steps(
        ours,
        mha,
        lambda: ours(x),
        lambda: mha(x, x, x, attn_mask=future, is_causal=True, need_weights=False)[0],
        (x,),
        grad_out,
    )


def make_decode(tokens: int):
    torch.manual_seed(0)
    layer = CausalAttention(C, NH, context_size=tokens + 1).eval()
    xs = torch.randn(1, tokens + 1, C)  # (1, 1 + tokens, C): the prompt, then one input per decoded token

    def run_ours():
        with torch.no_grad():
            cache = layer.new_cache(1)
            out = layer.decode(xs[:, :1], cache)  # (1, 1, C): the prompt
            for t in range(1, tokens + 1):
                out = layer.decode(xs[:, t : t + 1], cache)  # (1, 1, C)
            return out

    def run_theirs():
        with torch.no_grad():
            for t in range(1, tokens + 2):
                out = layer(xs[:, :t])[:, -1:]  # (1, 1, C): the whole sequence again, keep the last position
            return out

    return run_ours, run_theirs


class NanoStep(nn.Module):
    """A decoding step as nanoGPT's CausalSelfAttention would take it, the cache grown by torch.cat: no checks."""

    def __init__(self, c_attn: nn.Linear, c_proj: nn.Linear, n_head: int):
        super().__init__()
        self.c_attn, self.c_proj, self.n_head = c_attn, c_proj, n_head

    def forward(self, x, k_cache, v_cache):  # x: (B, 1, C); k_cache, v_cache: (B, NH, T, HS)
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)  # (B, T, C) each
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, NH, T, HS)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, NH, T, HS)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, NH, T, HS)
        k, v = torch.cat([k_cache, k], dim=2), torch.cat([v_cache, v], dim=2)  # (B, NH, T_cached + T, HS)
        y = F.scaled_dot_product_attention(q, k, v)  # (B, NH, T, HS): one query at the end sees every key
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))  # (B, T, C)


def make_decode_step(cached: int, steps: int):
    torch.manual_seed(0)
    layer = CausalAttention(C, NH, context_size=cached + 1).eval()
    bare = NanoStep(layer.Wqkv, layer.Wo, NH)  # the same nn.Linear modules: the same weights
    prompt, x = torch.randn(1, cached, C), torch.randn(1, 1, C)  # (1, T, C), (1, 1, C)
    with torch.no_grad():
        cache = layer.new_cache(1)
        layer(prompt, cache=cache)  # `cached` tokens in the cache
        k_cache, v_cache = cache.keys.clone(), cache.values.clone()  # (1, NH, T, HS) each, for the bare step
        cache.crop(cached)
        assert torch.allclose(layer(x, cache=cache), bare(x, k_cache, v_cache), atol=1e-5)

    def run_ours():
        with torch.no_grad():
            for _ in range(steps):
                cache.crop(cached)  # back to the same 128 tokens: every step does the same work
                out = layer(x, cache=cache)  # (1, 1, C)
            return out

    def run_theirs():
        with torch.no_grad():
            for _ in range(steps):
                out = bare(x, k_cache, v_cache)  # (1, 1, C)
            return out

    return run_ours, run_theirs


def rows() -> list[Row]:
    out = [Row(f"causal forward S={S}", make_forward, {"S": S}) for S in SEQ_LENS]
    out += [Row(f"causal forward+backward S={S}", make_forward_backward, {"S": S}) for S in SEQ_LENS]
    out.append(
        Row(
            f"causal decode {DECODE_TOKENS} tokens, KV cache vs none",
            make_decode,
            {"tokens": DECODE_TOKENS},
            max_time_ratio=0.2,  # the cache must be at least 5x faster
            warmup=0,  # one call is 513 steps (the uncached side takes seconds): its first steps warm up
            min_repeats=3,
            max_repeats=3,
        )
    )
    out.append(
        Row(
            f"causal decode step, C={C}, {STEP_CACHED} cached tokens, vs a bare nanoGPT-style step",
            make_decode_step,
            {"cached": STEP_CACHED, "steps": STEP_CALLS},
            max_time_ratio=1.10,  # the checks, the cache's two steps and the registry cost at most a tenth
            max_memory_ratio=None,  # a step allocates a few KiB on either side: below what the OS reading resolves
            min_repeats=15,
        )
    )
    return out
