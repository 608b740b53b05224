"""Grouped-query and multi-query decoding against multi-head decoding at the same hidden size (notebook 08).

Each row compares two `GroupedQueryAttention` layers that differ only in their number of key/value heads: "ours"
has NKV = NH/4 (GQA) or NKV = 1 (MQA), "theirs" NKV = NH (multi-head attention, the layout of `CausalAttention`).
C = 512, NH = 8 (HS = 64), no RoPE/ALiBi/window (they cost the same on both sides), float32, eval mode, under
torch.no_grad(). One call is a whole generation: a new cache, a prompt of 16 tokens, then 496 tokens decoded one
at a time, for a batch of 8 sequences (512 tokens in all). The inputs are fixed random vectors (the work of
generation without the sampling).

Time: each decoding step reads the whole cache, NKV heads of it; with NKV = NH/4 or 1 the step reads a quarter or
an eighth of what multi-head attention reads, and the folded single-token path copies nothing. The rows fail unless
ours is at least 1.25x faster (time ratio <= 0.8).
Memory: the peak of a call is dominated by the cache, allocated in the call (B x NKV x 512 x HS numbers, twice: 16 MiB
for multi-head attention, 4 MiB for NKV = 2, 2 MiB for NKV = 1); `make` runs a two-token generation on each layer
first, so that one-time setup of the process is not counted as the call's. The rows fail unless ours uses at most
half the peak memory of multi-head attention (memory ratio <= 0.5; the cache alone is 1/4 or 1/8).
"""

from __future__ import annotations

import torch
from harness import Row

from attention_lib import GroupedQueryAttention

B, C, NH = 8, 512, 8
PROMPT, TOKENS = 16, 496


def make_decode(num_kv_heads: int):
    torch.manual_seed(0)
    ours = GroupedQueryAttention(C, NH, num_kv_heads, context_size=PROMPT + TOKENS).eval()
    theirs = GroupedQueryAttention(C, NH, NH, context_size=PROMPT + TOKENS).eval()
    xs = torch.randn(B, PROMPT + TOKENS, C)  # (B, S, C): the prompt, then one input per decoded token

    def generate(layer: GroupedQueryAttention):
        def call():
            with torch.no_grad():
                cache = layer.new_cache(B)
                out = layer.decode(xs[:, :PROMPT], cache)  # (B, PROMPT, C)
                for t in range(PROMPT, PROMPT + TOKENS):
                    out = layer.decode(xs[:, t : t + 1], cache)  # (B, 1, C)
                return out

        return call

    for layer in (ours, theirs):  # one short generation each, so that one-time setup is not measured as the call's
        with torch.no_grad():
            layer.decode(xs[:, :2], layer.new_cache(B, max_length=2))
    return generate(ours), generate(theirs)


def rows() -> list[Row]:
    common = dict(max_time_ratio=0.8, max_memory_ratio=0.5, warmup=1, min_repeats=3, max_repeats=9, budget_s=10.0)
    tokens = f"{PROMPT}+{TOKENS} tokens"
    return [
        Row(f"GQA decode NKV={NH // 4} vs MHA, {tokens}", make_decode, {"num_kv_heads": NH // 4}, **common),
        Row(f"MQA decode NKV=1 vs MHA, {tokens}", make_decode, {"num_kv_heads": 1}, **common),
    ]
