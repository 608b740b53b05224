"""Graders for the exercises of notebook 07 (efficient attention: online softmax, tiles, recomputation)."""

from __future__ import annotations

import functools
import math
import numbers

import torch
from torch import Tensor

from ..efficient import tiled_forward
from ._grading import Hint, call, close, dtype, expect_close, expect_precision, expect_shape, expect_tensor, fmt, grader

__all__ = ["check_07_1", "check_07_2", "check_07_3"]


def _huge() -> float:
    """A score far enough from 0 that its exponential overflows (or, negated, underflows to 0) in the grader's
    dtype: 1.2 · log(largest float), about 106 in float32 and 852 in float64."""
    return 1.2 * math.log(torch.finfo(dtype()).max)


def _exp_range() -> str:
    """Where e^x stops being a number in the grader's dtype, for a message: 'above 89 and ... below -103 in float32'."""
    info = torch.finfo(dtype())
    return (f"e^x overflows to inf above {math.log(info.max):.0f} and underflows to 0 below "
            f"{math.log(info.tiny * info.eps):.0f} in {str(dtype()).removeprefix('torch.')}")


# --- 07.1: merge the running softmax statistics of two blocks ------------------------------------------------------

# the kinds of rows of 07.1: where the maximum is, which block is hidden, and scores whose e^score over- or underflows
_MERGE_KINDS = ("max in block 1", "max in block 2", "tie", "huge", "tiny", "apart", "block 1 hidden",
                "block 2 hidden", "both hidden")


def _merge_row(kind: str, n1: int, n2: int, g: torch.Generator, huge: float) -> tuple[Tensor, Tensor]:
    """The scores of one row of the kind `kind`, in float64: block 1 (n1,) and block 2 (n2,), -inf where hidden."""
    a = 2 * torch.randn(n1, generator=g, dtype=torch.float64)  # (n1,)
    b = 2 * torch.randn(n2, generator=g, dtype=torch.float64)  # (n2,)
    gap = 0.5 + 2.5 * torch.rand((), generator=g, dtype=torch.float64)  # how far one block's maximum leads
    if kind == "max in block 1":
        a = a - a.max() + b.max() + gap
    elif kind == "max in block 2":
        b = b - b.max() + a.max() + gap
    elif kind == "tie":
        a = a - a.max() + b.max()
        a[a.argmax()] = b.max()  # exactly equal maxima, whatever the rounding
    elif kind == "huge":  # e^m overflows: only differences of scores may be exponentiated
        a, b = a - a.max() + huge, b - b.max() + huge - gap
    elif kind == "tiny":  # e^m underflows to 0
        a, b = a - a.max() - huge, b - b.max() - huge + gap
    elif kind == "apart":  # block 2 weighs e^(-2 huge) = 0 beside block 1
        a, b = a - a.max() + huge, b - b.max() - huge
    elif kind == "block 1 hidden":  # the visible maximum is negative: a 0 put in for -inf would win
        a, b = torch.full_like(a, -math.inf), b - b.max() - gap
    elif kind == "block 2 hidden":
        a, b = a - a.max() - gap, torch.full_like(b, -math.inf)
    else:  # both hidden: a row that sees no key
        a, b = torch.full_like(a, -math.inf), torch.full_like(b, -math.inf)
    return a, b


def _stats(block: Tensor) -> tuple[Tensor, Tensor]:
    """(rows, n) scores -> m, l (rows,) each, in the scores' dtype; a row that sees nothing has m = -inf, l = 0."""
    m = block.amax(dim=-1)  # (rows,)
    return m, (block - m.masked_fill(m == -math.inf, 0.0)[:, None]).exp().sum(dim=-1)  # (rows,), (rows,)


def _merged(m1: Tensor, l1: Tensor, m2: Tensor, l2: Tensor) -> tuple[Tensor, Tensor]:
    """The right merge in float64: m = max(m1, m2), l = l1 e^(m1 - m) + l2 e^(m2 - m), each (rows,)."""
    m1, l1, m2, l2 = (t.double() for t in (m1, l1, m2, l2))
    m = torch.maximum(m1, m2)  # (rows,)
    m_safe = m.masked_fill(m == -math.inf, 0.0)  # (rows,): a row that sees nothing, no -inf - (-inf)
    return m, l1 * (m1 - m_safe).exp() + l2 * (m2 - m_safe).exp()  # (rows,), (rows,)


def _worst_row(got: Tensor, expected: Tensor, rows: Tensor) -> int:
    """The row among `rows` (bool (rows,)) where `got` (rows, ...) is furthest from `expected` (NaN: furthest)."""
    got = got.detach().double()
    gap = (got - expected).abs().nan_to_num(math.inf, math.inf, math.inf)  # (rows, ...)
    gap = gap.masked_fill(got == expected, 0.0).reshape(len(rows), -1).amax(dim=-1)  # (rows,): equal infinities
    return int(gap.masked_fill(~rows, -1.0).argmax())


def _expect_rows(rows: Tensor, where: list[str], why: str, **pairs: tuple[Tensor, Tensor]) -> None:
    """Each named (got, expected) pair must be right on `rows` (bool (rows,)); else the hint 'in {where[r]} (a, b)
    should be (..., ...), got (..., ...){why}', for the row r where the first pair that misses is furthest off."""
    for got, expected in pairs.values():
        if not close(got[rows], expected[rows]):
            r = _worst_row(got, expected, rows)
            want, have = (", ".join(fmt(pair[k][r]) for pair in pairs.values()) for k in (1, 0))
            raise Hint(f"in {where[r]} ({', '.join(pairs)}) should be ({want}), got ({have}){why}")


def _precise(rows: Tensor, **pairs: tuple[Tensor, Tensor]) -> None:
    """expect_precision for each named (got, expected) pair on `rows` (bool (rows,)), the rows whose expected values
    are finite (an infinity minus itself would say nothing)."""
    for name, (got, expected) in pairs.items():
        expect_precision(got[rows], expected[rows], name)


def _merge_state(r: int, kinds: list[str], m1: Tensor, l1: Tensor, m2: Tensor, l2: Tensor) -> str:
    """Row r of the inputs of 07.1, rounded, for a message."""
    return f"row {r} ({kinds[r]}: m1 = {fmt(m1[r])}, l1 = {fmt(l1[r])}, m2 = {fmt(m2[r])}, l2 = {fmt(l2[r])})"


@grader("07.1")
def check_07_1(merge) -> str:
    """`merge(m1, l1, m2, l2) -> (m, l)`: the running maximum and sum of two blocks of the same rows, combined; all
    (rows,). A block in which a row sees no key has m = -inf, l = 0."""
    g = torch.Generator().manual_seed(7)
    huge = _huge()
    for reps, n1, n2 in [(1, 5, 3), (2, 2, 7), (3, 4, 1)]:  # rows = 9 · reps, no size alike; a block of one key
        kinds = [_MERGE_KINDS[i % len(_MERGE_KINDS)] for i in torch.randperm(reps * len(_MERGE_KINDS), generator=g)]
        blocks = [_merge_row(kind, n1, n2, g, huge) for kind in kinds]
        s1 = torch.stack([a for a, _ in blocks]).to(dtype())  # (rows, n1)
        s2 = torch.stack([b for _, b in blocks]).to(dtype())  # (rows, n2)
        (m1, l1), (m2, l2) = _stats(s1), _stats(s2)  # each (rows,), in the grader's dtype
        exp_m, exp_l = _merged(m1, l1, m2, l2)  # (rows,) each, float64: before the answer runs
        rows = len(kinds)
        kind = {k: torch.tensor([x == k for x in kinds]) for k in _MERGE_KINDS}  # each (rows,) bool
        state = [_merge_state(r, kinds, m1, l1, m2, l2) for r in range(rows)]  # for messages

        got = call(merge, m1, l1, m2, l2)
        if not isinstance(got, tuple | list) or len(got) != 2:
            raise Hint(f"merge should return a pair (m, l), two tensors of shape (rows,); got {type(got).__name__}"
                       + (f" of length {len(got)}." if isinstance(got, tuple | list) else "."))
        m = expect_shape(got[0], (rows,), "m").detach()
        l = expect_shape(got[1], (rows,), "l").detach()
        _precise(exp_m.isfinite(), m=(m, exp_m), l=(l, exp_l))  # before the diagnoses: their numbers would look equal
        d1, d2 = (m1.double() - exp_m).exp(), (m2.double() - exp_m).exp()  # (rows,): e^(m_block - m), both <= 1

        # rows that see both blocks, scores of ordinary size: the maximum in block 1, in block 2, or in both
        plain = kind["max in block 1"] | kind["max in block 2"] | kind["tie"]  # (rows,)
        if not close(m[plain], exp_m[plain]):
            r = _worst_row(m, exp_m, plain)
            raise Hint(f"in {state[r]} m should be {fmt(exp_m[r])}, got {fmt(m[r])}: the maximum of both blocks "
                       "together is the larger of m1 and m2 (torch.maximum).")
        if not close(l[plain], exp_l[plain]):
            r = _worst_row(l, exp_l, plain)
            shown = f"in {state[r]} l should be {fmt(exp_l[r])}, got {fmt(l[r])}"
            L1, L2 = l1.double(), l2.double()  # (rows,)
            if close(l[plain], (L1 + L2)[plain]):
                raise Hint(f"{shown}: you added l1 + l2 as they are, but l1 was measured against m1 and l2 against "
                           "m2 (each is a sum of e^(z - m_block)). Before adding them, measure both against the merged "
                           "maximum (the online-softmax section shows how a sum changes when its maximum does).")
            for done, left, alone in [(1, 2, L1 * d1 + L2), (2, 1, L1 + L2 * d2)]:
                if close(l[plain], alone[plain]):
                    r = _worst_row(l, exp_l, plain & kind[f"max in block {done}"])
                    raise Hint(f"you rescaled l{done} but not l{left}. In {state[r]} the maximum is in block {done}, "
                               f"so l{left}, measured against m{left}, must be measured against m = m{done} too: "
                               f"l should be {fmt(exp_l[r])}, got {fmt(l[r])}. Rescale both sums (the factor of "
                               "the block that holds the maximum is 1).")
            if close(l[plain], (L1 / d1 + L2 / d2)[plain]):
                raise Hint(f"{shown}: your factors are e^(m - m1) and e^(m - m2), at least 1. A sum of e^(z - m1) "
                           "measured against a larger maximum m shrinks: each term e^(z - m) = e^(z - m1) e^(m1 - m), "
                           "a factor of at most 1.")
            if close(l[plain], torch.maximum(L1 * d1, L2 * d2)[plain]) or close(l[plain], torch.maximum(L1, L2)[plain]):
                raise Hint(f"{shown}: l is a sum over the keys of both blocks; add the two sums (each measured "
                           "against the merged maximum) rather than keeping the larger one. Only m is a maximum.")
            if close(l[plain], (L1 * 2 ** (m1.double() - exp_m) + L2 * 2 ** (m2.double() - exp_m))[plain]):
                raise Hint(f"{shown}: your factors are powers of 2 (torch.exp2), 2^(m1 - m). l1 and l2 are sums of "
                           "e^(z - m_block), so measuring them against m takes e^(m1 - m): torch.exp.")
            if close(l[plain], (L1 * m1.double().exp() + L2 * m2.double().exp())[plain]):
                raise Hint(f"{shown}: your l is the sum of e^z, but l is measured against the maximum, the sum of "
                           "e^(z - m) (so that e^z never has to be computed: it overflows). Rescale l1 and l2 to the "
                           "merged maximum instead.")
            where = "both blocks" if kinds[r] == "tie" else kinds[r].removeprefix("max in ")
            raise Hint(f"{shown}. The maximum of this row is in {where}: measure both sums against the merged "
                       "maximum m = max(m1, m2) before adding them.")

        # scores near ±huge: e^m overflows to inf or underflows to 0, only differences may be exponentiated
        _expect_rows(kind["huge"] | kind["tiny"] | kind["apart"], state, f". {_exp_range()}: never exponentiate a "
                     "maximum or a score alone, only differences such as m1 - m (at most 0).", m=(m, exp_m),
                     l=(l, exp_l))

        # rows with a hidden block: m = -inf, l = 0 there, and e^(-inf - (-inf)) is NaN
        hidden = kind["block 1 hidden"] | kind["block 2 hidden"] | kind["both hidden"]  # (rows,)
        if bool(m[hidden].isnan().any()) or bool(l[hidden].isnan().any()):
            raise Hint("a row whose blocks are all hidden (m1 = m2 = -inf) gives NaN: exp(-inf - (-inf)) is NaN. "
                       "online_softmax_update meets the same problem while a row has seen nothing: see how it "
                       "avoids it.")
        one = kind["block 1 hidden"] | kind["block 2 hidden"]  # (rows,)
        if not close(m[one], exp_m[one]):
            r = _worst_row(m, exp_m, one)
            if float(m[r]) == 0.0:
                raise Hint(f"in {state[r]} m should be {fmt(exp_m[r])}, got 0: you replaced the -inf of the hidden "
                           "block by 0 before taking the maximum, and 0 beats the negative scores of the other block. "
                           "Take the maximum of m1 and m2 as they are; replace -inf only where it is subtracted.")
        both = kind["both hidden"]  # (rows,)
        if not (bool((m[both] == -math.inf).all()) and bool((l[both] == 0).all())):
            r = int(both.nonzero()[0])
            raise Hint(f"a row that sees no key must keep m = -inf and l = 0, got m = {fmt(m[r])}, l = {fmt(l[r])} "
                       f"in {state[r]}.")
        expect_close(m, exp_m, "m", why="The merged maximum is the larger of m1 and m2.")
        expect_close(l, exp_l, "l", why="Measure l1 and l2 against the merged maximum before adding them.")
    return ("m + log(l) is the log-sum-exp of the whole row, wherever its maximum is, with hidden blocks and scores "
            "whose exponential overflows.")


# --- 07.2: the key blocks of a sliding-window query block ----------------------------------------------------------


def _window_key_blocks(i0: int, i1: int, S: int, S_kv: int, block_size: int, window: int | None) -> list[int]:
    """The starts of the key blocks holding a key that some query i0..i1-1 sees (no window: None), by brute force."""
    p = torch.arange(i0, i1)[:, None] + S_kv - S  # (Bq, 1): the positions of the queries
    j = torch.arange(S_kv)[None, :]  # (1, S_kv)
    visible = (j <= p) if window is None else (j <= p) & (j > p - window)  # (Bq, S_kv)
    seen = visible.any(dim=0)  # (S_kv,): keys some query of the block sees
    return [j0 for j0 in range(0, S_kv, block_size) if bool(seen[j0 : j0 + block_size].any())]


def _span_blocks(i0: int, i1: int, S: int, S_kv: int, block_size: int, back: int) -> list[int]:
    """The starts of the blocks of keys first - back .. last (within 0..S_kv-1), first and last the positions of
    queries i0 and i1 - 1: the right answer for back = window - 1, and the off-by-ones around it."""
    lo, hi = max(i0 + S_kv - S - back, 0), min(i1 - 1 + S_kv - S, S_kv - 1)
    return [] if lo > hi else list(range(lo // block_size * block_size, hi + 1, block_size))


def _as_starts(got, where: str) -> list[int]:
    """The answer of 07.2 as a list of ints, in its order: a sequence of integers (Python's or numpy's, a range) or a
    1-D integer tensor; anything else (floats, a 2-D tensor, a set, a mask) gets a hint."""
    if isinstance(got, set | frozenset):
        raise Hint(f"{where}, you returned a set: a set has no order, and the blocks must come in increasing order. "
                   "Return a list (or a range).")
    if isinstance(got, Tensor):
        got = expect_tensor(got, f"{where}, the tensor you returned")
        if got.dtype == torch.bool:
            raise Hint(f"{where}, you returned a bool tensor {got.int().tolist()}, one entry per block: return the "
                       "starts j0 of the blocks to visit (multiples of block_size), not a mask over the blocks.")
        if got.ndim != 1:
            raise Hint(f"{where}, you returned a tensor of shape {tuple(got.shape)}: return one start per block, in "
                       "a list or a 1-D tensor of shape (n,).")
        got = got.tolist()  # Python ints, or floats for a float tensor (refused below)
    try:
        starts = list(got)
    except TypeError:
        starts = None  # not a sequence at all
    if starts is not None and all(isinstance(j, numbers.Integral) and not isinstance(j, bool) for j in starts):
        return [int(j) for j in starts]
    floats = [float(j) for j in starts or [] if isinstance(j, numbers.Real) and not isinstance(j, numbers.Integral)]
    if any(not math.isfinite(j) for j in floats):
        raise Hint(f"{where}, you returned {next(j for j in floats if not math.isfinite(j))} among the block starts: "
                   "return the start of every block to visit and nothing else, each a key index 0 .. S_kv - 1 (an "
                   "int); an end marker or a placeholder is no block.")
    if floats:
        raise Hint(f"{where}, you returned {floats[0]} among the block starts: a block start is the index of a key, "
                   "a whole number (an int). Divide with //, not /, or convert with int(...).")
    raise Hint(f"{where}, window_key_blocks should return a list of block starts j0 (whole numbers), got "
               f"{got!r}.")


@grader("07.2")
def check_07_2(window_key_blocks) -> str:
    """`window_key_blocks(i0, i1, S, S_kv, block_size, window) -> list of j0`: the key blocks a query block visits."""
    cases = [  # S, S_kv, block_size, window: no two alike, except S == S_kv for self-attention
        (5, 13, 4, 3),  # the window reaches back into the block before
        (9, 14, 4, 8),  # a window of two whole blocks
        (7, 10, 3, 1),  # a window of one key: each query sees itself only
        (6, 11, 4, 20),  # a window longer than the keys: the causal blocks only
        (9, 6, 2, 3),  # S > S_kv: the first queries sit before the first key and see nothing
        (4, 16, 3, 6),  # a short last key block; the oldest key of a window ends a block
        (2, 3, 5, 1),  # one block of keys larger than the keys
        (12, 12, 5, 7),  # self-attention
    ]
    answers = []  # (S, S_kv, bs, window, i0, i1, got): every query block of every case
    for S, S_kv, bs, window in cases:
        for i0 in range(0, S, bs):
            i1 = min(i0 + bs, S)
            where = f"for queries {i0}..{i1 - 1} with S={S}, S_kv={S_kv}, block_size={bs}, window={window}"
            got = _as_starts(call(window_key_blocks, i0, i1, S, S_kv, bs, window), where)
            answers.append((S, S_kv, bs, window, i0, i1, got))
    wrong = [a for a in answers if a[-1] != _window_key_blocks(*a[4:6], *a[:4])]
    if not wrong:
        return ("each query block visits exactly the key blocks its windows reach: a window lets the loop start late "
                "too.")

    def follows(rule) -> bool:  # the answer is rule(i0, i1, S, S_kv, bs, window) for every query block of every case
        return all(a[-1] == rule(*a[4:6], *a[:4]) for a in answers)

    S, S_kv, bs, window, i0, i1, got = wrong[0]  # the first query block the answer gets wrong
    expected = _window_key_blocks(i0, i1, S, S_kv, bs, window)
    first, last = i0 + S_kv - S, i1 - 1 + S_kv - S  # the positions of the first and the last query
    said = (f"for queries {i0}..{i1 - 1} with S={S}, S_kv={S_kv}, block_size={bs}, window={window} the answer is "
            f"{expected}, got {got}")
    keys = f"{window} key{'s' if window > 1 else ''}, its own position included"
    # mistakes that explain the whole answer
    if follows(lambda i0, i1, S, S_kv, bs, window: _window_key_blocks(i0, i1, S_kv, S_kv, bs, window)):
        raise Hint(f"{said}: with S != S_kv the queries are the LAST S positions, so query i sits at position "
                   "i + (S_kv - S), not at i.")
    if follows(lambda i0, i1, S, S_kv, bs, window: _window_key_blocks(i0, i1, S, S_kv, bs, None)):
        raise Hint(f"{said}: those are all the blocks of the causal rule, from key 0 on. With a window the loop may "
                   f"start late too: the first query (position {first}) sees only its {window} most recent keys.")
    if follows(lambda i0, i1, S, S_kv, bs, window: _span_blocks(i0, i1, S, S_kv, bs, window)):
        raise Hint(f"{said}: your windows hold one key too many. Query position p sees the keys p - window < j <= p: "
                   f"{keys}.")
    if follows(lambda i0, i1, S, S_kv, bs, window: _span_blocks(i0, i1, S, S_kv, bs, window - 2)):
        raise Hint(f"{said}: a window reaches one key further back than yours. Query position p sees the keys "
                   f"p - window < j <= p: {keys}.")
    if follows(lambda i0, i1, S, S_kv, bs, window: _window_key_blocks(i1 - 1, i1, S, S_kv, bs, window)):
        raise Hint(f"{said}: those are the blocks of the last query's window. Every query of the block counts, the "
                   f"first (position {first}) for the oldest keys and the last (position {last}) for the newest.")
    # otherwise, what is wrong with the first query block it gets wrong
    if sorted(set(got)) == expected:
        raise Hint(f"{said}: the blocks must come in increasing order, each once (the tiled forward folds them into "
                   "its running softmax one after the other).")
    if got and got == [j0 // bs for j0 in expected]:
        raise Hint(f"{said}: those are the numbers of the blocks; return their starts j0 = number · block_size, the "
                   "index of each block's first key.")
    if any(j < 0 for j in got):
        raise Hint(f"{said}: a block start is negative. Keys start at 0: when the window of the first query "
                   f"(position {first}) reaches back before key 0, start from key 0.")
    if any(j % bs for j in got):
        raise Hint(f"{said}: {[j for j in got if j % bs]} are not multiples of block_size = {bs}. A block starts at "
                   "a multiple of block_size: round the oldest key seen down to the start of its block "
                   "(key // block_size * block_size).")
    extra, missing = sorted(set(got) - set(expected)), sorted(set(expected) - set(got))
    if extra and all(j0 > last for j0 in extra):
        raise Hint(f"{said}: the blocks {extra} lie entirely in the future of every query of the block (the last "
                   f"one sits at position {last}): skip them.")
    if extra:
        raise Hint(f"{said}: the blocks {extra} lie entirely before the window of every query of the block. The "
                   f"first query of the block (position {first}) reaches furthest back: which is the oldest key of "
                   f"its window of {window} keys, its own position included?")
    if all(j0 > max(got, default=-1) for j0 in missing):
        raise Hint(f"{said}: the last query of the block (position {last}) sees key {last}, in the block that starts "
                   f"at {last // bs * bs}: count it too (the end of a range is exclusive).")
    oldest = max(first - window + 1, 0)  # the oldest key the block sees
    raise Hint(f"{said}: the blocks {missing} are missing. The first query of the block (position {first}) sees "
               f"keys back to key {oldest}, which lies in the block that starts at {oldest // bs * bs}: round down to "
               "the start of the block, and count every block from there to the newest key.")


# --- 07.3: split-KV decoding: combine two ranges of keys -----------------------------------------------------------

# the kinds of rows of 07.3: which ranges hold a visible key, scores whose e^lse over- or underflows, and a NaN score
# in one range (tiled_forward then gives that range NaN for out and lse, as it gives the whole row over all the keys)
_COMBINE_KINDS = ("both", "only range 1", "huge", "both", "only range 2", "tiny", "neither", "both", "apart", "NaN")


def _combined(out1: Tensor, lse1: Tensor, out2: Tensor, lse2: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The right combination in float64: (out (..., S, HS), lse (..., S)) and the weights of the ranges (..., S)."""
    a = lse1.double().masked_fill(lse1 == math.inf, -math.inf)  # (..., S): a range that sees nothing weighs nothing
    b = lse2.double().masked_fill(lse2 == math.inf, -math.inf)  # (..., S)
    lse = torch.logaddexp(a, b)  # (..., S): log(e^lse1 + e^lse2), NaN where a range saw a NaN
    seen = lse != -math.inf  # (..., S): not `lse > -inf`, which a NaN row would fail and so look empty
    safe = torch.where(seen, lse, 0.0)  # (..., S)
    w1, w2 = (a - safe).exp(), (b - safe).exp()  # (..., S) each: the share of each range, summing to 1
    out = w1[..., None] * out1.double() + w2[..., None] * out2.double()  # (..., S, HS)
    return torch.where(seen[..., None], out, 0.0), torch.where(seen, lse, math.inf), w1, w2


def _combine_case(
    lead: tuple[int, ...], S: int, S_kv: int, HS: int, split: int, g: torch.Generator
) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...] | None, list[str]]:
    """Inputs of 07.3: tiled_forward's (out1, lse1, out2, lse2) over the keys 0..split-1 and split..S_kv-1, in the
    grader's dtype; the same with a NaN score in the rows of kind "NaN" (None if the case has none); and the kind of
    each row (rows = prod(lead) · S, flattened). Without the NaN scores those rows are rows of kind "both"."""
    rows = math.prod(lead) * S
    kinds = [_COMBINE_KINDS[r % len(_COMBINE_KINDS)] for r in range(rows)]
    huge = _huge()
    q = torch.randn(*lead, S, HS, generator=g, dtype=dtype())  # (..., S, HS)
    k, v = torch.randn(2, *lead, S_kv, HS, generator=g, dtype=dtype()).unbind(0)  # (..., S_kv, HS) each
    visible = torch.rand(rows, S_kv, generator=g) < 0.7  # (rows, S_kv)
    bias = torch.zeros(rows, S_kv, dtype=torch.float64)  # (rows, S_kv)
    nan = torch.zeros(rows, S_kv, dtype=torch.float64)  # (rows, S_kv): NaN where a row's score is NaN, else 0
    for r, kind in enumerate(kinds):
        one, two = {"only range 1": (True, False), "only range 2": (False, True), "neither": (False, False)}.get(
            kind, (True, True))  # whether the row sees keys in range 1, in range 2
        keys = int(torch.randint(0, split, (), generator=g)), int(torch.randint(split, S_kv, (), generator=g))
        visible[r, list(keys)] = True  # at least one key in each range...
        visible[r, :split] &= one  # ...unless the range is hidden from this row
        visible[r, split:] &= two
        shift = {"huge": (huge, huge - 0.5), "tiny": (-huge, -huge + 0.7), "apart": (huge, -huge)}.get(kind, (0, 0))
        bias[r, :split], bias[r, split:] = shift
        if kind == "NaN":  # a visible key of range 1 or 2 (every other such row) scores NaN
            nan[r, keys[r // len(_COMBINE_KINDS) % 2]] = math.nan
    mask = visible.reshape(*lead, S, S_kv)  # (..., S, S_kv)

    def ranges(bias: Tensor) -> tuple[Tensor, ...]:  # (rows, S_kv) -> out1, lse1, out2, lse2
        bias = bias.reshape(*lead, S, S_kv).to(dtype())  # (..., S, S_kv)
        with torch.no_grad():
            out1, lse1 = tiled_forward(q, k[..., :split, :], v[..., :split, :], mask[..., :split], False, 4,
                                       bias=bias[..., :split])
            out2, lse2 = tiled_forward(q, k[..., split:, :], v[..., split:, :], mask[..., split:], False, 4,
                                       bias=bias[..., split:])
        return out1, lse1, out2, lse2

    return ranges(bias), ranges(bias + nan) if "NaN" in kinds else None, kinds


def _out_lse(got, out1: Tensor, lse1: Tensor) -> tuple[Tensor, Tensor]:
    """The answer of 07.3 as (out, lse), detached, with out1's and lse1's shapes."""
    if not isinstance(got, tuple | list) or len(got) != 2:
        raise Hint("combine should return a pair (out, lse): out (..., S, HS) and lse (..., S); got "
                   f"{type(got).__name__}.")
    out = expect_shape(got[0], tuple(out1.shape), f"out (inputs out1 {tuple(out1.shape)})").detach()
    return out, expect_shape(got[1], tuple(lse1.shape), f"lse (inputs lse1 {tuple(lse1.shape)})").detach()


def _check_nan_rows(combine, poisoned: tuple[Tensor, ...], nan_rows: Tensor) -> None:
    """The answer of 07.3 on inputs where the rows `nan_rows` (bool (rows,)) saw a NaN score in one range: tiled_forward
    gives such a range NaN for out and lse, and the row over all the keys NaN too, which the combination must keep."""
    expected_out, expected_lse, _, _ = _combined(*poisoned)
    # `call` would take the NaN of these inputs for a change in place: the same inputs without the NaN were checked
    out, lse = _out_lse(call(functools.partial(combine, *poisoned)), *poisoned[:2])
    o, s = out.reshape(-1, out.shape[-1]), lse.reshape(-1)  # (rows, HS), (rows,)
    lse1, lse2 = (t.reshape(-1) for t in poisoned[1::2])  # (rows,) each
    wrong = nan_rows & ~(o.isnan().all(dim=-1) & s.isnan())  # (rows,): such rows that are not all NaN
    if bool(wrong.any()):
        r = int(wrong.nonzero()[0])
        raise Hint(f"in row {r} (lse1 = {fmt(lse1[r])}, lse2 = {fmt(lse2[r])}) a range saw a NaN score: tiled_forward "
                   f"gave it NaN for out and lse, as it gives the row over all the keys, but you returned out = "
                   f"{fmt(o[r])}, lse = {fmt(s[r])}. A range that saw a NaN must make the row NaN, not look empty: "
                   "an empty range is lse == +inf exactly (torch.isfinite is False for NaN too), and no NaN may be "
                   "cleaned away (nan_to_num).")
    expect_close(out, expected_out, "out (with a NaN score in some rows)", why="A NaN stays in its own row only.")
    expect_close(lse, expected_lse, "lse (with a NaN score in some rows)", why="A NaN stays in its own row only.")


@grader("07.3")
def check_07_3(combine) -> str:
    """`combine(out1, lse1, out2, lse2) -> (out, lse)`: the results of `tiled_forward` on two ranges of keys, merged."""
    g = torch.Generator().manual_seed(7)
    cases = [  # leading sizes, S, S_kv, HS, split: no two sizes alike in a case
        ((3, 2), 5, 13, 4, 6),  # B = 3, NH = 2; ranges of 6 and 7 keys
        ((2, 3), 1, 17, 5, 9),  # one query, as in decoding; ranges of 9 and 8 keys
        ((4,), 3, 11, 6, 2),  # no head axis; ranges of 2 and 9 keys
    ]
    for lead, S, S_kv, HS, split in cases:
        (out1, lse1, out2, lse2), poisoned, kinds = _combine_case(lead, S, S_kv, HS, split, g)
        exp_out, exp_lse, w1, w2 = _combined(out1, lse1, out2, lse2)  # before the answer runs
        out, lse = _out_lse(call(combine, out1, lse1, out2, lse2), out1, lse1)
        # everything by row: (rows, HS) and (rows,)
        o, o1, o2, eo = (t.reshape(-1, HS) for t in (out, out1, out2, exp_out))
        s, s1, s2, es, v1, v2 = (t.reshape(-1) for t in (lse, lse1, lse2, exp_lse, w1, w2))
        kind = {k: torch.tensor([x == k for x in kinds]) for k in _COMBINE_KINDS}  # each (rows,) bool
        row = [f"row {r} (lse1 = {fmt(s1[r])}, lse2 = {fmt(s2[r])})" for r in range(len(kinds))]  # for messages
        _precise(es.isfinite(), out=(o, eo), lse=(s, es))  # before the diagnoses: their numbers would look equal

        # rows that see keys in both ranges, scores of ordinary size
        both = kind["both"]  # (rows,)
        if not close(o[both], eo[both]):
            r = _worst_row(o, eo, both)
            shown = (f"in {row[r]} out should be {fmt(eo[r])}: range 1 weighs {fmt(v1[r])} and range 2 "
                     f"{fmt(v2[r])}; got {fmt(o[r])}")
            O1, O2, L1, L2 = o1.double(), o2.double(), s1.double()[:, None], s2.double()[:, None]
            top = torch.maximum(L1, L2)  # (rows, 1)
            if close(o[both], ((O1 + O2) / 2)[both]):
                raise Hint(f"{shown}: you averaged the outputs. Each range's output is normalised by its own sum; "
                           "in the whole row each range weighs its share of the total sum of exponentials, which "
                           "the lse of the range and of the whole tell.")
            if close(o[both], ((L1 * O1 + L2 * O2) / (L1 + L2))[both]):
                raise Hint(f"{shown}: you weighted the outputs by lse1 and lse2. lse is a logarithm: e^lse is the "
                           "sum of a range's exponentials, and the share of range 1 is e^lse1 / (e^lse1 + e^lse2).")
            e1, e2 = (L1 - top).exp(), (L2 - top).exp()  # (rows, 1) each: e^lse of each range, over e^top
            if close(o[both], ((e2 * O1 + e1 * O2) / (e1 + e2))[both]):
                raise Hint(f"{shown}: the weights are swapped: out1 must be weighted by the share of range 1, the "
                           "range its lse1 describes.")
            for norm in [top, torch.zeros_like(top)]:  # measured against the larger lse, or not at all
                if close(o[both], ((L1 - norm).exp() * O1 + (L2 - norm).exp() * O2)[both]):
                    raise Hint(f"{shown}: your weights do not sum to 1. Divide by the total sum of exponentials: "
                               "subtract the lse of the whole row (the log of that total), not the larger lse.")
            raise Hint(f"{shown}. Each range weighs its share of the row's total sum of exponentials (e^lse of a "
                       "range is the sum of its own), and the two shares add up to 1.")
        if not close(s[both], es[both]):
            r = _worst_row(s, es, both)
            shown = f"in {row[r]} lse should be {fmt(es[r])}, got {fmt(s[r])}"
            if close(s[both], torch.maximum(s1, s2)[both]):
                raise Hint(f"{shown}: you kept the larger lse. e^lse of a range is the sum of the exponentials of "
                           "its scores: what is the sum over both ranges, and its log? (Stay in log space: e^lse may "
                           "overflow.)")
            if close(s[both], (s1 + s2)[both]):
                raise Hint(f"{shown}: adding two logarithms multiplies the sums, e^(lse1 + lse2) = e^lse1 · e^lse2. "
                           "The sums of exponentials of the two ranges add up: lse = log(e^lse1 + e^lse2).")
            raise Hint(f"{shown}: e^lse of a range is the sum of the exponentials of its scores, so the lse of both "
                       "is the log of e^lse1 + e^lse2 (torch.logaddexp).")

        # scores near ±huge: e^lse overflows to inf or underflows to 0
        _expect_rows(kind["huge"] | kind["tiny"] | kind["apart"], row, f": {_exp_range()}, so e^lse1 and e^lse2 "
                     "cannot be computed here. Stay in log space: lse = torch.logaddexp(lse1, lse2), and weigh each "
                     "range by e^(its lse - lse), which never exceeds 1.", out=(o, eo), lse=(s, es))

        # rows that see keys in one range only: the other range has out = 0, lse = +inf
        single = kind["only range 1"] | kind["only range 2"]  # (rows,)
        if bool(o[single].isnan().any()) or bool(s[single].isnan().any()):
            raise Hint("NaN appears where a range holds no visible key: there tiled_forward returns out = 0 and "
                       "lse = +inf, and +inf - (+inf) is NaN. How much should such a range weigh in the result?")
        _expect_rows(single, [f"{x}, a row that sees no key in one range," for x in row], ". The lse = +inf of an "
                     "empty range is tiled_forward's mark for 'no key', not a sum: such a range weighs nothing (treat "
                     "its lse as -inf, e^-inf = 0), and the row is the other range's (out, lse).", out=(o, eo),
                     lse=(s, es))

        # rows that see no key at all
        blind = kind["neither"]  # (rows,)
        if not bool((s[blind] == math.inf).all()) or not bool((o[blind] == 0).all()):
            r = int(blind.nonzero()[0])
            raise Hint("a row that sees no key in either range must come out as tiled_forward gives it: out = 0 and "
                       f"lse = +inf (the backward relies on +inf), got out = {fmt(o[r])}, lse = {fmt(s[r])}.")

        expect_close(out, exp_out, "out", why="Each range weighs its share of the total sum of exponentials.")
        expect_close(lse, exp_lse, "lse", why="The lse of both ranges is log(e^lse1 + e^lse2).")
        if poisoned is not None:
            _check_nan_rows(combine, poisoned, kind["NaN"])
    return ("the ranges merge exactly, with empty ranges, NaN rows and scores whose e^lse overflows: n cores can share "
            "the walk through a long cache, for the price of this small combination.")
