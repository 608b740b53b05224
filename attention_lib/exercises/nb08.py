"""Graders of notebook 08's exercises: grouped-query attention by mean pooling, Longformer's two-sided window,
and rotary embeddings with complex numbers."""

from __future__ import annotations

import torch

from ._grading import Hint, expect_shape, grader

# ---------------------------------------------------------------------------------------------- exercise 1


def _pool(w: torch.Tensor, num_heads: int, num_kv_heads: int, strided: bool = False) -> torch.Tensor:
    """Reference (and the strided mistake): (NH·HS, C) -> (NKV·HS, C), the mean of each group's heads."""
    G, C = num_heads // num_kv_heads, w.shape[-1]
    heads = w.reshape(num_heads, -1, C)  # (NH, HS, C)
    groups = heads.reshape(G, num_kv_heads, -1, C).transpose(0, 1) if strided else heads.reshape(num_kv_heads, G, -1, C)
    return groups.mean(dim=1).reshape(-1, C)  # (NKV·HS, C)


@grader("08.1")
def check_08_1(mean_pool_heads) -> str:
    """mean_pool_heads(w, num_heads, num_kv_heads): (NH·HS, C) -> (NKV·HS, C), group g = mean of heads gG..gG+G-1."""
    generator = torch.Generator().manual_seed(8)
    for NH, NKV, HS, C in [(8, 2, 3, 5), (6, 3, 2, 4), (4, 1, 2, 3), (4, 4, 2, 3)]:
        w = torch.randn(NH * HS, C, generator=generator, dtype=torch.float64)  # (NH·HS, C)
        got = expect_shape(mean_pool_heads(w.clone(), NH, NKV), (NKV * HS, C), f"mean_pool_heads(w, {NH}, {NKV})")
        expected = _pool(w, NH, NKV)  # (NKV·HS, C)
        if torch.allclose(got.double(), expected, atol=1e-6):
            continue
        where = f"(NH={NH}, NKV={NKV}, HS={HS})"
        if torch.allclose(got.double(), _pool(w, NH, NKV, strided=True), atol=1e-6):
            raise Hint(
                f"{where}: group g must pool the adjacent heads gG .. gG + G - 1 (query head h reads key head h // G), "
                "not every NKV-th head: reshape w to (NKV, G, HS, C)"
            )
        if torch.allclose(got.double(), expected * (NH // NKV), atol=1e-6):
            raise Hint(f"{where}: average the heads of a group (their mean), not their sum")
        raise Hint(
            f"{where}: head g of the result must be the mean of heads gG .. gG + G - 1, each a block of HS rows of w; "
            "try w.reshape(NKV, G, HS, C).mean(1)"
        )
    return "each key/value head is the mean of its group's heads, for NKV = NH/4, NH/2, 1 and NH"


# ---------------------------------------------------------------------------------------------- exercise 2


@grader("08.2")
def check_08_2(local_window_mask) -> str:
    """local_window_mask(S, w): (S, S) bool, True where |i - j| <= w / 2 (Longformer's window w: w/2 on each side)."""
    for S, w in [(7, 4), (5, 0), (4, 20), (9, 6)]:
        got = local_window_mask(S, w)
        if isinstance(got, torch.Tensor) and got.dtype != torch.bool:
            raise Hint(f"a mask is a bool tensor (True = may attend), got dtype {got.dtype}")
        got = expect_shape(got, (S, S), f"local_window_mask({S}, {w})")
        i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]
        half = w // 2  # the tokens on each side
        expected = (i - j).abs() <= half  # (S, S)
        if torch.equal(got, expected):
            continue
        where = f"(S={S}, w={w})"
        if torch.equal(got, expected & (j <= i)):
            raise Hint(f"{where}: the Longformer's window is two-sided: token i also sees the w/2 tokens after it")
        if torch.equal(got, (i - j).abs() <= w):
            raise Hint(f"{where}: in the Longformer w is the whole window, w/2 tokens on each side: |i - j| <= w / 2")
        if torch.equal(got, (i - j).abs() < half) or torch.equal(got, (i - j).abs() <= half + 1):
            raise Hint(f"{where}: w/2 tokens on each side and the token itself: |i - j| <= w / 2, w + 1 keys in a full row")
        if torch.equal(got, ~expected):
            raise Hint(f"{where}: True means 'may attend' (the tokens inside the window), as everywhere in the series")
        raise Hint(f"{where}: token i must see token j exactly when |i - j| <= w / 2")
    return "token i sees tokens i - w/2 .. i + w/2, for windows narrower and wider than the sequence"


# ---------------------------------------------------------------------------------------------- exercise 3


def _rope_pairs(x: torch.Tensor, positions: torch.Tensor, theta: float, halves: bool = False, sign: float = 1.0,
                step: int = 2) -> torch.Tensor:
    """Reference (and the usual mistakes): turn the planes of x (S, HS), real arithmetic, float64."""
    S, HS = x.shape
    freq = theta ** (-torch.arange(0, HS, 2, dtype=torch.float64) * (step / 2) / HS)  # (HS/2,)
    angles = sign * positions.double()[:, None] * freq  # (S, HS/2)
    a, b = (x[:, : HS // 2], x[:, HS // 2 :]) if halves else (x[:, 0::2], x[:, 1::2])  # (S, HS/2) each
    ra, rb = a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()
    return torch.cat([ra, rb], -1) if halves else torch.stack([ra, rb], -1).flatten(-2)  # (S, HS)


@grader("08.3")
def check_08_3(rope_complex) -> str:
    """rope_complex(x, positions, theta): interleaved RoPE of x (S, HS) at positions (S,)."""
    generator = torch.Generator().manual_seed(3)
    S, HS, theta = 6, 8, 100.0
    x = torch.randn(S, HS, generator=generator, dtype=torch.float64)  # (S, HS)
    positions = torch.arange(S) + 3  # (S,)
    got = rope_complex(x.clone(), positions.clone(), theta)
    if isinstance(got, torch.Tensor) and got.is_complex():
        raise Hint("return real features, (S, HS): turn the complex result back with torch.view_as_real(...).flatten(-2)")
    got = expect_shape(got, (S, HS), "rope_complex(x, positions, theta)").double()
    if torch.allclose(got, _rope_pairs(x, positions, theta), atol=1e-6):
        return "every plane (2i, 2i + 1) of row m is turned by positions[m] · theta^(-2i/HS)"
    if torch.allclose(got, _rope_pairs(x, positions, theta, halves=True), atol=1e-6):
        raise Hint("pair the neighbours (2i, 2i + 1), the layout of the original code, not the halves (i, i + HS/2)")
    if torch.allclose(got, _rope_pairs(x, positions, theta, sign=-1.0), atol=1e-6):
        raise Hint("turn by +m·θ_i: multiply by e^{+i m θ_i}, not by its conjugate")
    if torch.allclose(got, _rope_pairs(x, positions, theta, step=1), atol=1e-6):
        raise Hint("θ_i = theta^(-2i/HS) for plane i = 0 .. HS/2 - 1 (the exponent steps by 2/HS)")
    if torch.allclose(got, _rope_pairs(x, torch.arange(S), theta), atol=1e-6):
        raise Hint("turn each row by its own entry of `positions` (here 3, 4, ...), not by its row number")
    raise Hint("row m must be x[m] with each plane (2i, 2i + 1) turned by positions[m] · theta^(-2i/HS)")
