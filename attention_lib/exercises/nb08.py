"""Graders of notebook 08's exercises: grouped-query attention by mean pooling, Longformer's two-sided window,
and rotary embeddings with complex numbers."""

from __future__ import annotations

import torch
from torch import Tensor

from ._grading import (Hint, call, close, dtype, expect_bool_mask, expect_close, expect_equal, expect_precision,
                       expect_shape, expect_tensor, first_wrong_row, fmt, grader)

__all__ = ["check_08_1", "check_08_2", "check_08_3"]

# --- 08.1: mean pooling of key heads -------------------------------------------------------------------------------


def _pool(w: Tensor, num_heads: int, num_kv_heads: int, how: str = "adjacent") -> Tensor:
    """(NH·HS, C) -> (NKV·HS, C) in float64: the mean of each group's heads (`how` = "adjacent", the right answer),
    or a usual mistake: "strided" groups (every NKV-th head), their "sum", the "first" head of each group, the mean
    of G neighbouring "rows" instead of G heads."""
    G, C = num_heads // num_kv_heads, w.shape[-1]
    w = w.detach().double()
    if how == "rows":
        return w.reshape(-1, G, C).mean(dim=1)  # (NKV·HS, C): G adjacent rows of one head
    heads = w.reshape(num_heads, -1, C)  # (NH, HS, C)
    groups = heads.reshape(G, num_kv_heads, -1, C).transpose(0, 1) if how == "strided" else heads.reshape(
        num_kv_heads, G, -1, C)  # (NKV, G, HS, C)
    pooled = {"sum": groups.sum(dim=1), "first": groups[:, 0]}.get(how, groups.mean(dim=1))  # (NKV, HS, C)
    return pooled.reshape(-1, C)  # (NKV·HS, C)


@grader("08.1")
def check_08_1(mean_pool_heads) -> str:
    """mean_pool_heads(w, num_heads, num_kv_heads): (NH·HS, C) -> (NKV·HS, C), group g = mean of heads gG..gG+G-1."""
    generator = torch.Generator().manual_seed(8)
    cases = [  # NH, NKV, HS, C: no two alike, nor G = NH / NKV (except NKV = 1 and NKV = NH, where G is NH or 1)
        (6, 2, 4, 5),  # G = 3
        (8, 4, 3, 5),  # G = 2
        (12, 3, 2, 7),  # G = 4
        (5, 1, 2, 3),  # multi-query: one group of every head
        (3, 3, 4, 2),  # multi-head: groups of one head, nothing to average
    ]
    for NH, NKV, HS, C in cases:
        G = NH // NKV
        w = torch.randn(NH * HS, C, generator=generator, dtype=dtype())  # (NH·HS, C)
        expected = _pool(w, NH, NKV)  # (NKV·HS, C), before the answer runs
        where = f"for w of shape (NH·HS, C) = {(NH * HS, C)} with NH={NH}, NKV={NKV} (G={G}), HS={HS}"
        got = expect_tensor(call(mean_pool_heads, w, NH, NKV), f"mean_pool_heads(w, {NH}, {NKV})")
        if tuple(got.shape) == (NKV, HS, C):
            raise Hint(f"{where}, the result has shape (NKV, HS, C) = {(NKV, HS, C)}: a weight of a Linear layer is "
                       f"a matrix, one row per output feature: flatten the heads back into rows, (NKV·HS, C) = "
                       f"{(NKV * HS, C)}.")
        if tuple(got.shape) == (NH * HS, C) and NKV < NH:
            raise Hint(f"{where}, the result has one head per query head, (NH·HS, C) = {(NH * HS, C)}: the pooled "
                       f"weight holds one head per group, (NKV·HS, C) = {(NKV * HS, C)}. Each query head of a group "
                       "reads the same pooled head (repeat_kv copies it at attention time, not in the weight).")
        if tuple(got.shape) == (G * HS, C) and G != NKV:
            raise Hint(f"{where}, the result has shape {(G * HS, C)}, G = {G} heads: there are NKV = {NKV} groups of "
                       f"G = NH // NKV = {G} heads each, and one pooled head per group.")
        got = expect_shape(got, (NKV * HS, C), f"mean_pool_heads(w, {NH}, {NKV})")
        if close(got, expected):
            continue
        h = 1 if NKV > 1 else 0  # a head whose group is not the first, where groups of the wrong heads show
        shown = f"{where}, row 0 of head {h} should be {fmt(expected[h * HS])}, got {fmt(got[h * HS])}"
        if close(got, _pool(w, NH, NKV, "strided")):
            raise Hint(f"{shown}: group g must pool the adjacent heads gG .. gG + G - 1 (query head h reads key head "
                       "h // G), not every NKV-th head: reshape w to (NKV, G, HS, C).")
        if close(got, _pool(w, NH, NKV, "sum")):
            raise Hint(f"{shown}: average the heads of a group (their mean), not their sum; a sum makes the keys "
                       f"G = {G} times larger.")
        if close(got, _pool(w, NH, NKV, "rows")):
            raise Hint(f"{shown}: you averaged G = {G} neighbouring rows, which lie inside one head. A head is a block "
                       f"of HS = {HS} rows: average whole heads, w.reshape(NKV, G, HS, C), over the axis of G.")
        if close(got, _pool(w, NH, NKV, "first")):
            raise Hint(f"{shown}: you kept the first head of each group. Mean pooling averages all G = {G} heads of "
                       "a group, which keeps more of what each head learned.")
        raise Hint(f"{shown}: head g of the result must be the mean of heads gG .. gG + G - 1, each a block of HS rows "
                   "of w.")
    return "each key/value head is the mean of its group's heads, for G = 2, 3, 4, multi-query and multi-head."


# --- 08.2: Longformer's two-sided window ---------------------------------------------------------------------------



@grader("08.2")
def check_08_2(local_window_mask) -> str:
    """local_window_mask(S, w): (S, S) bool, True where |i - j| <= w / 2 (Longformer's window w: w/2 on each side)."""
    for S, w in [(7, 4), (9, 6), (5, 0), (4, 20), (6, 10), (8, 2)]:  # S, w and w / 2 unlike; w = 0; w/2 >= S
        i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]  # (S, 1), (1, S)
        half = w // 2  # the tokens on each side
        expected = (i - j).abs() <= half  # (S, S)
        got = expect_bool_mask(call(local_window_mask, S, w), (S, S), f"local_window_mask({S}, {w})",
                               "(i - j).abs() <= w // 2")
        if torch.equal(got, expected):
            continue
        where = f"(S={S}, w={w})"
        shown = first_wrong_row(got, expected, where)
        if torch.equal(got, ~expected):
            raise Hint(f"{shown}. True means 'may attend' (the tokens inside the window), as everywhere in the series.")
        if half > 0 and (not bool((got & (j > i)).any()) or not bool((got & (j < i)).any())):
            raise Hint(f"{shown}. The Longformer's window is two-sided: token i also sees the w/2 tokens after it, "
                       "as many as before it.")
        if torch.equal(got, (i - j).abs() <= w):
            raise Hint(f"{shown}. In the Longformer w is the whole window, w/2 tokens on each side: |i - j| <= w / 2.")
        if torch.equal(got, (i - j).abs() < half) or torch.equal(got, (i - j).abs() <= half + 1):
            raise Hint(f"{shown}. w/2 tokens on each side and the token itself: |i - j| <= w / 2, w + 1 tokens in a "
                       "full row.")
        if not torch.equal(got, got.T):
            c = int((got != got.T).any(dim=-1).nonzero()[0])
            k = int((got[c] != got.T[c]).nonzero()[0])
            seer, seen = (c, k) if bool(got[c, k]) else (k, c)
            raise Hint(f"{shown}. Your window is lopsided: token {seer} sees token {seen}, but token {seen} does not "
                       f"see token {seer}. The window is symmetric, w/2 tokens before and w/2 after: |i - j| <= w / 2.")
        if not bool(got.diagonal().all()):
            raise Hint(f"{shown}. Each token sees itself (|i - i| = 0): the diagonal of the mask is True.")
        expect_equal(got, expected, f"local_window_mask({S}, {w})",
                     why=f"{shown}. Token i sees token j exactly when |i - j| <= w / 2.")
    return "token i sees tokens i - w/2 .. i + w/2, for windows narrower and wider than the sequence, and w = 0."


# --- 08.3: rotary embeddings with complex numbers ------------------------------------------------------------------


def _rope_pairs(x: Tensor, positions: Tensor, theta: float, pairs: str = "neighbours", layout: str = "neighbours",
                sign: float = 1.0, exponent: float = -2.0) -> Tensor:
    """Reference (and the usual mistakes): turn the planes of x (S, HS), real arithmetic, float64. Plane i turns by
    sign · positions · theta^(exponent · i / HS); `pairs`: which features make plane i, (2i, 2i + 1) ("neighbours")
    or (i, i + HS/2) ("halves"); `layout`: where its two results go back, the same two choices."""
    S, HS = x.shape
    x = x.detach().double()
    freq = theta ** (exponent * torch.arange(HS // 2, dtype=torch.float64) / HS)  # (HS/2,)
    angles = sign * positions.double()[:, None] * freq  # (S, HS/2)
    a, b = (x[:, : HS // 2], x[:, HS // 2 :]) if pairs == "halves" else (x[:, 0::2], x[:, 1::2])  # (S, HS/2) each
    ra, rb = a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()  # (S, HS/2) each
    return torch.cat([ra, rb], -1) if layout == "halves" else torch.stack([ra, rb], -1).flatten(-2)  # (S, HS)


@grader("08.3")
def check_08_3(rope_complex) -> str:
    """rope_complex(x, positions, theta): interleaved RoPE of x (S, HS) at positions (S,)."""
    generator = torch.Generator().manual_seed(3)
    cases = [  # S, HS, positions, theta: S, HS and HS/2 unlike
        (6, 8, torch.arange(6) + 3, 100.0),  # the tokens after 3 others, as in decoding with a cache
        (5, 12, torch.tensor([0, 0, 0, 1, 2]), 10000.0),  # left padding: repeated positions
        (3, 4, torch.tensor([9, 2, 14]), 50.0),  # positions in any order
    ]
    for S, HS, positions, theta in cases:
        x = torch.randn(S, HS, generator=generator, dtype=dtype())  # (S, HS)
        expected = _rope_pairs(x, positions, theta)  # (S, HS), before the answer runs
        where = f"for x of shape (S, HS) = {(S, HS)}, positions {positions.tolist()} and theta = {theta:g}"
        got = expect_tensor(call(rope_complex, x, positions, theta), "rope_complex(x, positions, theta)")
        if got.is_complex():
            raise Hint(f"{where}, you returned a complex tensor of shape {tuple(got.shape)}: return real features, "
                       "(S, HS), by turning the complex result back with torch.view_as_real(...).flatten(-2).")
        if tuple(got.shape) == (S, HS // 2, 2):
            raise Hint(f"{where}, you returned shape (S, HS/2, 2) = {(S, HS // 2, 2)}: flatten the last two axes, so "
                       "that the real and imaginary parts of plane i land on features 2i and 2i + 1.")
        got = expect_shape(got, (S, HS), "rope_complex(x, positions, theta)")
        if close(got, expected):
            continue
        expect_precision(got, expected, f"rope_complex(x, positions, theta) {where}")
        r = int((got.detach().double() - expected).abs().nan_to_num(1e300).amax(dim=-1).argmax())  # the worst row
        shown = f"{where}, row {r} should be {fmt(expected[r])}, got {fmt(got[r])}"
        other = 7 * theta  # the same x and positions with another base: an answer that ignores theta cannot tell
        if bool(got.isfinite().all()) and close(call(rope_complex, x.clone(), positions.clone(), other), got):
            raise Hint(f"{shown}: your result is the same for theta = {theta:g} and theta = {other:g}. Use the "
                       "argument theta, the base of the frequencies θ_i = theta^(-2i/HS), rather than a number of "
                       "your own (LLaMA's 10000 is only its default).")
        _diagnose_08_3(got, x, positions, theta, shown)
        expect_close(got, expected, f"rope_complex(x, positions, theta) {where}", why=(
            f"Row {r} should be {fmt(expected[r])}, got {fmt(got[r])}. Read x[m] as the complex numbers x[2i] + "
            "i·x[2i + 1] (real part first), multiply each by e^{i · positions[m] · θ_i}, and write the real and "
            "imaginary parts back in place."))
    return "every plane (2i, 2i + 1) of row m is turned by positions[m] · theta^(-2i/HS), whatever the positions."


def _diagnose_08_3(got: Tensor, x: Tensor, positions: Tensor, theta: float, shown: str) -> None:
    """Raise the hint for the usual mistake of rope_complex that `got` (S, HS) makes, if it is one; `shown` says
    where the answer is wrong, for the message."""
    S = x.shape[0]
    orders = [  # (pairs, layout, what is wrong) of the answers that turn the right angles in the wrong places
        ("halves", "halves", "pair the neighbours (2i, 2i + 1), the layout of the original code, not the halves "
         "(i, i + HS/2)."),
        ("neighbours", "halves", "you turned the right planes (2i, 2i + 1), but wrote the results back as two "
         "halves, every real part first, then every imaginary part. Write plane i back to features 2i and 2i + 1: "
         "torch.view_as_real(...).flatten(-2), or torch.stack([re, im], -1).flatten(-2), not torch.cat."),
        ("halves", "neighbours", "you paired feature i with feature i + HS/2 (reshape(S, 2, HS/2) cuts x into two "
         "halves): plane i is the neighbours (2i, 2i + 1), x.reshape(S, HS/2, 2), the real part first."),
    ]
    for pairs, layout, hint in orders:
        if close(got, _rope_pairs(x, positions, theta, pairs=pairs, layout=layout)):
            raise Hint(f"{shown}: {hint}")
    if close(got, _rope_pairs(x, positions, theta, sign=-1.0)):
        raise Hint(f"{shown}: turn by +m·θ_i: multiply by e^{{+i m θ_i}}, not by its conjugate.")
    for exponent, yours in [(-1.0, "theta^(-i/HS)"), (-4.0, "theta^(-4i/HS)"), (2.0, "theta^(+2i/HS)")]:
        if close(got, _rope_pairs(x, positions, theta, exponent=exponent)):
            raise Hint(f"{shown}: plane i turns by θ_i = theta^(-2i/HS) per position (i = 0 .. HS/2 - 1, so "
                       f"the exponent steps by 2/HS and falls from 0 towards -1); yours turn by {yours}.")
    if close(got, _rope_pairs(x, torch.arange(S), theta)):
        raise Hint(f"{shown}: turn each row by its own entry of `positions` (here {positions.tolist()}), not by "
                   "its row number.")
    y, x = got.detach().double(), x.double()
    if bool(y.isnan().any()) or close(y.reshape(S, -1, 2).norm(dim=-1), x.reshape(S, -1, 2).norm(dim=-1)):
        return  # NaN, or every plane keeps its length: a wrong angle, which the final message shows
    if close(y.norm(dim=-1), x.norm(dim=-1)):  # each row keeps its length, its planes do not: features moved
        raise Hint(f"{shown}: each row keeps its length, but not each plane (2i, 2i + 1): your features are paired "
                   "or placed in another order. Read plane i from features 2i and 2i + 1, x.reshape(S, HS/2, 2) "
                   "(real part first), and write its result back to the same two features.")
    raise Hint(f"{shown}: a rotation keeps the length of every plane (2i, 2i + 1), yours changes it: multiply by "
               "e^{i m θ_i}, of length 1. torch.polar(abs, angle) takes the length first: "
               "torch.polar(torch.ones_like(angles), angles).")
