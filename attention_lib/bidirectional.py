from __future__ import annotations

from torch import Tensor, nn

from .checks import check_input, prepare_mask
from .functional import attend


class AttentionBase(nn.Module):
    """What every multi-head layer shares: head bookkeeping, dropout, the output projection `Wo`.

    Subclasses make q, k, v of shape (B, NH, S|S_kv, HS) and call `_attend`.
    """

    def __init__(self, hidden_size: int, num_heads: int, attn_drop: float = 0.0, out_drop: float = 0.0, bias: bool = True):
        super().__init__()
        if num_heads < 1 or hidden_size % num_heads != 0:
            raise ValueError(
                f"hidden_size must be divisible by num_heads, got hidden_size={hidden_size}, num_heads={num_heads}"
            )
        self.hidden_size = hidden_size  # C
        self.num_heads = num_heads  # NH
        self.head_size = hidden_size // num_heads  # HS
        self.attn_drop = attn_drop
        self.Wo = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.out_drop = nn.Dropout(out_drop)
        self.fused = True

    def _split_heads(self, t: Tensor) -> Tensor:
        """(B, S, C) -> (B, NH, S, HS)."""
        B, S, _ = t.shape
        return t.reshape(B, S, self.num_heads, self.head_size).transpose(1, 2)  # (B, NH, S, HS)

    def _merge_heads(self, t: Tensor) -> Tensor:
        """(B, NH, S, HS) -> (B, S, C): the transpose first, or tokens and heads get mixed up."""
        B, _, S, _ = t.shape
        return t.transpose(1, 2).reshape(B, S, self.hidden_size)  # (B, S, C)

    def _attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, return_weights: bool, is_causal: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """q: (B, NH, S, HS), k, v: (B, NH, S_kv, HS) -> out (B, S, C) [, weights (B, NH, S, S_kv)]."""
        p = self.attn_drop if self.training else 0.0
        context, weights = attend(
            q, k, v, mask, dropout_p=p, explicit=return_weights or not self.fused, is_causal=is_causal
        )  # (B, NH, S, HS)
        out = self.out_drop(self.Wo(self._merge_heads(context)))  # (B, S, C)
        return (out, weights) if return_weights else out


class BidirectionalAttention(AttentionBase):
    """Multi-head bidirectional self-attention (双向注意力): every token may attend to every real token.

    Wqkv: (C -> 3C), laid out [q | k | v], each split into NH heads of HS; Wo: (C -> C).
    x: (B, S, C); mask: bool, True = may attend, (B, S) padding mask or broadcasting to (B, NH, S, S).
    Returns (B, S, C), or (out, weights (B, NH, S, S)) with `return_weights=True`.
    """

    def __init__(self, hidden_size: int, num_heads: int, attn_drop: float = 0.0, out_drop: float = 0.0, bias: bool = True):
        super().__init__(hidden_size, num_heads, attn_drop, out_drop, bias)
        self.Wqkv = nn.Linear(hidden_size, 3 * hidden_size, bias=bias)

    def _qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(B, S, C) -> q, k, v, each (B, NH, S, HS)."""
        B, S, _ = x.shape
        qkv = self.Wqkv(x).reshape(B, S, 3, self.num_heads, self.head_size)  # (B, S, 3, NH, HS)
        return qkv.permute(2, 0, 3, 1, 4).unbind(0)  # 3 x (B, NH, S, HS)

    def forward(
        self, x: Tensor, mask: Tensor | None = None, return_weights: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        check_input(x, self.hidden_size)
        B, S, _ = x.shape
        mask = prepare_mask(mask, B, S, S, self.num_heads)  # None or broadcasting to (B, NH, S, S)
        q, k, v = self._qkv(x)  # each (B, NH, S, HS)
        return self._attend(q, k, v, mask, return_weights)
