"""The attention computation itself, on already projected queries, keys and values."""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor


def padding_mask(lengths: Sequence[int] | Tensor, seq_len: int | None = None, left: bool = False) -> Tensor:
    """A (B, S) bool mask that is True on the real tokens of each sequence and False on its padding.

    lengths: the number of real tokens of each of the B sequences; seq_len: S (default: the longest length);
    left: padding at the start (as batched generation uses) rather than at the end.
    """
    lengths = torch.as_tensor(lengths).reshape(-1)  # (B,)
    S = int(lengths.max()) if seq_len is None else seq_len
    if bool((lengths > S).any()) or bool((lengths < 0).any()):
        raise ValueError(f"lengths must lie in [0, seq_len={S}], got {lengths.tolist()}")
    positions = torch.arange(S, device=lengths.device)  # (S,)
    if left:
        return positions[None, :] >= (S - lengths)[:, None]  # (B, S)
    return positions[None, :] < lengths[:, None]  # (B, S)


def causal_mask(q_len: int, kv_len: int | None = None, device: torch.device | str | None = None) -> Tensor:
    """A (S, S_kv) bool mask, True where query i may see key j: j <= i, counted from the end of the keys.

    With S_kv > S (a decoder whose earlier keys are cached), the S queries are the last S positions,
    so query i sits at position S_kv - S + i and sees keys 0..S_kv - S + i.
    """
    kv_len = q_len if kv_len is None else kv_len
    return torch.ones(q_len, kv_len, dtype=torch.bool, device=device).tril(diagonal=kv_len - q_len)  # (S, S_kv)


def explicit_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, dropout_p: float = 0.0, is_causal: bool = False
) -> tuple[Tensor, Tensor]:
    """softmax(q kᵀ / √HS) v written out step by step; returns (context, weights).

    q: (..., S, HS), k and v: (..., S_kv, HS), mask: bool, True = may attend, broadcasting to (..., S, S_kv).
    weights: (..., S, S_kv), the probabilities before dropout. A query row with no visible key gets zero
    weights and a zero context vector (never NaN).
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (..., S, S_kv)
    if is_causal:
        causal = causal_mask(q.size(-2), k.size(-2), device=q.device)  # (S, S_kv)
        mask = causal if mask is None else mask & causal
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))  # (..., S, S_kv)
        # A row of -inf would softmax to NaN: give such rows finite scores, then zero their weights.
        has_key = mask.any(dim=-1, keepdim=True)  # (..., S, 1)
        scores = scores.masked_fill(~has_key, 0.0)  # (..., S, S_kv)
    weights = scores.softmax(dim=-1)  # (..., S, S_kv)
    if mask is not None:
        weights = weights.masked_fill(~has_key, 0.0)  # (..., S, S_kv)
    dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights  # (..., S, S_kv)
    return dropped @ v, weights  # (..., S, HS), (..., S, S_kv)


def fused_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, dropout_p: float = 0.0, is_causal: bool = False
) -> Tensor:
    """The same computation through `F.scaled_dot_product_attention`; returns the context (..., S, HS).

    Same shapes and mask convention as `explicit_attention` (SDPA also reads True as "may attend" and
    gives a fully masked row zeros).
    """
    if is_causal and mask is not None:
        # SDPA takes one or the other; fold the causal rule into the mask.
        mask = mask & causal_mask(q.size(-2), k.size(-2), device=q.device)  # (..., S, S_kv)
        is_causal = False
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal
    )  # (..., S, HS)


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    dropout_p: float = 0.0,
    explicit: bool = False,
    is_causal: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Dispatch to the fused path (default) or the explicit one; returns (context, weights or None).

    `is_causal=True` lets query i see keys 0..i only, on top of `mask`; it needs S == S_kv (SDPA and
    `causal_mask` align a longer key sequence differently; pass `causal_mask(S, S_kv)` as the mask then).
    """
    if is_causal and q.size(-2) != k.size(-2):
        raise ValueError(
            f"is_causal needs as many queries as keys, got S={q.size(-2)} and S_kv={k.size(-2)}; "
            "pass mask=causal_mask(S, S_kv) instead"
        )
    if explicit:
        return explicit_attention(q, k, v, mask, dropout_p, is_causal)
    return fused_attention(q, k, v, mask, dropout_p, is_causal), None


