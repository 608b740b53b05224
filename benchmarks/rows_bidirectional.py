"""BidirectionalAttention (default SDPA path) against nn.MultiheadAttention(need_weights=False), same weights.

B=4, C=512, NH=8, float32, S in {512, 1024, 2048}.
"forward": inference, both modules in eval() under torch.no_grad() (nn.MultiheadAttention then takes its native
fast path). "forward+backward": a training step's work, both in train() (dropout 0), the input requiring grad,
backward from a fixed upstream gradient, gradients reset to None before each call.
"""

from __future__ import annotations

import torch
from harness import Row, inference_calls, training_steps
from torch import nn

from attention_lib import BidirectionalAttention

B, C, NH = 4, 512, 8
SEQ_LENS = (512, 1024, 2048)


def _layers(S: int):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(C, NH, batch_first=True)
    ours = BidirectionalAttention.from_torch(mha)
    x = torch.randn(B, S, C)  # (B, S, C)
    return ours, mha, x


def make_forward(S: int):
    ours, mha, x = _layers(S)
    return inference_calls(ours, mha, lambda: ours(x), lambda: mha(x, x, x, need_weights=False)[0])  # (B, S, C)


def make_forward_backward(S: int):
    ours, mha, x = _layers(S)
    grad_out = torch.randn(B, S, C)  # (B, S, C): the upstream gradient
    return training_steps(
        ours, mha, lambda: ours(x), lambda: mha(x, x, x, need_weights=False)[0], (x,), grad_out
    )


def rows() -> list[Row]:
    out = [Row(f"bidirectional forward S={S}", make_forward, {"S": S}) for S in SEQ_LENS]
    out += [Row(f"bidirectional forward+backward S={S}", make_forward_backward, {"S": S}) for S in SEQ_LENS]
    return out
