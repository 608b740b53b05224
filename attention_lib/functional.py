"""The attention computation itself, on already projected queries, keys and values."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor


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
        # Query i sees keys 0..i (aligned top-left, as in SDPA's is_causal).
        causal = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()  # (S, S_kv)
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
        mask = mask & torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()
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

    `is_causal=True` lets query i see keys 0..i only (top-left aligned, like SDPA), on top of `mask`.
    """
    if explicit:
        return explicit_attention(q, k, v, mask, dropout_p, is_causal)
    return fused_attention(q, k, v, mask, dropout_p, is_causal), None


