"""Graders of notebook 09's exercises: sampling's distribution (temperature and top-k), a head's duplicate-token score,
and StreamingLLM's mask, a sliding window that keeps the attention sinks."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ._grading import (Hint, call, close, dtype, expect_bool_mask, expect_close, expect_equal, expect_precision,
                       expect_shape, expect_tensor, first_wrong_row, fmt, grader)

__all__ = ["check_09_1", "check_09_2", "check_09_3"]


def _expect_dtype(got: Tensor, want: torch.dtype, what: str) -> None:
    """A right answer must also come in the dtype of its inputs, `want`."""
    if got.dtype != want:
        raise Hint(f"{what} is right, but in {got.dtype} for inputs in {want}: return the dtype of the inputs. Compute "
                   "in it: do not call .float() or .double(), and make new tensors with dtype=x.dtype (or "
                   "torch.*_like).")


# --- 09.1: sampling's distribution ---------------------------------------------------------------------------------


def _kept(logits: Tensor, top_k: int | None, dim: int = -1) -> Tensor:
    """(B, V) bool: the tokens whose logit is among the top_k largest of their row (of their column for dim=0),
    a tie with the k-th largest kept; every token for top_k None or >= V."""
    z = logits.detach().double()  # (B, V)
    if top_k is None or top_k >= z.shape[dim]:
        return torch.ones_like(z, dtype=torch.bool)
    kth = z.topk(top_k, dim=dim).values.narrow(dim, top_k - 1, 1)  # (B, 1), or (1, V) for dim=0: the k-th largest
    return z >= kth  # (B, V)


def _top_k_probs(logits: Tensor, temperature: float, top_k: int | None, how: str = "right") -> Tensor:
    """(B, V) -> (B, V) in float64: softmax(logits / temperature) over each row's kept tokens, 0 elsewhere (`how` =
    "right"), or a usual mistake: the logits "times" the temperature, top-k over the "batch" axis, the tokens left out
    set to "zero" before the softmax, or zeroed "after" it, a softmax over "dim0", the masked "logits" or their
    "log"-softmax."""
    z = logits.detach().double()  # (B, V)
    z = z * temperature if how == "times" else z / temperature  # (B, V)
    keep = _kept(z, top_k, dim=0 if how == "batch" else -1)  # (B, V)
    if how == "zero":
        return z.masked_fill(~keep, 0.0).softmax(dim=-1)  # (B, V): e^0 = 1 for every token left out
    if how == "after":
        return z.softmax(dim=-1) * keep  # (B, V): rows that sum to less than 1
    masked = z.masked_fill(~keep, -math.inf)  # (B, V)
    if how == "logits":
        return masked
    if how == "log":
        return masked.log_softmax(dim=-1)
    return masked.softmax(dim=0 if how == "dim0" else -1)  # (B, V)


def _sharp_logits(g: torch.Generator) -> Tensor:
    """(7, 5) float64 logits around ±100, multiples of 1/4: at temperature 0.05 they become ±2000, whose exponential
    overflows in float32 and float64 alike. Row 0 has a runner-up 1/4 below its best, row 1 two equal best."""
    logits = (40 * torch.randn(7, 5, generator=g, dtype=torch.float64)).clamp(-100, 100).mul(4).round().div(4)
    logits[0] = torch.tensor([100.0, -100.0, 99.75, 37.0, -5.0])
    logits[1] = torch.tensor([80.0, 80.0, -60.0, 12.0, 79.0])
    return logits


@grader("09.1")
def check_09_1(top_k_probs) -> str:
    """top_k_probs(logits (B, V), temperature, top_k) -> (B, V): softmax(logits / T) over each row's top k, 0 else."""
    g = torch.Generator().manual_seed(91)
    ties = torch.randint(-3, 4, (6, 7), generator=g).double()  # (6, 7): small integers, many ties
    ties[0] = torch.tensor([2.0, 5.0, 5.0, 5.0, 1.0, 0.0, -1.0])  # three equal best for top_k = 2: all three kept
    ties[1] = torch.tensor([3.0, 1.0, 2.0, 2.0, 0.0, -2.0, 2.0])  # three tied with the 2nd largest: four kept
    cases = [  # logits (B, V), temperature, top_k: B, V and top_k unlike
        (2 * torch.randn(5, 11, generator=g, dtype=torch.float64), 0.7, 3),
        (2 * torch.randn(3, 8, generator=g, dtype=torch.float64), 1.6, None),  # every token kept
        (3 * torch.randn(4, 9, generator=g, dtype=torch.float64), 2.5, 1),  # greedy: one token per row
        (torch.randn(2, 6, generator=g, dtype=torch.float64), 1.3, 10),  # top_k beyond V: every token kept
        (ties, 0.9, 2),  # ties with the k-th largest
        (_sharp_logits(g), 0.05, 4),  # sharp: logits / T around ±2000
    ]
    for logits, temperature, top_k in cases:
        logits = logits.to(dtype())  # (B, V)
        B, V = logits.shape
        expected = _top_k_probs(logits, temperature, top_k)  # (B, V), before the answer runs
        where = f"for logits (B, V) = {(B, V)}, temperature = {temperature:g} and top_k = {top_k}"
        what = f"top_k_probs(logits, {temperature:g}, {top_k})"
        try:
            answer = call(top_k_probs, logits, temperature, top_k)
        except Exception as raised:  # two crashes get a hint of their own; the rest is "your code raised ..."
            error = getattr(raised, "error", None)
            if top_k is None and isinstance(error, TypeError):
                raise Hint(f"{where}, your code raised TypeError: {error}. top_k=None means no top-k filter: keep "
                           "every token, and skip the filter when top_k is None (`if top_k is not None: ...`).") from None
            if top_k is not None and top_k > V and isinstance(error, RuntimeError | IndexError):
                raise Hint(f"{where}, your code raised {type(error).__name__}: {error}. top_k = {top_k} is more than "
                           f"the V = {V} tokens of a row, which topk refuses: then every token is kept. Filter only "
                           "when top_k < V, as generate does.") from None
            raise
        got = expect_tensor(answer, what)
        if top_k is not None and top_k < V and tuple(got.shape) == (B, top_k):
            raise Hint(f"{where}, you returned shape {(B, top_k)}, the probabilities of the kept tokens only: return "
                       f"one probability for each of the V = {V} tokens, (B, V) = {(B, V)}, 0 for the tokens left "
                       "out, so that the index a sampler draws is the token's id.")
        got = expect_shape(got, (B, V), what)
        if close(got, expected):
            _expect_dtype(got, logits.dtype, what)
            continue
        expect_precision(got, expected, what)
        r = int((got.detach().double() - expected).abs().nan_to_num(math.inf).amax(dim=-1).argmax())  # worst row
        shown = f"{where}, row {r} should be {fmt(expected[r])}, got {fmt(got[r])}"
        _diagnose_09_1(got, logits, temperature, top_k, expected, shown)
        if top_k is not None and top_k < V:  # the tokens kept: exactly k of them, ties with the k-th largest dropped
            keep = _kept(logits, top_k)  # (B, V)
            support = got.detach() != 0  # (B, V)
            if bool((support <= keep).all()) and bool((support.sum(-1) == top_k).all()) and bool(
                    (keep.sum(-1) > top_k).any()):
                t = int((keep.sum(-1) > top_k).nonzero()[0])
                raise Hint(f"{where}, row {t} has {int(keep[t].sum())} tokens whose logit is at least the k-th largest "
                           f"(ties), yours keeps {top_k}. A token tied with the k-th largest is kept too: mask the "
                           "logits below the k-th largest, logits < logits.topk(top_k).values[:, -1:], as Hugging "
                           "Face's top-k and generate do, rather than keeping exactly the k indices topk returns.")
        if bool(got.isnan().any()):
            if top_k is None:
                raise Hint(f"{where}, you returned NaN: top_k=None means no top-k filter, every token kept; yours "
                           "keeps none (a softmax over -inf only is NaN). Skip the filter when top_k is None.")
            biggest = (logits.double() / temperature).abs().max().item()
            if biggest > math.log(torch.finfo(dtype()).max):
                raise Hint(f"{where}, you returned NaN: logits / temperature reach ±{biggest:.0f} here, and e^x "
                           f"overflows to inf above {math.log(torch.finfo(torch.float32).max):.0f} in float32 and "
                           f"{math.log(torch.finfo(torch.float64).max):.0f} in float64, so inf / inf = NaN. Subtract "
                           "each row's largest value before the exponential, or let torch.softmax do it.")
        if top_k is None and bool((got.detach() == 0).all()):
            raise Hint(f"{where}, you returned zeros: top_k=None means no top-k filter, every token kept; yours "
                       "keeps none. Skip the filter when top_k is None.")
        expect_close(got, expected, what, why=(
            f"Row {r} should be {fmt(expected[r])}, got {fmt(got[r])}: softmax(logits / temperature) over the tokens "
            "whose logit is at least the k-th largest of the row, 0 for the others."))
    return ("softmax(logits / T) over each row's top k, ties kept, for T < 1 and T > 1, greedy top_k = 1, top_k "
            "None or beyond V, and logits / T around ±2000.")


def _diagnose_09_1(got: Tensor, logits: Tensor, temperature: float, top_k: int | None, expected: Tensor,
                   shown: str) -> None:
    """Raise the hint for the usual mistake of top_k_probs that `got` makes, if it is one."""
    B, V = logits.shape
    T = temperature
    plain = _top_k_probs(logits, 1.0, top_k)  # (B, V): the right top-k at temperature 1
    z = logits.double() / T  # (B, V)
    sums = got.detach().double().sum(dim=-1)  # (B,)
    r = int((sums - 1).abs().nan_to_num(math.inf).argmax())  # the row whose sum is furthest from 1
    mistakes = [
        (_top_k_probs(logits, T, top_k, "times"), "you multiplied the logits by the temperature: divide them, "
         "softmax(logits / T), so that T < 1 sharpens the distribution and T > 1 flattens it."),
        (plain / T, f"row {r} sums to {sums[r].item():.3g}, 1 / T: you divided the probabilities by T after the "
         "softmax. The temperature divides the logits, before the softmax: softmax(logits / T)."),
        (plain ** (1 / T), f"row {r} sums to {sums[r].item():.3g}: you raised the probabilities to the power 1 / T "
         "after the softmax, without renormalising. The temperature divides the logits, before the softmax: "
         "softmax(logits / T)."),
        (_top_k_probs(logits, T, top_k, "after"), f"row {r} sums to {sums[r].item():.3g}: you zeroed the tokens "
         "outside the top k after the softmax, and what is left no longer sums to 1. Mask their logits with -inf "
         "before the softmax (or divide each row by its sum)."),
        (_top_k_probs(logits, T, top_k, "zero"), "the tokens outside the top k got weight: you set their logits "
         "to 0, and e^0 = 1 is not 0. Set them to -inf before the softmax: masked_fill(logits < kth, float('-inf'))."),
        (_top_k_probs(logits, T, top_k, "dim0"), "the softmax ran over the batch axis (dim=0): each row is one "
         "sequence's distribution over the V tokens and sums to 1, softmax(dim=-1)."),
        (_top_k_probs(logits, T, top_k, "log"), "those are log-probabilities (log_softmax): a sampler draws from "
         "the probabilities themselves, softmax(dim=-1)."),
        (_top_k_probs(logits, T, top_k, "logits"), "those are the logits / T with -inf for the tokens left out: "
         "a sampler draws from their softmax, the probabilities."),
        (z, "those are the logits / T: a sampler draws from their softmax, the probabilities (with the tokens outside "
         "the top k at 0)."),
        (logits.double(), "those are the logits themselves: return softmax(logits / T) over the top k, the "
         "probabilities a sampler draws from."),
    ]
    if top_k is not None and top_k < V:
        for k in (top_k - 1, top_k + 1):
            if k >= 1:
                mistakes.append((_top_k_probs(logits, T, k), f"each row keeps {min(k, V)} tokens where top_k = "
                                 f"{top_k} keeps {top_k} (and any tied with the k-th largest): keep the tokens whose "
                                 "logit is >= the k-th largest, kth = logits.topk(top_k).values[:, -1:] (index "
                                 "k - 1, counted from 0), and mask those < kth."))
    if top_k is not None and top_k <= B:
        mistakes.append((_top_k_probs(logits, T, top_k, "batch"), "you took the top k along the batch axis (dim=0), "
                         "the largest logits of each column: a sampler picks among the V tokens of its own row, "
                         "logits.topk(top_k, dim=-1)."))
    for mistake, hint in mistakes:
        if not close(mistake, expected) and close(got, mistake):
            raise Hint(f"{shown}: {hint}")


# --- 09.2: duplicate-token heads -----------------------------------------------------------------------------------


def _causal_weights(NH: int, S: int, g: torch.Generator) -> Tensor:
    """(NH, S, S) float64 random attention weights of a causal layer: rows sum to 1, zero above the diagonal."""
    scores = 2 * torch.randn(NH, S, S, generator=g, dtype=torch.float64)  # (NH, S, S)
    return scores.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), -math.inf).softmax(dim=-1)


def _duplicate(weights: Tensor, tokens: Tensor, pick: str = "earlier", rows: str = "repeats") -> Tensor:
    """(NH,) in float64: the mean over the positions `rows` of the weight each head puts on the keys `pick` (the
    right answer: the sum over the "earlier" copies, averaged over the positions that "repeat" an earlier token), or
    a usual mistake: the copies and the token "itself", the "latest" or the "first" copy only, the "max" over them,
    the token after each copy ("induction"); averaged over "all" positions, those "after_first", or every position
    whose token occurs twice or more ("anywhere")."""
    w = weights.detach().double()  # (NH, S, S)
    S = w.shape[-1]
    i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]  # (S, 1), (1, S)
    same = tokens[:, None] == tokens[None, :]  # (S, S)
    earlier = same & (j < i)  # (S, S): the earlier copies of token i
    repeats = earlier.any(dim=-1)  # (S,): the positions whose token occurred before
    if pick in ("latest", "first"):
        at = torch.where(earlier, j, -1).amax(-1) if pick == "latest" else torch.where(earlier, j, S).amin(-1)  # (S,)
        one = torch.zeros(S, S, dtype=torch.bool)
        one[repeats, at[repeats]] = True  # (S, S): a single copy per position
        per = (w * one).sum(dim=-1)  # (NH, S)
    elif pick == "max":
        per = w.masked_fill(~earlier, 0.0).amax(dim=-1)  # (NH, S)
    elif pick == "induction":
        after = torch.zeros(S, S, dtype=torch.bool)
        after[:, 1:] = earlier[:, :-1]  # (S, S): key j + 1 for every earlier copy j (j + 1 <= i)
        per = (w * after).sum(dim=-1)  # (NH, S)
    else:
        per = (w * (same & (j <= i) if pick == "itself" else earlier)).sum(dim=-1)  # (NH, S)
    chosen = {"all": torch.ones(S, dtype=torch.bool), "after_first": torch.arange(S) >= 1,
              "anywhere": same.sum(dim=-1) > 1}.get(rows, repeats)  # (S,)
    return per[:, chosen].mean(dim=-1)  # (NH,)


def _positions(mask: Tensor) -> list[int]:
    return mask.nonzero().flatten().tolist()


@grader("09.2")
def check_09_2(duplicate_token_scores) -> str:
    """duplicate_token_scores(weights (NH, S, S), tokens (S,)) -> (NH,): the mean over the positions that repeat an
    earlier token of the weight summed over all its earlier copies."""
    g = torch.Generator().manual_seed(92)
    # NH and S unlike: a token three times (2) and a repeat at the next position (3, 3); a token four times with an
    # adjacent repeat; S = 2, one adjacent repeat; ids as large as a real vocabulary's, a repeated stretch of text
    cases = [
        (4, torch.tensor([5, 2, 7, 2, 9, 5, 2, 3, 3])),
        (3, torch.tensor([4, 4, 1, 4, 0, 4, 1])),
        (5, torch.tensor([8, 8])),
        (2, torch.tensor([2764, 310, 9011, 47, 310, 2764, 310, 9011, 47, 120, 5, 2764])),
    ]
    for n, (NH, tokens) in enumerate(cases):
        S = len(tokens)
        i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]  # (S, 1), (1, S)
        same = tokens[:, None] == tokens[None, :]  # (S, S)
        earlier = same & (j < i)  # (S, S): the earlier copies of token i
        repeats = earlier.any(dim=-1)  # (S,): the positions whose token occurred before
        weights = _causal_weights(NH, S, g)  # (NH, S, S)
        if n == 0:  # head 1 is a duplicate-token head: all its weight on the earlier copies (more on the older
            # ones), or on token 0 where there is none
            weights[1] = torch.where(repeats[:, None], earlier * (S - j), (j == 0).double())  # (S, S)
            weights[1] = weights[1] / weights[1].sum(dim=-1, keepdim=True)
        weights = weights.to(dtype())
        expected = _duplicate(weights, tokens)  # (NH,), before the answer runs
        where = f"for weights (NH, S, S) = {(NH, S, S)} and tokens {tokens.tolist()}"
        what = "duplicate_token_scores(weights, tokens)"
        got = expect_tensor(call(duplicate_token_scores, weights, tokens), what)
        if tuple(got.shape) == (NH, S):
            raise Hint(f"{where}, you returned shape (NH, S) = {(NH, S)}, one number per head and position: average "
                       f"each head's numbers over the positions that repeat an earlier token (here "
                       f"{_positions(repeats)}), for one score per head, (NH,).")
        if tuple(got.shape) in ((), (1,)):
            raise Hint(f"{where}, you returned shape {tuple(got.shape)}, one number for every head together: the "
                       f"score is per head, shape (NH,) = ({NH},). Average over the positions only, not over the "
                       "heads.")
        got = expect_shape(got, (NH,), f"{what} (one score per head)")
        if close(got, expected):
            _expect_dtype(got, weights.dtype, what)
            continue
        expect_precision(got, expected, what)
        shown = f"{where}, the scores should be {fmt(expected)}, got {fmt(got)}"
        n_rep, n_any = int(repeats.sum()), int((same.sum(-1) > 1).sum())  # positions: repeats, tokens seen twice+
        mistakes = [(("itself", rows), "the token itself (j == i) is no earlier copy, yet your sum includes it (a "
                     "token always equals itself: the diagonal of tokens[:, None] == tokens[None, :] is True). Sum "
                     "over j < i only: & (j < i), or .tril(diagonal=-1).")
                    for rows in ("repeats", "all", "after_first", "anywhere")]
        mistakes += [
            (("latest", "repeats"), "you took the weight on one earlier copy only, the latest. A token seen three "
             "times has two earlier copies when it comes again: sum the weight over every earlier copy."),
            (("first", "repeats"), "you took the weight on one earlier copy only, the first (list.index finds the "
             "first). A token seen three times has two earlier copies when it comes again: sum the weight over every "
             "earlier copy."),
            (("max", "repeats"), "you took the largest weight among the earlier copies: sum the weight over every "
             "earlier copy (a head that splits its weight between two copies reads both)."),
            (("induction", "repeats"), "you measured the weight on the token AFTER each earlier copy (j + 1): that is "
             "an induction head's score. A duplicate-token head reads the earlier copy itself, key j."),
            (("earlier", "all"), f"you divided by all S = {S} positions. A position whose token is new has no "
             "earlier copy and is left out of the mean (counting it as 0 lowers the score): average over the "
             f"{n_rep} positions {_positions(repeats)} only."),
            (("earlier", "after_first"), f"you averaged over the S - 1 = {S - 1} positions after the first. Only the "
             f"positions whose token occurred before count: here the {n_rep} positions {_positions(repeats)}."),
            (("earlier", "anywhere"), f"you averaged over the {n_any} positions whose token occurs "
             "twice or more, the first occurrences too: a first occurrence has no earlier copy. Average over the "
             f"positions that repeat an earlier token only, here {_positions(repeats)}."),
        ]
        for (pick, rows), hint in mistakes:
            mistake = _duplicate(weights, tokens, pick, rows)  # (NH,)
            if not close(mistake, expected) and close(got, mistake):
                raise Hint(f"{shown}: {hint}")
        if close(got, torch.zeros(NH, dtype=torch.float64)):
            raise Hint(f"{shown}: your scores are all 0. The weights above the diagonal (key j > query i) are 0 in a "
                       "causal layer: you read later copies (j > i), or the axes the wrong way round. weights[h, i, "
                       "j] is what query i puts on key j: sum over the earlier copies, j < i.")
        expect_close(got, expected, f"{what} {where}", why=(
            f"The scores should be {fmt(expected)}: for each position i whose token occurred before (here "
            f"{_positions(repeats)}), the weight summed over its earlier copies j < i; then the mean over those "
            "positions."))
    return ("each head's weight on every earlier copy, averaged over the positions that repeat a token: a token seen "
            "three times or four, adjacent repeats, S = 2, and a duplicate-token head that scores 1.")


# --- 09.3: StreamingLLM's mask -------------------------------------------------------------------------------------



def _sink_mask(S: int, window: int, sinks: int, how: str = "right") -> Tensor:
    """(S, S) bool: query i sees key j when j <= i and (i - j < window or j < sinks) (`how` = "right"), or a usual
    mistake: the window one token "longer" or "shorter", the sinks "after" the window's causal rule (not causal),
    "no_triangle" at all, a "two_sided" window, sinks taken from the "end", the sinks "inside" the window (window -
    sinks recent tokens), one sink "more" (j <= sinks), sinks "ignored", the two rules joined by "and", the token
    "without_itself"."""
    i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]  # (S, 1), (1, S)
    back = i - j  # (S, S)
    recent = {"longer": back <= window, "shorter": back < window - 1, "two_sided": back.abs() < window,
              "inside": back < window - sinks}.get(how, back < window)  # (S, S)
    first = {"end": j >= S - sinks, "more": j <= sinks, "ignored": torch.zeros(1, S, dtype=torch.bool)}.get(
        how, j < sinks)  # (1, S)
    if how == "after":
        return ((j <= i) & recent) | first  # (S, S): the sinks seen by every query, even before them
    if how == "two_sided":
        return recent | ((j <= i) & first)  # (S, S): later tokens inside the window too
    if how == "no_triangle":
        return recent | first
    if how == "and":
        return (j <= i) & recent & first
    if how == "without_itself":
        return (j < i) & ((back <= window) | first)  # the `window` tokens before i, and never i itself
    return (j <= i) & (recent | first)  # (S, S)


@grader("09.3")
def check_09_3(sink_window_mask) -> str:
    """sink_window_mask(S, window, sinks) -> (S, S) bool: j <= i and (i - j < window or j < sinks)."""
    # S, window and sinks unlike: rows i < sinks, and more sinks than the window is long; no sinks (a plain sliding
    # window); window >= S (plain causal); sinks >= S; window = 1 (itself and the sinks); sinks twice the window
    for S, window, sinks in [(10, 2, 3), (8, 4, 0), (6, 9, 2), (5, 2, 7), (9, 1, 3), (11, 2, 4)]:
        expected = _sink_mask(S, window, sinks)  # (S, S)
        what = f"sink_window_mask({S}, {window}, {sinks})"
        got = expect_tensor(call(sink_window_mask, S, window, sinks), what)
        if tuple(got.shape) == (1, S, S):
            raise Hint(f"{what} has shape (1, S, S) = {(1, S, S)}, as the package's masks (causal_mask, "
                       f"sliding_window_mask) have: return the (S, S) = {(S, S)} mask itself (drop the first axis, "
                       "mask[0]).")
        got = expect_bool_mask(got, (S, S), what, "(j <= i) & ((i - j < window) | (j < sinks))")
        if torch.equal(got, expected):
            continue
        where = f"(S={S}, window={window}, sinks={sinks})"
        shown = first_wrong_row(got, expected, where)
        if torch.equal(got, ~expected):
            raise Hint(f"{shown}. True means 'may attend' (the tokens a query sees), as everywhere in the series.")
        mistakes = [
            ("after", "A token among the first `sinks` sees the sinks after it: a sink is visible to the queries at "
             "or after it only, never to an earlier one. Keep the causal rule j <= i for the sinks too: (j <= i) & "
             "((i - j < window) | (j < sinks))."),
            ("no_triangle", "Your mask lets each token see every later token (i - j < window holds for all of "
             "them): keep the causal triangle, j <= i, around both rules."),
            ("two_sided", "Your window is two-sided: it also shows the tokens after i. StreamingLLM's window is the "
             "past only, the last `window` tokens up to i: 0 <= i - j < window."),
            ("longer", f"Your window is one token too long: it holds the last {window + 1} tokens, not {window}. With "
             "itself included, the last `window` tokens are i - window + 1 .. i: i - j < window, not <=."),
            ("shorter", f"Your window is one token short: it holds {window - 1} of the last {window} tokens. With "
             "itself included, the last `window` tokens are i - window + 1 .. i: i - j < window."),
            ("without_itself", "Your window leaves out the token itself. The last `window` tokens include i: 0 <= "
             "i - j < window."),
            ("inside", f"You counted the sinks inside the window (i - j < window - sinks = {window - sinks}): the "
             f"sinks come in addition to the window, each query sees its last window = {window} tokens AND the first "
             f"sinks = {sinks}."),
            ("end", "Your sinks are the last tokens of the text: the attention sinks are its FIRST `sinks` tokens, "
             "j < sinks, which every later query can see."),
            ("more", f"You keep {sinks + 1} sinks, j <= sinks: the sinks are the first `sinks` tokens, j = 0 .. "
             "sinks - 1, j < sinks."),
            ("ignored", "Your mask is a plain sliding window: keep the first `sinks` tokens (the attention sinks) "
             "visible to every query after them as well, | (j < sinks)."),
            ("and", "Your mask joins the two rules with & (AND): a key is visible when it is recent OR a sink, "
             "(i - j < window) | (j < sinks), within the causal triangle."),
        ]
        for how, hint in mistakes:
            if torch.equal(got, _sink_mask(S, window, sinks, how)):
                raise Hint(f"{shown}. {hint}")
        i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]
        if bool((got & (j > i)).any()):
            raise Hint(f"{shown}. A query never sees a later token: every True of the mask lies on or below the "
                       "diagonal, j <= i.")
        expect_equal(got, expected, what, why=f"{shown}. Token i sees token j when j <= i and (i - j < window or "
                     "j < sinks).")
    return ("each query sees its last `window` tokens and the first `sinks`, never a later one: also without sinks, "
            "with window >= S, sinks >= S and window = 1.")
