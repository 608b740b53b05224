"""tiled_attention (notebook 07, default block size) against the explicit path and SDPA: one training step's work.

q, k, v: (B, NH, S, HS) with B=1, NH=8, HS=64, float32, S = S_kv in {1024, 2048, 4096}, requiring grad. Each call
clears the three gradients, runs the forward and backpropagates a fixed upstream gradient (B, NH, S, HS).
"ours" is `tiled_attention`; "theirs" is `explicit_attention` (the weights written out) or
`F.scaled_dot_product_attention` (on this CPU its flash backend, `_scaled_dot_product_flash_attention_for_cpu`).

Targets (notebook 07): at S=4096 the tiled path's peak memory is at most 1/10 of the explicit path's and at most 3x
SDPA's; at S=2048 its time is at most 3x SDPA's. Other rows are measured and shown, not checked.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from harness import Row

from attention_lib.efficient import tiled_attention
from attention_lib.functional import explicit_attention

B, NH, HS = 1, 8, 64
SEQ_LENS = (1024, 2048, 4096)


def _pair(S: int, theirs: str, is_causal: bool = False):
    """The (ours, theirs) training steps on the same seeded inputs."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, NH, S, HS, requires_grad=True) for _ in range(3))  # each (B, NH, S, HS)
    grad_out = torch.randn(B, NH, S, HS)  # (B, NH, S, HS): the upstream gradient
    forwards = {
        "tiled": lambda: tiled_attention(q, k, v, is_causal=is_causal),  # (B, NH, S, HS)
        "explicit": lambda: explicit_attention(q, k, v, is_causal=is_causal)[0],  # (B, NH, S, HS)
        "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=is_causal),  # (B, NH, S, HS)
    }

    def step(forward):
        def call() -> None:
            q.grad = k.grad = v.grad = None
            forward().backward(grad_out)

        return call

    return step(forwards["tiled"]), step(forwards[theirs])


def make_vs_explicit(S: int):
    return _pair(S, "explicit")


def make_vs_sdpa(S: int, is_causal: bool = False):
    return _pair(S, "sdpa", is_causal)


def rows() -> list[Row]:
    out = [
        Row(
            f"tiled vs explicit forward+backward S={S}",
            make_vs_explicit,
            {"S": S},
            max_time_ratio=None,
            max_memory_ratio=0.1 if S == 4096 else None,
            min_repeats=3,
        )
        for S in SEQ_LENS
    ]
    out += [
        Row(
            f"tiled vs SDPA forward+backward S={S}",
            make_vs_sdpa,
            {"S": S},
            max_time_ratio=3.0 if S == 2048 else None,
            max_memory_ratio=3.0 if S == 4096 else None,
        )
        for S in SEQ_LENS
    ]
    out.append(
        Row(
            "tiled vs SDPA causal forward+backward S=4096",
            make_vs_sdpa,
            {"S": 4096, "is_causal": True},
            max_time_ratio=None,
            max_memory_ratio=None,
        )
    )
    return out
