"""Solutions of notebook 08's exercises, and typical wrong answers with the hint each must get."""

from __future__ import annotations

import torch


def mean_pool_heads(w, num_heads, num_kv_heads):
    G, C = num_heads // num_kv_heads, w.shape[-1]
    return w.reshape(num_kv_heads, G, -1, C).mean(dim=1).reshape(-1, C)  # (NKV·HS, C)


def local_window_mask(S, w):
    i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]
    return (i - j).abs() <= w // 2  # (S, S): w/2 tokens on each side, and itself


def rope_complex(x, positions, theta):
    S, HS = x.shape
    freq = theta ** (-torch.arange(0, HS, 2, dtype=torch.float64) / HS)  # (HS/2,)
    angles = positions.double()[:, None] * freq  # (S, HS/2)
    turn = torch.polar(torch.ones_like(angles), angles)  # (S, HS/2): e^{i m θ_i}
    planes = torch.view_as_complex(x.double().reshape(S, HS // 2, 2).contiguous())  # (S, HS/2)
    return torch.view_as_real(planes * turn).flatten(-2).to(x.dtype)  # (S, HS)


# ---------------------------------------------------------------------------------------------- wrong answers


def _pool_strided(w, num_heads, num_kv_heads):
    G, C = num_heads // num_kv_heads, w.shape[-1]
    return w.reshape(G, num_kv_heads, -1, C).mean(dim=0).reshape(-1, C)  # every NKV-th head


def _pool_sum(w, num_heads, num_kv_heads):
    G, C = num_heads // num_kv_heads, w.shape[-1]
    return w.reshape(num_kv_heads, G, -1, C).sum(dim=1).reshape(-1, C)


def _window_causal(S, w):
    i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]
    return (i - j >= 0) & (i - j <= w // 2)


def _window_per_side(S, w):
    i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]
    return (i - j).abs() <= w  # w on each side: the window read as Mistral's W


def _window_short(S, w):
    i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]
    return (i - j).abs() < w // 2


def _rope_halves(x, positions, theta):
    S, HS = x.shape
    freq = theta ** (-torch.arange(0, HS, 2, dtype=torch.float64) / HS)
    angles = torch.cat([positions.double()[:, None] * freq] * 2, dim=-1)  # (S, HS)
    x1, x2 = x.chunk(2, dim=-1)
    return x * angles.cos() + torch.cat([-x2, x1], dim=-1) * angles.sin()


def _rope_conjugate(x, positions, theta):
    return rope_complex(x, -positions, theta)


SOLUTIONS = {"check_08_1": mean_pool_heads, "check_08_2": local_window_mask, "check_08_3": rope_complex}
WRONG = {
    "check_08_1": [(_pool_strided, "adjacent heads"), (_pool_sum, "mean")],
    "check_08_2": [(_window_causal, "two-sided"), (_window_per_side, "the whole window"),
                   (_window_short, "|i - j| <= w / 2")],
    "check_08_3": [(_rope_halves, "neighbours (2i, 2i + 1)"), (_rope_conjugate, "e^{+i m θ_i}")],
}
