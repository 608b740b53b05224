"""CrossAttention (default SDPA path) against nn.MultiheadAttention(kdim=C_kv, vdim=C_kv, need_weights=False).

Same weights (`CrossAttention.from_torch`), B=4, C=512, NH=8, S=512 queries, float32, contexts of
S_kv in {512, 2048} tokens of width C_kv = C, and S_kv=2048 with C_kv = 768 != C (where nn.MultiheadAttention keeps
separate q/k/v projection weights instead of one packed in_proj_weight).
"forward": inference, both modules in eval() under torch.no_grad() (cross attention never takes
nn.MultiheadAttention's self-attention fast path). "forward+backward": a training step's work, both in train()
(dropout 0), x and context requiring grad, backward from a fixed upstream gradient, gradients reset to None before
each call.
"""

from __future__ import annotations

import torch
from harness import Row, inference_calls, training_steps
from torch import nn

from attention_lib import CrossAttention

B, C, NH, S = 4, 512, 8, 512
CONTEXTS = ((512, 512), (2048, 512), (2048, 768))  # (S_kv, C_kv)


def _layers(S_kv: int, C_kv: int):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(C, NH, kdim=C_kv, vdim=C_kv, batch_first=True)
    ours = CrossAttention.from_torch(mha)
    x = torch.randn(B, S, C)  # (B, S, C)
    context = torch.randn(B, S_kv, C_kv)  # (B, S_kv, C_kv)
    return ours, mha, x, context


def make_forward(S_kv: int, C_kv: int):
    ours, mha, x, context = _layers(S_kv, C_kv)
    return inference_calls(
        ours, mha, lambda: ours(x, context), lambda: mha(x, context, context, need_weights=False)[0]
    )  # each (B, S, C)


def make_forward_backward(S_kv: int, C_kv: int):
    ours, mha, x, context = _layers(S_kv, C_kv)
    grad_out = torch.randn(B, S, C)  # (B, S, C): the upstream gradient
    return training_steps(
        ours,
        mha,
        lambda: ours(x, context),
        lambda: mha(x, context, context, need_weights=False)[0],
        (x, context),
        grad_out,
    )


def rows() -> list[Row]:
    out = []
    for make, what in ((make_forward, "forward"), (make_forward_backward, "forward+backward")):
        for S_kv, C_kv in CONTEXTS:
            name = f"cross {what} S={S} S_kv={S_kv} C_kv={C_kv}"
            out.append(Row(name, make, {"S_kv": S_kv, "C_kv": C_kv}))
    return out
