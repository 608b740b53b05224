"""Graders for the exercises of notebook 07 (efficient attention: online softmax, tiles, recomputation)."""

from __future__ import annotations

import math

import torch

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
                   "Where the merged m is -inf, subtract 0 instead (the sums are 0 there anyway).")
    expect_close(m[:3], s[:3].amax(dim=-1), "m", why="The merged maximum is the larger of m1 and m2.")
    if not (m[3] == -math.inf and l[3] == 0):
        raise Hint(f"a row that sees no key must keep m = -inf and l = 0, got m = {m[3].item()}, l = {l[3].item()}.")
    expected = (s[:3] - s[:3].amax(dim=-1, keepdim=True)).exp().sum(dim=-1)  # (3,)
    expect_close(l[:3], expected, "l", atol=1e-9,
                 why="Each sum was measured against its own maximum: rescale l1 by exp(m1 - m) and l2 by "
                     "exp(m2 - m) before adding them.")
    return "m + log(l) is now the log-sum-exp of the whole row, hidden blocks included."


def _needed_key_blocks(i0: int, i1: int, S: int, S_kv: int, block_size: int) -> list[int]:
    i = torch.arange(i0, i1)[:, None]  # (Bq, 1)
    j = torch.arange(S_kv)[None, :]  # (1, S_kv)
    visible = (j <= i + S_kv - S).any(dim=0)  # (S_kv,): keys some query of the block sees
    return [j0 for j0 in range(0, S_kv, block_size) if bool(visible[j0 : j0 + block_size].any())]


@grader("07.2")
def check_07_2(key_blocks) -> str:
    """`key_blocks(i0, i1, S, S_kv, block_size) -> list of j0`: the key blocks a causal query block must visit."""
    cases = [(8, 8, 4), (8, 8, 3), (3, 8, 3), (4, 10, 3), (3, 12, 4), (10, 4, 3), (5, 7, 3), (7, 7, 7), (5, 5, 1)]
    for S, S_kv, bs in cases:
        for i0 in range(0, S, bs):
            i1 = min(i0 + bs, S)
            got = key_blocks(i0, i1, S, S_kv, bs)
            try:
                got = [int(j) for j in got]
            except (TypeError, ValueError):
                raise Hint(f"key_blocks should return a list of block starts j0 (ints), got {got!r}.") from None
            expected = _needed_key_blocks(i0, i1, S, S_kv, bs)
            if got == expected:
                continue
            where = f"for queries {i0}..{i1 - 1} with S={S}, S_kv={S_kv}, block_size={bs}"
            last = i1 - 1 + S_kv - S  # the last key the last query of the block sees
            if S != S_kv and got == _needed_key_blocks(i0, i1, S_kv, S_kv, bs):
                raise Hint(f"{where} the answer is {expected}, got {got}: with S != S_kv the queries are the LAST S "
                           "positions, so query i sees keys 0..i + (S_kv - S), not 0..i.")
            extra, missing = sorted(set(got) - set(expected)), sorted(set(expected) - set(got))
            if extra:
                raise Hint(f"{where} the blocks {extra} lie entirely in the future of every query of the block "
                           f"(the last one, {i1 - 1}, sees keys up to {last}): skip them.")
            if missing:
                raise Hint(f"{where} the blocks {missing} are missing: the LAST query of the block, {i1 - 1}, sees "
                           f"keys up to {last}.")
            raise Hint(f"{where} the answer is {expected} in increasing order, got {got}.")
    return "every causal query block visits exactly the key blocks it needs, also when S != S_kv."


@grader("07.3")
def check_07_3(softmax_backward) -> str:
    """`softmax_backward(p, dp) -> ds`: the gradient of the scores from the weights and their gradient."""
    g = torch.Generator().manual_seed(3)
    scores = torch.randn(5, 7, generator=g, dtype=torch.float64, requires_grad=True)  # (rows, S_kv)
    dp = torch.randn(5, 7, generator=g, dtype=torch.float64)  # (rows, S_kv): the upstream gradient of p
    p = scores.softmax(dim=-1)  # (rows, S_kv)
    (expected,) = torch.autograd.grad(p, scores, dp)  # (rows, S_kv)
    p, dp_in = p.detach(), dp.clone()
    ds = expect_shape(softmax_backward(p.clone(), dp_in), (5, 7), "ds")
    if torch.allclose(ds, p * dp):
        raise Hint("ds = p * dp forgets that every weight of a row depends on every score of it, through the "
                   "denominator: subtract D_i = sum_j p_ij dp_ij from dp first, ds = p * (dp - D).")
    column = p * (dp - (p * dp).sum(dim=0, keepdim=True))
    if torch.allclose(ds, column):
        raise Hint("D must be a sum over the keys of each row (the last axis, keepdim=True), not over the rows.")
    expect_close(ds, expected, "ds", atol=1e-9, why="Compare with ds = p * (dp - (p * dp).sum(-1, keepdim=True)).")
    return "ds = p ∘ (dp − D) equals autograd; in the tiled backward D_i = dO_i · O_i needs no row of weights."
