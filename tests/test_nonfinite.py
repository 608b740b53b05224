"""NaN and inf through every attention path: what a query sees decides its row, and no path turns a NaN into a
number. The rule, for "sdpa", "explicit" and "tiled" alike (see `AttentionImpl`):

- a query that sees no key gets exactly 0, whatever the inputs hold;
- a query that sees a non-finite input (a visible value, or a visible score of NaN or +inf, from its own q, a key or
  an overflow) gets a non-finite row; a visible score of -inf gives its key weight 0 (when all its visible scores
  are -inf, the paths differ: left out);
- a query that sees only finite inputs gets the float64 reference's row where nothing non-finite hides among its
  keys. A hidden non-finite value may still reach it: on the explicit and tiled paths a hidden NaN or inf value
  (0 · NaN is NaN) in a tile they compute, on SDPA also a hidden non-finite key (it adds the mask to the scores).
  Such rows are checked only to be finite-or-NaN alike where the rule leaves no choice."""

from __future__ import annotations

import math

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attention_lib import attend, tiled_attention

PATHS = ("sdpa", "explicit", "tiled")
SPECIALS = (math.nan, math.inf, -math.inf)


def visibility(S: int, S_kv: int, mask: torch.Tensor, is_causal: bool, window: int | None) -> torch.Tensor:
    """(B, 1, S, S_kv) bool from the definitions: the padding, the causal rule at the end of the keys, the window."""
    i = torch.arange(S)[:, None] + S_kv - S  # (S, 1): each query's position
    j = torch.arange(S_kv)[None, :]  # (1, S_kv)
    rule = (j <= i) & (j > i - (window or S_kv + 1)) if is_causal else torch.ones(S, S_kv, dtype=torch.bool)
    return mask[:, None, None, :] & rule  # (B, 1, S, S_kv)


@st.composite
def cases(draw):
    B, NH, HS = draw(st.integers(1, 2)), draw(st.integers(1, 2)), 4
    S = draw(st.integers(1, 7))
    S_kv = draw(st.integers(S, 9))
    is_causal = draw(st.booleans())
    window = draw(st.sampled_from([None, 1, 2, 4])) if is_causal else None
    lengths = [draw(st.integers(0, S_kv)) for _ in range(B)]  # 0: a sequence whose queries see nothing
    mask = torch.tensor([[j < n for j in range(S_kv)] for n in lengths])  # (B, S_kv)
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    big = draw(st.sampled_from([1.0, 1.0, 1e25]))  # 1e25: q·k overflows float32, far beyond its largest
    q, k, v = (torch.randn(B, NH, n, HS, generator=g) for n in (S, S_kv, S_kv))
    q, k = q * big, k * big
    for t in (q, k, v):  # a few specials anywhere, hidden or not
        for _ in range(draw(st.integers(0, 2))):
            index = tuple(draw(st.integers(0, n - 1)) for n in t.shape)
            t[index] = draw(st.sampled_from(SPECIALS))
    return q, k, v, mask, is_causal, window, draw(st.sampled_from([1, 2, 3]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_every_path_propagates_what_a_query_sees_and_zeroes_only_the_blind(case):
    q, k, v, mask, is_causal, window, block_size = case
    B, NH, S, _ = q.shape
    S_kv = k.shape[2]
    visible = visibility(S, S_kv, mask, is_causal, window).expand(B, NH, S, S_kv)  # (B, NH, S, S_kv)
    blind = ~visible.any(dim=-1)  # (B, NH, S)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))  # (B, NH, S, S_kv) in float32, as the paths compute
    shown = scores.masked_fill(~visible, -math.inf)  # a visible score of -inf is a key given weight 0
    bad_v = ~torch.isfinite(v).all(-1)[:, :, None, :]  # (B, NH, 1, S_kv)
    sees_bad = ~blind & (visible & (scores.isnan() | (scores == math.inf) | bad_v)).any(-1)  # (B, NH, S)
    # every visible score -inf (an overflow, or a key of -inf): 0 / 0 on the explicit and tiled paths, zeros from
    # SDPA's safe softmax; no path can know the scores it never had, so such rows are left out
    undecided = ~blind & ~sees_bad & (shown == -math.inf).all(-1)
    hidden_bad_v = (~visible & bad_v).any(-1)  # (B, NH, S): a non-finite value among its hidden keys
    hidden_bad_k = (~visible & ~torch.isfinite(k).all(-1)[:, :, None, :]).any(-1)
    clean = ~blind & ~sees_bad & ~undecided
    weights = shown.double().softmax(dim=-1).nan_to_num(0.0)  # (B, NH, S, S_kv): the clean rows' weights
    expected = (weights @ v.double().nan_to_num(0.0, 0.0, 0.0)).float()  # hidden values weigh 0 in the clean rows

    outs = {path: attend(q, k, v, mask=mask, is_causal=is_causal, window=window, impl=path)[0]
            for path in ("sdpa", "explicit")}
    outs["tiled"] = tiled_attention(q, k, v, mask, is_causal, block_size, window=window)
    for path, out in outs.items():
        finite = torch.isfinite(out).all(-1)  # (B, NH, S)
        assert (out[blind] == 0).all(), f"{path}: a query that sees no key must get exactly 0"
        assert not finite[sees_bad].any(), f"{path}: a query that sees a NaN or inf must not get a number"
        spared = clean & ~hidden_bad_v  # nothing non-finite hides among its keys
        spared = spared & ~hidden_bad_k if path == "sdpa" else spared
        rows = (spared & ~finite).nonzero().tolist()
        assert not rows, f"{path}: queries {rows} see only finite inputs and got a NaN"
        torch.testing.assert_close(out[spared], expected[spared], atol=2e-4, rtol=2e-4, msg=path)
    same_pattern = ~hidden_bad_v & ~undecided  # where no hidden value is non-finite, explicit and tiled agree
    explicit_finite, tiled_finite = (torch.isfinite(outs[p]).all(-1) for p in ("explicit", "tiled"))
    assert torch.equal(explicit_finite[same_pattern], tiled_finite[same_pattern])


def test_one_nan_key_makes_every_row_that_sees_it_nan_on_every_path():
    """The defect this file guards against: the tiled path read a NaN running sum as "saw no key" and gave zeros."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 6, 4, generator=g) for _ in range(3))
    k[0, 0, 2, 1] = math.nan  # key 2: seen by queries 2..5 under the causal rule
    for path in PATHS:
        out = attend(q, k, v, is_causal=True, impl=path)[0][0, 0]  # (S, HS)
        assert torch.isfinite(out[:2]).all() and out[2:].isnan().all(), path


def test_scores_that_overflow_give_nan_not_zeros_on_every_path():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 4, 4, generator=g) for _ in range(3))
    q, k = torch.full_like(q, 1e20), torch.full_like(k, 1e20)  # every score 4e40 / 2: +inf in float32
    for path in PATHS:
        out = attend(q, k, v, impl=path)[0]
        assert not torch.isfinite(out).any(), path
