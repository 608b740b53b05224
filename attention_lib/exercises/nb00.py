"""Graders for the exercises of notebook 00 (attention, a recap)."""

from __future__ import annotations

import math
import warnings

import torch
from torch import Tensor

from ..functional import masked_softmax
from ..masks import causal_mask, padding_mask
from ._grading import (Hint, call, close, dtype, expect_close, expect_gradients, expect_precision, expect_shape,
                       expect_tensor, fmt, grader, requiring_grad)

__all__ = ["check_00_1", "check_00_2", "check_00_3", "check_00_4", "LOAN_TOKENS", "LOAN_KEYS"]

LOAN_TOKENS = ["the", "bank", "gave", "a", "loan"]
# features: water, money, place, function word (the keys printed in the notebook)
LOAN_KEYS = torch.tensor([[0, 0, 0, 1], [0, 0, 2, 0], [0, 0, 0, 0], [0, 0, 0, 1], [0, 3, 0, 0]]).float()  # (S_kv, d)
# the grader's own copies: the notebook imports the two above, and a reader's cell may change them in place
_LOAN_TOKENS = tuple(LOAN_TOKENS)
_LOAN_KEYS = LOAN_KEYS.clone()  # (S_kv, d)


def _probed_gradients(out: Tensor, leaves: list[Tensor], generator: torch.Generator) -> tuple[Tensor, list[Tensor]]:
    """(probe, gradients): a random probe of `out`'s shape and the gradients of sum(out · probe) with respect to
    `leaves`, `out` being a float64 reference computed from them (the reference of `expect_gradients`, taken before
    the answer runs). The probe is scaled so that the largest gradient is 1: float32's tolerance has an absolute part
    meant for numbers about 1, while an answer in float32 gets gradients of size 100 right to about 1e-4 only."""
    probe = torch.randn(out.shape, generator=generator, dtype=torch.float64)  # the shape of out
    grads = torch.autograd.grad((out * probe).sum(), leaves, allow_unused=True)
    grads = [torch.zeros_like(leaf) if grad is None else grad for leaf, grad in zip(leaves, grads, strict=True)]
    top = max((grad.abs().max().item() for grad in grads if grad.numel()), default=0.0)
    scale = 1 / top if top > 0 else 1.0
    return probe * scale, [grad * scale for grad in grads]


def _expect_gradients(got: Tensor, leaves: list[Tensor], expected: list[Tensor], probe: Tensor, what: str) -> None:
    """`expect_gradients`, holding the gradients to the precision of `got`: an output in float32 is right to float32's
    tolerance in a float64 grading (`close` takes the less precise of the two), and so is the gradient it sends back
    to float64 leaves."""
    expect_gradients(got, leaves, [want.to(got.dtype) if got.is_floating_point() else want for want in expected],
                     probe, what)


def _listed(names: list[str]) -> str:
    """'a', 'a' and 'b', 'a', 'b' and 'c': token names for a sentence."""
    quoted = [f"'{n}'" for n in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


@grader("00.1")
def check_00_1(bank_query) -> str:
    """`bank_query()` returns the query of "bank" (4 numbers); "bank" must give "loan" a weight of at least 0.9."""
    # the grader scores with its own copy of the keys; the notebook's, as they are now, must come back unchanged
    before = LOAN_KEYS
    kept = before.detach().clone() if isinstance(before, torch.Tensor) else None  # (S_kv, d)
    answer = call(bank_query)
    if LOAN_KEYS is not before or (kept is not None and not torch.equal(before, kept)):
        globals()["LOAN_KEYS"] = before  # put the notebook's keys back as they were
        if kept is not None:
            before.data = kept
        raise Hint("your code changed LOAN_KEYS, the keys of the sentence (the grader has put them back): the keys "
                   "are fixed, and the exercise asks for a query that finds 'loan' among them as they are.")
    q = expect_tensor(answer, "bank_query()")
    if tuple(q.shape) != (4,):
        raise Hint(f"the query of one token is 4 numbers (water, money, place, function word), shape (4,); "
                   f"got shape {tuple(q.shape)}.")
    scores = _LOAN_KEYS.double() @ q.detach().double() / math.sqrt(4)  # (S_kv,)
    weights = scores.softmax(dim=-1)  # (S_kv,)
    loan = weights[4].item()
    if math.isnan(loan):
        raise Hint("your query gives NaN weights: use finite numbers.")
    if loan < 0.9:
        shown = ", ".join(f"{t} {w:.2f}" for t, w in zip(_LOAN_TOKENS, weights.tolist(), strict=True))
        # the tokens that share the largest weight: several when their scores tie
        top = [t for t, tied in zip(_LOAN_TOKENS, torch.isclose(weights, weights.max(), rtol=1e-9, atol=0).tolist(),
                                    strict=True) if tied]
        if len(top) == len(_LOAN_TOKENS):
            raise Hint(f"every key gets the same weight, {loan:.2f}: your query has the same dot product with every "
                       "key. The score with 'loan' is the dot product with loan's key [0, 3, 0, 0]: only the money "
                       "position counts.")
        if "loan" in top:
            others = [t for t in top if t != "loan"]
            tie = f" (tied with {_listed(others)})" if others else ""
            raise Hint(f"'loan' gets the largest weight{tie} but only {loan:.2f} (weights: {shown}). Each other key "
                       "still gets e^(its score); make the score of 'loan' larger by putting a bigger number where "
                       "loan's key [0, 3, 0, 0] is non-zero.")
        looks = f"mostly at {_listed(top)}" if len(top) == 1 else f"equally at {_listed(top)}, more than at 'loan'"
        raise Hint(f"'bank' looks {looks} (weights: {shown}). The score with 'loan' is the dot product of your query "
                   "with loan's key [0, 3, 0, 0]: only the money position counts.")
    return f"'bank' gives 'loan' a weight of {loan:.3f} (scaled scores {fmt(scores)})."


def _attention(q, k, v, scale: float, dim: int = -1):
    return (q @ k.transpose(-2, -1) * scale).softmax(dim=dim) @ v


@grader("00.2")
def check_00_2(my_attention) -> str:
    """`my_attention(q, k, v)` returns softmax(q kᵀ / √d) v for q (..., S, d) and k, v (..., S_kv, d), with its
    gradient."""
    g = torch.Generator().manual_seed(0)
    probes = torch.Generator().manual_seed(1)  # apart from g, so that the inputs do not depend on the probes
    gradients = []  # checked once every case's output is right: a wrong output has the more telling hint
    # no two sizes alike, so that an axis taken for another shows: (B, NH, S, d) with S_kv, both S < S_kv and S > S_kv
    for shape_q, S_kv in [((3, 5, 8), 7), ((2, 3, 6, 4), 5), ((9, 16), 2)]:
        *lead, S, d = shape_q
        q = torch.randn(*shape_q, generator=g, dtype=dtype())  # (..., S, d)
        k, v = torch.randn(2, *lead, S_kv, d, generator=g, dtype=dtype()).unbind(0)  # each (..., S_kv, d)
        # the reference in float64, and its gradients for a random probe, before the answer runs
        ref = [t.detach().double().requires_grad_() for t in (q, k, v)]
        expected = _attention(*ref, 1 / math.sqrt(d))  # (..., S, d)
        probe, expected_grads = _probed_gradients(expected, ref, probes)
        expected = expected.detach()
        leaves, given = zip(*(requiring_grad(t) for t in (q, k, v)), strict=True)  # inputs in a graph, as in a model
        try:
            with warnings.catch_warnings():  # k.T on a batch warns that it is deprecated: the hint says why
                warnings.simplefilter("ignore", UserWarning)
                got = call(my_attention, *given)
        except Exception as raised:  # only the learner's own RuntimeError gets this hint
            error = getattr(raised, "error", None)
            if not isinstance(error, RuntimeError):
                raise
            raise Hint(f"for q {tuple(q.shape)} and k {tuple(k.shape)} your code raised RuntimeError: {error}. On "
                       "batched input k.T reverses all the axes of k, and a transpose of fixed axes such as "
                       "k.transpose(1, 2) fits one number of axes only: use k.transpose(-2, -1), which swaps the last "
                       "two axes whatever comes before them.") from None
        if isinstance(got, tuple):
            raise Hint("return only the context tensor (..., S, d), not a tuple.")
        got = expect_tensor(got, "my_attention(q, k, v)")
        if tuple(got.shape) != tuple(shape_q):
            raise Hint(f"for q {tuple(q.shape)} and k, v {tuple(k.shape)} the context has one row per query, "
                       f"(..., S, d) = {tuple(shape_q)}; got {tuple(got.shape)}. The scores are q @ kᵀ "
                       "(..., S, S_kv); the context is the weights @ v.")
        what = f"for q of shape {tuple(q.shape)} the context"
        if close(got, expected):
            gradients.append((got, list(leaves), expected_grads, probe, what))
            continue
        expect_precision(got, expected, what)  # before the mistakes below, which a float32 answer matches none of
        if close(got, _attention(q, k, v, 1.0)):
            raise Hint(f"you forgot to scale the scores: divide q @ kᵀ by √d (here √{d} = {math.sqrt(d):.3g}) "
                       "before the softmax.")
        if close(got, _attention(q, k, v, 1 / d)):
            raise Hint(f"you divided the scores by d = {d}; the scale is 1/√d = 1/{math.sqrt(d):.3g}.")
        for axis, n in enumerate(shape_q[:-1]):
            if close(got, _attention(q, k, v, 1 / math.sqrt(n))):
                raise Hint(f"you scaled by 1/√{n}, the size of axis {axis - len(shape_q)} of q; d is the size of the "
                           f"last axis, q.size(-1) = {d}.")
        if close(got, _attention(q, k, v, 1 / math.sqrt(d), dim=-2)):
            raise Hint("the softmax runs over the wrong axis: it must run over the keys, the last axis (dim=-1), "
                       "so that each query's weights sum to 1.")
        expect_close(got, expected, what, why="Compare with F.scaled_dot_product_attention(q, k, v) step by step.")
    for checked in gradients:
        _expect_gradients(*checked)
    return ("your attention equals softmax(q kᵀ/√d) v, with any leading axes, S < S_kv and S > S_kv, and a model can "
            "learn through it (its gradient is right).")


@grader("00.3")
def check_00_3(decoder_mask) -> str:
    """`decoder_mask(lengths, S)` returns the (B, S, S) bool mask of causal attention with right padding."""
    for lengths, S in [([4, 2, 1], 5), ([1, 2, 3], 3), ([6, 6], 6), ([2, 5, 3, 1], 7)]:
        B = len(lengths)
        got = expect_tensor(call(decoder_mask, list(lengths), S), f"decoder_mask({lengths}, {S})")
        if got.dtype != torch.bool:
            raise Hint(f"a mask is a torch.bool tensor (True = may attend); got dtype {got.dtype}. Build it from "
                       "comparisons or bool masks (padding_mask and causal_mask are bool), or convert with .bool().")
        if tuple(got.shape) != (B, S, S):
            raise Hint(f"decoder_mask({lengths}, {S}) should have shape (B, S, S) = {(B, S, S)}: one S x S table "
                       f"per sentence; got {tuple(got.shape)}.")
        pad = padding_mask(lengths, seq_len=S)  # (B, S)
        expected = pad[:, None, :] & causal_mask(S)  # (B, S, S)
        real_rows = pad[:, :, None].expand(B, S, S)  # (B, S, S): rows of real queries
        # a padded query's row is never used: it may follow the rule of a real row or see nothing at all
        row_is_rule = (got == expected).all(dim=-1)  # (B, S)
        row_is_empty = ~got.any(dim=-1)  # (B, S)
        if bool((row_is_rule | (~pad & row_is_empty)).all()):
            continue
        if torch.equal(got, ~expected):
            raise Hint("your mask is the opposite of the convention: True must mean 'may attend' (a visible key), "
                       "not 'hidden'.")
        if bool((got & ~pad[:, None, :]).any()):
            raise Hint("a padded key is visible: padding hides the key columns of its sentence in every row "
                       "(mask[b, :, j] is False for a padded j). Combine padding and causality with & (AND), and "
                       "spread the padding over the rows with pad[:, None, :].")
        future = torch.ones(S, S, dtype=torch.bool).triu(diagonal=1)  # (S, S): j > i
        if bool((got & future).any()):
            raise Hint("a query sees a key in its future (j > i): query i may see keys 0..i only, the lower "
                       "triangle (torch.tril or causal_mask).")
        if not bool(got[real_rows & torch.eye(S, dtype=torch.bool)].any()):
            raise Hint("no real token sees itself: the diagonal (j == i) of the triangle is True (tril with "
                       "diagonal=0, the default).")
        if bool((got == expected)[real_rows].all()):
            raise Hint(f"for lengths {lengths} and S = {S} the rows of the real queries are right, but a padded "
                       "query's row is neither the rule of a real row (the past, real keys only) nor empty: pick one "
                       "of the two for every padded query.")
        raise Hint(f"for lengths {lengths} and S = {S} some real query misses a real key of its past (a sentence "
                   "of length n has the real tokens 0..n-1). Print your mask next to "
                   "padding_mask(lengths, S)[:, None, :] & causal_mask(S).")
    return ("causal AND padding, True = may attend, one (S, S) table per sentence, also when B == S (the rows of "
            "padded queries are never used).")


def _reference_softmax(scores, mask):
    """masked_softmax in float64, and the gradient of sum(weights · probe) with respect to the scores."""
    s = scores.detach().double().requires_grad_()
    weights = masked_softmax(s, mask)  # (B, S, S_kv)
    probe = torch.linspace(-1, 1, weights.numel(), dtype=torch.float64).reshape(weights.shape)
    (grad,) = torch.autograd.grad((weights * probe).sum(), s)
    return weights.detach(), grad, probe


@grader("00.4")
def check_00_4(my_masked_softmax) -> str:
    """`my_masked_softmax(scores, mask)`: hidden keys get 0, visible weights sum to 1, a blind row gets zeros; the
    gradient with respect to the scores is right and finite too."""
    g = torch.Generator().manual_seed(4)
    B, S, S_kv = 2, 3, 5
    base = 2 * torch.randn(B, S, S_kv, generator=g, dtype=dtype())  # (B, S, S_kv)
    full = torch.rand(B, S, S_kv, generator=g) > 0.4  # (B, S, S_kv)
    full[0, 1] = False  # a query that sees nothing
    full[1, 2] = True  # a query that sees everything
    full[1, 0] = torch.tensor([True, False, False, False, False])  # a query that sees one key
    padding = torch.tensor([[True, True, False, False, False], [True, True, True, True, False]])[:, None, :]
    loud = base.clone()
    loud[..., 2:] += 1000.0  # the hidden keys of the padding mask score far above the visible ones
    overflow = torch.full_like(base, torch.finfo(dtype()).max / 4)  # e^score overflows: equal scores, near the top
    overflow[..., 0] = -1e3  # and one far below
    # every score far below 0, below the finite fills a reader might pick (-100, -1e4; in float64 -1e6 too): only
    # -inf hides a key whatever the scores. Deeper in float64, whose spacing still resolves the scores' differences.
    depth = 5e4 if dtype() == torch.float32 else 5e8
    low = base - depth  # (B, S, S_kv)
    cases = [
        (base, full, "a (B, S, S_kv) mask with a row that sees nothing"),
        (base, padding, "a (B, 1, S_kv) padding mask"),
        (loud, padding, "scores of the hidden keys 1000 above the visible ones"),
        (100 * base, full, "scores around ±100"),
        (overflow, padding, f"scores near the largest {dtype()}"),
        (low, padding, f"every score around {-depth:g}"),
    ]
    answered = []  # (weights, leaf, probe, expected gradient, case) of every case whose weights are right
    for scores, mask, what in cases:
        expected, expected_grad, probe = _reference_softmax(scores, mask)  # before the answer runs
        s, given = requiring_grad(scores)  # the leaf the gradient is taken for, and a tensor in a graph for the answer
        got = call(my_masked_softmax, given, mask.clone())
        got = expect_shape(got, tuple(scores.shape), f"my_masked_softmax(scores, mask) with {what}")
        blind = ~mask.expand_as(scores).any(dim=-1)  # (B, S): rows with no visible key
        if not close(got, expected):
            if bool(got.isnan().any()):
                if bool(got[~blind].isnan().any()):
                    raise Hint(f"NaN in a row that sees some key, with {what}: an exponential overflowed (e^89 is "
                               "inf in float32, e^710 in float64) or a row's weights all underflowed to 0 before a "
                               "division (0 / 0). Hide the keys with -inf and let softmax take the exponentials: it "
                               "subtracts each row's largest score first.")
                raise Hint("a row with no visible key gives NaN: the softmax of a row of -inf is 0/0. Give such rows "
                           "finite scores before the softmax and set their weights to 0 after it.")
            expect_precision(got, expected, f"my_masked_softmax(scores, mask) with {what}")
            if close(got, masked_softmax(scores, ~mask)):
                raise Hint("True must mean 'may attend': you hid the visible keys and kept the hidden ones.")
            hidden = ~mask.expand_as(scores)  # (B, S, S_kv)
            leak = (got != 0) & hidden & ~blind[..., None]  # (B, S, S_kv): weight on a hidden key of a row that sees
            if bool(leak.any()):
                w = got.detach().double()  # (B, S, S_kv)
                heaviest = w.masked_fill(~hidden, float("-inf")).amax(dim=-1)  # (B, S): of the hidden keys
                lightest = w.masked_fill(~hidden, float("inf")).amin(dim=-1)  # (B, S)
                rows = leak.any(dim=-1)  # (B, S)
                # one score for every hidden key of a row (a fill) gives them one weight; their own scores do not
                filled = bool((heaviest - lightest <= 1e-6 * heaviest)[rows].all())
                # far below 0 a fill of 0 and one of -1e4 weigh alike: there the fill's hint is the one that fits
                zero = scores.masked_fill(hidden, 0.0).softmax(dim=-1)  # (B, S, S_kv): hidden keys scored 0
                if filled and scores is not low and close(got[~blind], zero[~blind]):
                    raise Hint(f"a hidden key (mask False) got a non-zero weight, with {what}: your hidden keys score "
                               "0, and e^0 is not 0; a score of 0 is not hidden. Set their scores to -inf before the "
                               "softmax (scores.masked_fill(~mask, float('-inf'))).")
                if filled:
                    raise Hint(f"a hidden key (mask False) got a non-zero weight, with {what}: all the hidden keys of "
                               "a row weigh the same, as a finite fill gives them, and a finite fill such as -1e4 or "
                               "-100 hides a key only while the visible scores stay far above it. Fill with "
                               "float('-inf'), which is below every score.")
                raise Hint(f"a hidden key (mask False) got a non-zero weight, with {what}: set its score to -inf "
                           "before the softmax (scores.masked_fill(~mask, float('-inf'))).")
            if bool(blind.any()) and not bool((got[blind] == 0).all()):
                row = got[blind][0].detach().double()  # (S_kv,): the weights of the first row that sees nothing
                fill = (" A large negative fill instead of -inf gives such a row weights that sum to 1 "
                        f"(yours: {fmt(row)}):" if abs(row.sum().item() - 1) < 1e-3 else f" Yours: {fmt(row)};")
                raise Hint(f"a row whose keys are all hidden must get zero weights: it sees nothing.{fill} zero its "
                           "weights after the softmax.")
            sums = got.detach().double().sum(dim=-1)  # (B, S)
            if not torch.allclose(sums[~blind], torch.ones_like(sums[~blind]), atol=1e-5):
                if bool((sums[~blind] == 0).any()):
                    raise Hint(f"with {what} a row that sees some key got all-zero weights: the softmax over every "
                               "key gave its visible keys e^(-1000) = 0 beside the hidden ones, and zeroing the hidden "
                               "weights then leaves nothing to renormalise. Hide the keys (-inf) before the softmax.")
                raise Hint("the visible weights of a row must sum to 1: hide keys with -inf before the softmax rather "
                           "than zeroing weights after it.")
            raise Hint(f"with {what} the weights are off by up to "
                       f"{(got.detach().double() - expected).abs().max().item():.3g}: the softmax runs over the keys, "
                       "the last axis.")
        answered.append((got, s, probe, expected_grad, what))
    # the gradients once every case's weights are right: a mistake in the weights has the more telling hint
    for got, s, probe, expected_grad, what in answered:
        if not got.requires_grad:
            raise Hint("the weights carry no gradient: compute them from the scores with torch operations (no "
                       ".detach(), .numpy() or torch.no_grad()), so that a model can learn through them.")
        try:  # anomaly mode: the backward pass stops on a NaN in any step, not only in the scores' gradient
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # "Anomaly Detection has been enabled"
                with torch.autograd.detect_anomaly(check_nan=True):
                    (grad,) = torch.autograd.grad((got * probe.to(got.dtype)).sum(), s, allow_unused=True)
        except RuntimeError as error:
            if "nan" not in str(error).lower():
                raise
            raise Hint(f"the weights are right, but the backward pass goes through NaN with {what}: the softmax of a "
                       "row of -inf is NaN, and replacing the NaN afterwards (nan_to_num, torch.where) fixes the "
                       "forward pass only. On the way back the softmax's own step still computes NaN for that row: "
                       "masked_fill happens to drop it before it reaches the scores, but "
                       "torch.autograd.detect_anomaly stops on it, and with an additive mask (scores + mask) it would "
                       "reach the scores. Give a row that sees nothing finite scores before the softmax, then zero "
                       "its weights.") from None
        grad = torch.zeros_like(s) if grad is None else grad
        # held to the precision of the weights, as they were: float32 weights pass a float64 grading at float32's
        expect_close(grad, expected_grad.to(got.dtype) if got.is_floating_point() else expected_grad,
                     f"the gradient of the weights with {what}",
                     why="Compute the weights with differentiable operations all the way (masked_fill, softmax).")
    return ("hidden keys get 0, each row sums to 1 over its visible keys, a row that sees nothing gets zeros, and "
            "the gradient is finite, even when the scores overflow or lie far below 0.")
