"""Graders for the exercises of notebook 07 (efficient attention: online softmax, tiles, recomputation)."""

from __future__ import annotations

import math

import torch

from ..efficient import tiled_forward
from ._grading import Hint, expect_close, expect_shape, grader

__all__ = ["check_07_1", "check_07_2", "check_07_3"]


@grader("07.1")
def check_07_1(merge) -> str:
    """`merge(m1, l1, m2, l2) -> (m, l)`: the running maximum and sum of two blocks of the same rows, combined."""
    g = torch.Generator().manual_seed(7)
    scores = torch.randn(4, 10, generator=g, dtype=torch.float64) * 4  # (rows, S_kv): 4 rows, two blocks of 5
    visible = torch.ones(4, 10, dtype=torch.bool)
    visible[1, :5] = False  # row 1: its first block is hidden
    visible[2, 5:] = False  # row 2: its second block is hidden
    visible[3] = False  # row 3: sees no key at all
    s = scores.masked_fill(~visible, -math.inf)  # (rows, S_kv)

    def stats(block):  # (rows, 5) -> m, l of the block; an empty block has m = -inf, l = 0
        m = block.amax(dim=-1)  # (rows,)
        return m, (block - m.nan_to_num(neginf=0.0)[:, None]).exp().sum(dim=-1)  # (rows,)

    (m1, l1), (m2, l2) = stats(s[:, :5]), stats(s[:, 5:])
    answer = merge(m1.clone(), l1.clone(), m2.clone(), l2.clone())
    if not isinstance(answer, tuple) or len(answer) != 2:
        raise Hint("merge should return a pair (m, l) of tensors of shape (rows,).")
    m, l = (expect_shape(t, (4,), name) for t, name in zip(answer, ("m", "l"), strict=True))
    if m.isnan().any() or l.isnan().any():
        raise Hint("a row whose blocks are all hidden (m1 = m2 = -inf) gives NaN: exp(-inf - (-inf)) is NaN. "
                   "online_softmax_update meets the same problem while a row has seen nothing: see how it avoids it.")
    expect_close(m[:3], s[:3].amax(dim=-1), "m", why="The merged maximum is the larger of m1 and m2.")
    if not (m[3] == -math.inf and l[3] == 0):
        raise Hint(f"a row that sees no key must keep m = -inf and l = 0, got m = {m[3].item()}, l = {l[3].item()}.")
    expected = (s[:3] - s[:3].amax(dim=-1, keepdim=True)).exp().sum(dim=-1)  # (3,)
    expect_close(l[:3], expected, "l", atol=1e-9,
                 why="l1 and l2 were each measured against their own block's maximum: before adding them, "
                     "measure both against the merged maximum (the online-softmax section shows how a sum changes "
                     "when its maximum does).")
    return "m + log(l) is now the log-sum-exp of the whole row, hidden blocks included."


def _window_key_blocks(i0: int, i1: int, S: int, S_kv: int, block_size: int, window: int) -> list[int]:
    p = torch.arange(i0, i1)[:, None] + S_kv - S  # (Bq, 1): the positions of the queries
    j = torch.arange(S_kv)[None, :]  # (1, S_kv)
    visible = ((j <= p) & (j > p - window)).any(dim=0)  # (S_kv,): keys some query of the block sees
    return [j0 for j0 in range(0, S_kv, block_size) if bool(visible[j0 : j0 + block_size].any())]


@grader("07.2")
def check_07_2(window_key_blocks) -> str:
    """`window_key_blocks(i0, i1, S, S_kv, block_size, window) -> list of j0`: the key blocks a query block visits."""
    cases = [  # S, S_kv, block_size, window
        (12, 12, 4, 3), (12, 12, 4, 5), (12, 12, 3, 1), (10, 10, 4, 20), (5, 13, 4, 4), (4, 16, 3, 6),
        (9, 6, 2, 3), (8, 8, 8, 2), (7, 11, 3, 3),
    ]
    for S, S_kv, bs, window in cases:
        for i0 in range(0, S, bs):
            i1 = min(i0 + bs, S)
            got = window_key_blocks(i0, i1, S, S_kv, bs, window)
            try:
                got = [int(j) for j in got]
            except (TypeError, ValueError):
                raise Hint(f"window_key_blocks should return a list of block starts j0 (ints), got {got!r}.") from None
            expected = _window_key_blocks(i0, i1, S, S_kv, bs, window)
            if got == expected:
                continue
            where = f"for queries {i0}..{i1 - 1} with S={S}, S_kv={S_kv}, block_size={bs}, window={window}"
            first, last = i0 + S_kv - S, i1 - 1 + S_kv - S  # the positions of the first and the last query
            if S != S_kv and got == _window_key_blocks(i0, i1, S_kv, S_kv, bs, window):
                raise Hint(f"{where} the answer is {expected}, got {got}: with S != S_kv the queries are the LAST S "
                           "positions, so query i sits at position i + (S_kv - S), not at i.")
            extra, missing = sorted(set(got) - set(expected)), sorted(set(expected) - set(got))
            if extra and all(j0 > last for j0 in extra):
                raise Hint(f"{where} the blocks {extra} lie entirely in the future of every query of the block "
                           f"(the last one sits at position {last}): skip them.")
            if extra:
                raise Hint(f"{where} the blocks {extra} lie entirely before the window of every query of the block. "
                           f"The first query of the block (position {first}) reaches furthest back: which is the "
                           f"oldest key of its window of {window} keys, its own position included?")
            if missing:
                raise Hint(f"{where} the blocks {missing} are missing: every query of the block counts, the first "
                           f"(position {first}) for the oldest keys and the last (position {last}) for the newest.")
            raise Hint(f"{where} the answer is {expected} in increasing order, got {got}.")
    return "each query block visits exactly the key blocks its windows reach: a window lets the loop start late too."


@grader("07.3")
def check_07_3(combine) -> str:
    """`combine(out1, lse1, out2, lse2) -> (out, lse)`: the results of `tiled_forward` on two ranges of keys, merged."""
    g = torch.Generator().manual_seed(7)
    B, NH, S, S_kv, HS, split = 4, 2, 3, 11, 5, 6  # the ranges: keys 0..5 and 6..10
    q = torch.randn(B, NH, S, HS, generator=g, dtype=torch.float64) * 2  # (B, NH, S, HS)
    k, v = (torch.randn(B, NH, S_kv, HS, generator=g, dtype=torch.float64) * 2 for _ in range(2))  # (B, NH, S_kv, HS)
    real = torch.tensor([11, 4, 0, 9])[:, None] > torch.arange(S_kv)[None, :]  # (B, S_kv): right padding
    mask = real[:, None, None, :]  # (B, 1, 1, S_kv): sequence 1 sees nothing in the second range, 2 nothing at all
    with torch.no_grad():
        expected_out, expected_lse = tiled_forward(q, k, v, mask, False, 4)  # over all the keys
        out1, lse1 = tiled_forward(q, k[..., :split, :], v[..., :split, :], mask[..., :split], False, 4)
        out2, lse2 = tiled_forward(q, k[..., split:, :], v[..., split:, :], mask[..., split:], False, 4)
    answer = combine(out1.clone(), lse1.clone(), out2.clone(), lse2.clone())
    if not isinstance(answer, tuple) or len(answer) != 2:
        raise Hint("combine should return a pair (out, lse): out (..., S, HS) and lse (..., S).")
    out = expect_shape(answer[0], (B, NH, S, HS), "out")
    lse = expect_shape(answer[1], (B, NH, S), "lse")
    if out.isnan().any() or lse.isnan().any():
        raise Hint("NaN appears where a range holds no visible key: there tiled_forward returns out = 0 and "
                   "lse = +inf, and +inf - (+inf) is NaN. How much should such a range weigh in the result?")
    blind = ~real.any(dim=-1)  # (B,): sequence 2 sees no key at all
    if not bool((lse[blind] == math.inf).all()) or not bool((out[blind] == 0).all()):
        raise Hint("a row that sees no key in either range must come out as tiled_forward gives it: out = 0 and "
                   f"lse = +inf (the backward relies on +inf), got lse = {lse[blind].flatten()[:3].tolist()}.")
    expect_close(out[~blind], expected_out[~blind], "out", atol=1e-9,
                 why="each range's output is normalised by its own sum; in the whole row, each range weighs its "
                     "share of the total sum of exponentials, which the lse of the range and of the whole tell.")
    expect_close(lse[~blind], expected_lse[~blind], "lse", atol=1e-9,
                 why="e^lse of a range is the sum of the exponentials of its scores: what is the sum over both "
                     "ranges, and its log? (Stay in log space: e^lse may overflow.)")
    return ("the ranges merge exactly: n cores can share the walk through a long cache, for the price of this "
            "small combination.")
