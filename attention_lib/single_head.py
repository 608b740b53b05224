from __future__ import annotations

from torch import Tensor, nn

from .checks import check_input, prepare_mask
from .functional import attend


class SingleHeadAttention(nn.Module):
    """Single-head self-attention with a fused query/key/value projection.

    The head is a quarter as wide as the tokens: HS = C // 4.
    Wqkv: (C -> 3 * HS), laid out [q | k | v]; Wo: (HS -> C).
    Input x: (B, S, C); optional bool mask, True = may attend, (B, S_kv) or broadcasting to (B, S, S_kv).
    Output: (B, S, C), or (output, weights (B, S, S_kv)) with `return_weights=True`.
    Set `fused = False` to run the explicit path without asking for weights.
    """

    def __init__(self, hidden_size: int, bias: bool = True):
        super().__init__()
        if hidden_size < 4:
            raise ValueError(f"hidden_size must be at least 4 (the head is hidden_size // 4 wide), got {hidden_size}")
        self.hidden_size = hidden_size
        self.head_size = hidden_size // 4
        self.Wqkv = nn.Linear(hidden_size, 3 * self.head_size, bias=bias)
        self.Wo = nn.Linear(self.head_size, hidden_size, bias=bias)
        self.fused = True  # the SDPA path; the explicit path runs when False or when weights are asked for

    def forward(
        self, x: Tensor, mask: Tensor | None = None, return_weights: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        check_input(x, self.hidden_size)
        B, S, _ = x.shape
        mask = prepare_mask(mask, B, S, S)  # None or broadcasting to (B, S, S)
        q, k, v = self.Wqkv(x).reshape(B, S, 3, self.head_size).unbind(dim=2)  # each (B, S, HS)
        context, weights = attend(q, k, v, mask, explicit=return_weights or not self.fused)  # (B, S, HS)
        out = self.Wo(context)  # (B, S, C)
        return (out, weights) if return_weights else out
