"""The one float64 reference of the test suite: attention written from its formula, and the output of every layer of
the package computed from the layer's weights alone. Nothing here calls attention_lib; every mask is written by hand
(`padding`, `causal`, `window`) and given to the reference in full, so that the reference never shares a rule with
the code it checks."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def padding(lengths: list[int], S_kv: int, left: bool = False) -> Tensor:
    """(B, S_kv) bool: True on the real tokens, the first (or, with left, the last) lengths[b] of each row."""
    return torch.tensor([[(j >= S_kv - n) if left else (j < n) for j in range(S_kv)] for n in lengths])


def causal(S: int, S_kv: int | None = None) -> Tensor:
    """(S, S_kv) bool: query i, at position S_kv - S + i, sees key j when j <= S_kv - S + i."""
    S_kv = S if S_kv is None else S_kv
    return torch.tensor([[j <= S_kv - S + i for j in range(S_kv)] for i in range(S)])


def window(S: int, W: int, S_kv: int | None = None) -> Tensor:
    """(S, S_kv) bool: the causal rule, and keys at most W - 1 positions back."""
    S_kv = S if S_kv is None else S_kv
    return torch.tensor([[0 <= S_kv - S + i - j < W for j in range(S_kv)] for i in range(S)])


def attention64(
    q: Tensor, k: Tensor, v: Tensor, visible: Tensor | None = None, bias: Tensor | None = None,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """softmax(q kᵀ · scale + bias) v in float64 over the visible keys; returns (context, weights).

    q (..., S, HS), k (..., S_kv, HS), v (..., S_kv, HS_v); visible: None or bool broadcasting to (..., S, S_kv).
    A row with no visible key gets zero weights and a zero context.
    """
    q, k, v = q.double(), k.double(), v.double()
    scale = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = torch.einsum("...id,...jd->...ij", q, k) * scale  # (..., S, S_kv)
    if bias is not None:
        scores = scores + bias.double()
    if visible is None:
        visible = torch.ones((), dtype=torch.bool)
    shown = scores.masked_fill(~visible, -math.inf)  # (..., S, S_kv)
    top = shown.amax(dim=-1, keepdim=True).nan_to_num(0.0, neginf=0.0)  # (..., S, 1): 0 in a row that sees nothing
    e = (shown - top).exp()  # (..., S, S_kv): exactly 0 where hidden
    total = e.sum(dim=-1, keepdim=True)  # (..., S, 1)
    weights = torch.where(total > 0, e / total.clamp_min(1e-300), torch.zeros_like(e))  # (..., S, S_kv)
    return weights @ v, weights


def linear64(x: Tensor, module: nn.Linear) -> Tensor:
    """x @ Wᵀ + b in float64."""
    out = x.double() @ module.weight.double().T
    return out if module.bias is None else out + module.bias.double()


def paper_slopes(n: int) -> list[float]:
    """ALiBi's slopes as the code of Press et al. (2022) computes them."""

    def power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + paper_slopes(2 * closest)[0::2][: n - closest]


def rope64(t: Tensor, positions: Tensor, theta: float) -> Tensor:
    """Turn plane i = (feature i, feature i + HS/2) of t (B, H, S, HS) by positions (B, S) · theta^(-2i/HS), one plane
    at a time with its 2 x 2 rotation: the definition, in float64."""
    HS = t.shape[-1]
    out = t.double().clone()
    for i in range(HS // 2):
        angle = positions.double()[:, None, :] * theta ** (-2 * i / HS)  # (B, 1, S)
        a, b = t[..., i].double(), t[..., i + HS // 2].double()  # (B, H, S) each
        out[..., i], out[..., i + HS // 2] = a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()
    return out


def _split(t: Tensor, heads: int) -> Tensor:
    B, S, width = t.shape
    return t.reshape(B, S, heads, width // heads).transpose(1, 2)  # (B, H, S, HS)


def layer64(
    layer: nn.Module, x: Tensor, visible: Tensor | None = None, context: Tensor | None = None,
    positions: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """A layer's output in float64 from its weights alone; returns (out (B, S, C), weights (B, NH, S, S_kv), or
    (B, S, S_kv) for a single head).

    The layer is read by its parameters: `Wqkv` of 3·HS rows with `head_size` = C // 4 (single head); `Wq` and `Wkv`
    (cross attention); otherwise `Wqkv` laid out [q | k | v] with NH query and NKV key/value heads, query head h
    reading key/value head h·NKV // NH, RoPE when `rope_theta` is set (positions: (B, S), default 0..S-1) and ALiBi
    when `alibi` is. visible: bool broadcasting to (B, S, S_kv) or (B, NH, S, S_kv), True = may attend, everything
    the layer hides written out by the caller (padding, the causal rule, the window).
    """
    B, S, C = x.shape
    if hasattr(layer, "Wq"):  # cross attention
        NH = layer.num_heads
        q = _split(linear64(x, layer.Wq), NH)  # (B, NH, S, HS)
        k, v = (_split(t, NH) for t in linear64(context, layer.Wkv).chunk(2, dim=-1))  # (B, NH, S_kv, HS) each
    elif not hasattr(layer, "num_heads"):  # single head
        q, k, v = (t[:, None] for t in linear64(x, layer.Wqkv).chunk(3, dim=-1))  # (B, 1, S, HS) each
        NH = 1
    else:
        NH, NKV, HS = layer.num_heads, getattr(layer, "num_kv_heads", layer.num_heads), layer.head_size
        qkv = linear64(x, layer.Wqkv)  # (B, S, (NH + 2·NKV)·HS)
        q = _split(qkv[..., : NH * HS], NH)  # (B, NH, S, HS)
        k = _split(qkv[..., NH * HS : (NH + NKV) * HS], NKV)  # (B, NKV, S, HS)
        v = _split(qkv[..., (NH + NKV) * HS :], NKV)  # (B, NKV, S, HS)
        if getattr(layer, "rope_theta", None) is not None:
            pos = torch.arange(S).expand(B, S) if positions is None else positions.expand(B, S)
            q, k = rope64(q, pos, layer.rope_theta), rope64(k, pos, layer.rope_theta)
        head_of = [h * NKV // NH for h in range(NH)]  # the key/value head of each query head
        k, v = k[:, head_of], v[:, head_of]  # (B, NH, S, HS)
    bias = None
    if getattr(layer, "alibi", False):
        i, j = torch.arange(S, dtype=torch.float64)[:, None], torch.arange(S, dtype=torch.float64)[None, :]
        bias = -torch.tensor(paper_slopes(NH), dtype=torch.float64)[:, None, None] * (i - j)  # (NH, S, S)
    if visible is not None and visible.ndim == 3:
        visible = visible[:, None]  # (B, 1, S, S_kv): the same for every head
    context_, weights = attention64(q, k, v, visible, bias)  # (B, NH, S, HS), (B, NH, S, S_kv)
    out = linear64(context_.transpose(1, 2).reshape(B, S, -1), layer.Wo)  # (B, S, C)
    return out, (weights[:, 0] if NH == 1 and not hasattr(layer, "num_heads") else weights)
