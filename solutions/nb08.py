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


# ---------------------------------------------------------------------------------------------- wrong answers: 08.1


def _pool_strided(w, num_heads, num_kv_heads):
    G, C = num_heads // num_kv_heads, w.shape[-1]
    return w.reshape(G, num_kv_heads, -1, C).mean(dim=0).reshape(-1, C)  # every NKV-th head


def _pool_sum(w, num_heads, num_kv_heads):
    G, C = num_heads // num_kv_heads, w.shape[-1]
    return w.reshape(num_kv_heads, G, -1, C).sum(dim=1).reshape(-1, C)


def _pool_rows(w, num_heads, num_kv_heads):
    G, C = num_heads // num_kv_heads, w.shape[-1]
    return w.reshape(num_kv_heads, -1, G, C).mean(dim=2).reshape(-1, C)  # (NKV, HS, G, C): G rows of one head


def _pool_first_head(w, num_heads, num_kv_heads):
    G, C = num_heads // num_kv_heads, w.shape[-1]
    return w.reshape(num_kv_heads, G, -1, C)[:, 0].reshape(-1, C)  # keeps one head of each group


def _pool_unflattened(w, num_heads, num_kv_heads):
    G, C = num_heads // num_kv_heads, w.shape[-1]
    return w.reshape(num_kv_heads, G, -1, C).mean(dim=1)  # (NKV, HS, C): not a weight matrix


def _pool_repeated(w, num_heads, num_kv_heads):
    G, C = num_heads // num_kv_heads, w.shape[-1]
    pooled = w.reshape(num_kv_heads, G, -1, C).mean(dim=1)  # (NKV, HS, C)
    return pooled.repeat_interleave(G, dim=0).reshape(-1, C)  # copied back to NH heads, as repeat_kv does


def _pool_groups_swapped(w, num_heads, num_kv_heads):
    G, C = num_heads // num_kv_heads, w.shape[-1]
    return w.reshape(G, num_kv_heads, -1, C).mean(dim=1).reshape(-1, C)  # G groups of NKV heads


def _pool_all_heads(w, num_heads, num_kv_heads):
    C = w.shape[-1]
    return w.reshape(num_heads, -1, C).mean(dim=0).repeat(num_kv_heads, 1)  # every group gets the mean of all heads


# ---------------------------------------------------------------------------------------------- wrong answers: 08.2


def _window_causal(S, w):
    i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]
    return (i - j >= 0) & (i - j <= w // 2)


def _window_mistral(S, w):
    i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]
    return (i - j >= 0) & (i - j < w)  # this notebook's `window`: w keys back, itself included


def _window_per_side(S, w):
    i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]
    return (i - j).abs() <= w  # w on each side: the window read as Mistral's W


def _window_short(S, w):
    i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]
    return (i - j).abs() < w // 2


def _window_inverted(S, w):
    return ~local_window_mask(S, w)  # True where the token is hidden


def _window_as_ints(S, w):
    return local_window_mask(S, w).int()


def _window_additive(S, w):
    return torch.zeros(S, S).masked_fill(~local_window_mask(S, w), float("-inf"))  # a bias, not a mask


def _window_without_abs(S, w):
    i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]
    return i - j <= w // 2  # sees every later token


def _window_lopsided(S, w):
    return torch.ones(S, S, dtype=torch.bool).tril(w // 2 - 1).triu(-(w // 2))  # w tokens in all: one short after


def _window_without_itself(S, w):
    i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]
    return ((i - j).abs() <= w // 2) & (i != j)


# ---------------------------------------------------------------------------------------------- wrong answers: 08.3


def _rope_halves(x, positions, theta):
    S, HS = x.shape
    freq = theta ** (-torch.arange(0, HS, 2, dtype=torch.float64) / HS)
    angles = torch.cat([positions.double()[:, None] * freq] * 2, dim=-1)  # (S, HS)
    x1, x2 = x.chunk(2, dim=-1)
    return x * angles.cos() + torch.cat([-x2, x1], dim=-1) * angles.sin()


def _rope_conjugate(x, positions, theta):
    return rope_complex(x, -positions, theta)


def _rope_frequencies_per_feature(x, positions, theta):
    S, HS = x.shape
    freq = theta ** (-torch.arange(HS // 2, dtype=torch.float64) / HS)  # theta^(-i/HS): i counts planes, not 2i
    turn = torch.polar(torch.ones(S, HS // 2, dtype=torch.float64), positions.double()[:, None] * freq)
    planes = torch.view_as_complex(x.double().reshape(S, HS // 2, 2).contiguous())
    return torch.view_as_real(planes * turn).flatten(-2).to(x.dtype)


def _rope_frequencies_over_half(x, positions, theta):
    S, HS = x.shape
    freq = theta ** (-torch.arange(0, HS, 2, dtype=torch.float64) / (HS // 2))  # theta^(-4i/HS)
    turn = torch.polar(torch.ones(S, HS // 2, dtype=torch.float64), positions.double()[:, None] * freq)
    planes = torch.view_as_complex(x.double().reshape(S, HS // 2, 2).contiguous())
    return torch.view_as_real(planes * turn).flatten(-2).to(x.dtype)


def _rope_row_index(x, positions, theta):
    return rope_complex(x, torch.arange(x.shape[0]), theta)  # the row number, not the position


def _rope_complex_result(x, positions, theta):
    S, HS = x.shape
    freq = theta ** (-torch.arange(0, HS, 2, dtype=torch.float64) / HS)
    turn = torch.polar(torch.ones(S, HS // 2, dtype=torch.float64), positions.double()[:, None] * freq)
    return torch.view_as_complex(x.double().reshape(S, HS // 2, 2).contiguous()) * turn  # (S, HS/2) complex


def _rope_unflattened(x, positions, theta):
    return rope_complex(x, positions, theta).reshape(x.shape[0], -1, 2)  # view_as_real without .flatten(-2)


def _rope_polar_swapped(x, positions, theta):
    S, HS = x.shape
    angles = positions.double()[:, None] * theta ** (-torch.arange(0, HS, 2, dtype=torch.float64) / HS)
    turn = torch.polar(angles, torch.ones_like(angles))  # polar(abs, angle): the angles became lengths
    planes = torch.view_as_complex(x.double().reshape(S, HS // 2, 2).contiguous())
    return torch.view_as_real(planes * turn).flatten(-2).to(x.dtype)


def _rope_swapped_parts(x, positions, theta):
    S, HS = x.shape
    angles = positions.double()[:, None] * theta ** (-torch.arange(0, HS, 2, dtype=torch.float64) / HS)
    planes = torch.view_as_complex(x.double().reshape(S, HS // 2, 2).flip(-1).contiguous())  # x[2i+1] + i·x[2i]
    return torch.view_as_real(planes * torch.polar(torch.ones_like(angles), angles)).flatten(-2).to(x.dtype)


def _rope_theta_10000(x, positions, theta):
    return rope_complex(x, positions, 10000.0)  # LLaMA's base, whatever the argument says


def _rope_written_back_as_halves(x, positions, theta):
    S, HS = x.shape
    angles = positions.double()[:, None] * theta ** (-torch.arange(0, HS, 2, dtype=torch.float64) / HS)
    turned = torch.view_as_complex(x.double().reshape(S, HS // 2, 2).contiguous()) * torch.polar(
        torch.ones_like(angles), angles)  # (S, HS/2): the right planes, turned
    return torch.cat([turned.real, turned.imag], dim=-1).to(x.dtype)  # every real part, then every imaginary part


def _rope_pairs_of_halves(x, positions, theta):
    S, HS = x.shape
    angles = positions.double()[:, None] * theta ** (-torch.arange(0, HS, 2, dtype=torch.float64) / HS)
    planes = x.double().reshape(S, 2, HS // 2).transpose(1, 2).contiguous()  # (S, HS/2, 2): (x_i, x_{i + HS/2})
    turned = torch.view_as_complex(planes) * torch.polar(torch.ones_like(angles), angles)
    return torch.view_as_real(turned).flatten(-2).to(x.dtype)  # written back to (2i, 2i + 1)


def _rope_pairs_shifted_by_one(x, positions, theta):
    return rope_complex(x.roll(-1, dims=-1), positions, theta).roll(1, dims=-1)  # planes (2i + 1, 2i + 2)


SOLUTIONS = {"check_08_1": mean_pool_heads, "check_08_2": local_window_mask, "check_08_3": rope_complex}
WRONG = {
    "check_08_1": [
        (_pool_strided, "adjacent heads"),
        (_pool_sum, "not their sum"),
        (_pool_rows, "neighbouring rows"),
        (_pool_first_head, "you kept the first head of each group"),
        (_pool_unflattened, "flatten the heads back into rows"),
        (_pool_repeated, "one head per query head"),
        (_pool_groups_swapped, "there are NKV = 2 groups of G = NH // NKV = 3 heads"),
        (_pool_all_heads, "must be the mean of heads gG .. gG + G - 1"),
    ],
    "check_08_2": [
        (_window_causal, "two-sided"),
        (_window_mistral, "two-sided"),
        (_window_per_side, "the whole window"),
        (_window_short, "w + 1 tokens in a full row"),
        (_window_inverted, "True means 'may attend'"),
        (_window_as_ints, "a bool tensor"),
        (_window_additive, "additive mask"),
        (_window_without_abs, "lopsided"),
        (_window_lopsided, "lopsided"),
        (_window_without_itself, "sees itself"),
    ],
    "check_08_3": [
        (_rope_halves, "neighbours (2i, 2i + 1)"),
        (_rope_conjugate, "e^{+i m θ_i}"),
        (_rope_frequencies_per_feature, "yours turn by theta^(-i/HS)"),
        (_rope_frequencies_over_half, "yours turn by theta^(-4i/HS)"),
        (_rope_row_index, "not by its row number"),
        (_rope_complex_result, "return real features"),
        (_rope_unflattened, "flatten the last two axes"),
        (_rope_polar_swapped, "keeps the length"),
        (_rope_swapped_parts, "real part first"),
        (_rope_theta_10000, "Use the argument theta"),
        (_rope_written_back_as_halves, "wrote the results back as two halves"),
        (_rope_pairs_of_halves, "you paired feature i with feature i + HS/2"),
        (_rope_pairs_shifted_by_one, "your features are paired or placed in another order"),
    ],
}
