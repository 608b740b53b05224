"""Graders for the exercises of notebook 04 (causal attention and the KV cache)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import Tensor

from ._grading import (Hint, call, close, detached, dtype, expect_close, expect_precision, expect_shape,
                       expect_tensor, fmt, grader, requiring_grad)
from .nb00 import _expect_gradients, _probed_gradients

__all__ = ["check_04_1", "check_04_2", "check_04_3", "check_04_4"]


@grader("04.1")
def check_04_1(average_past) -> str:
    """average_past(x (B, S, C)) -> (B, S, C): token i = the mean of tokens 0..i, with its gradient."""
    g = torch.Generator().manual_seed(1)
    probes = torch.Generator().manual_seed(14)  # apart from g, so that the inputs do not depend on the probes
    gradients = []  # checked once every case's output is right: a wrong output has the more telling hint
    # no two sizes alike, so that an axis taken for another shows; S = 1 last: a token with no past but itself
    for B, S, C in [(2, 5, 3), (4, 7, 6), (3, 1, 2)]:
        x = torch.randn(B, S, C, generator=g, dtype=dtype())  # (B, S, C)
        counts = torch.arange(1, S + 1, dtype=torch.float64)[:, None]  # (S, 1): i + 1 tokens in row i
        xd = x.double()
        # the averages and their gradient for a random probe, in float64, before the answer runs
        leaf64 = xd.detach().clone().requires_grad_()  # (B, S, C)
        expected = leaf64.cumsum(1) / counts  # (B, S, C)
        probe, (expected_grad,) = _probed_gradients(expected, [leaf64], probes)
        expected = expected.detach()
        leaf, given = requiring_grad(x)  # x in a graph, as the input of a layer is
        what = f"average_past(x) for x {(B, S, C)}"
        got = expect_shape(call(average_past, given), (B, S, C), what)
        if close(got, expected):
            gradients.append((got, [leaf], [expected_grad], probe, what))
            continue
        expect_precision(got, expected, what)  # before the mistakes below, none of which it is
        if close(got, xd.mean(1, keepdim=True).expand_as(xd)):
            raise Hint("every token got the mean of the whole sequence: the future leaked in. Row i must average "
                       "tokens 0..i only: multiply by a lower-triangular matrix.")
        if close(got, xd.cumsum(1) / S):
            raise Hint(f"row i is divided by S = {S}; divide it by i + 1, the number of tokens it averages (normalise "
                       "each row of the triangle to sum to 1).")
        if close(got, xd.flip(1).cumsum(1).flip(1) / counts.flip(0)):
            raise Hint("token i averages tokens i..S-1, its future: use the lower triangle (tril), not the upper one.")
        past_only = xd.cumsum(1)[:, :-1] / counts[:-1]  # (B, S - 1, C): row i + 1 = the mean of tokens 0..i
        if S > 1 and close(got[:, 1:], past_only):
            raise Hint(f"token i averages tokens 0..i-1 and leaves itself out (row 0 gives {fmt(got[0, 0, :2])}...): "
                       "its own token counts too, so keep the diagonal, tril() with diagonal=0.")
        tri = torch.ones(S, S, dtype=torch.float64).tril()  # (S, S)
        if close(got, tri.softmax(dim=-1) @ xd):
            raise Hint("a softmax of the 0/1 triangle gives its zeros e^0 = 1 as well, so every token still mixes in "
                       "its future. Either normalise the triangle's rows (tri / tri.sum(-1, keepdim=True)) or set the "
                       "future to -inf before the softmax, as the notebook does.")
        if close(got, xd.cumsum(-1) / torch.arange(1, C + 1, dtype=torch.float64)):
            raise Hint("that averages along the features, the last axis of x; the tokens are axis 1 (dim=1), x is "
                       "(B, S, C).")
        expect_close(got, expected, "average_past(x)", why="Compare got[0, 2] with x[0, :3].mean(0).")
    for checked in gradients:
        _expect_gradients(*checked)
    return "each token is the average of its past, itself included, for any B, S and C, and so is its gradient."


@contextlib.contextmanager
def _without_causal_mask(fn: Callable) -> Iterator[None]:
    """Inside the block the package's `causal_mask` and the triangle it is made of, `_lower_triangle` (which
    `sliding_window_mask` and the attention functions' is_causal use too), refuse to run, under whatever name `fn`,
    the package or its modules hold them: the exercise asks for the mask built by hand. Every name is put back
    however the block ends."""
    import attention_lib
    from attention_lib import functional, masks

    originals = {id(f): f for f in (masks.causal_mask, masks._lower_triangle)}

    def refuse(*args, **kwargs):
        raise Hint("build the mask yourself (torch.ones(S_new, S_total, dtype=torch.bool).tril(diagonal=...)) "
                   "instead of calling causal_mask or the package's triangle behind it (_lower_triangle).")

    spaces = [vars(masks), vars(functional), vars(attention_lib), getattr(fn, "__globals__", {})]
    found = [(space, name, value) for space in spaces for name, value in list(space.items()) if id(value) in originals]
    try:
        for space, name, _ in found:
            space[name] = refuse
        yield
    finally:
        for space, name, value in found:
            space[name] = value


@grader("04.2")
def check_04_2(decode_mask) -> str:
    """decode_mask(S_new, S_total) -> (S_new, S_total) bool: the bottom rows of the causal triangle, by hand."""
    # S_new < S_total (queries after cached keys) first; S_new = 1, a single step; S_new == S_total, no cache yet
    for S_new, S_total in [(2, 7), (1, 6), (4, 4), (3, 8)]:
        with _without_causal_mask(decode_mask):
            answer = call(decode_mask, S_new, S_total)
        what = f"decode_mask({S_new}, {S_total})"
        got = expect_shape(expect_tensor(answer, what), (S_new, S_total), what)
        if got.dtype != torch.bool:
            raise Hint(f"the mask should have dtype torch.bool (True = may attend), got {got.dtype}: build it from "
                       "torch.ones(..., dtype=torch.bool), or convert with .bool().")
        ones = torch.ones(S_new, S_total, dtype=torch.bool)
        cached = S_total - S_new  # the keys before the first new query
        expected = ones.tril(diagonal=cached)  # (S_new, S_total)
        if torch.equal(got, expected):
            continue
        if torch.equal(got, ~expected):
            raise Hint("True must mean 'may attend' (the series' convention), and False 'hidden': invert it.")
        if torch.equal(got, ones.tril()):
            raise Hint(f"{what} is aligned at the top left, so the first new query sees only key 0. The new queries "
                       "are the LAST positions: query i sits at position S_total - S_new + i and sees keys "
                       "0..S_total - S_new + i (tril's diagonal argument).")
        if torch.equal(got, ones.tril(diagonal=-cached)):
            raise Hint(f"{what} has the diagonal's sign the wrong way round: tril(diagonal=d) keeps key j <= i + d, so "
                       f"a query {cached} positions further on needs d = S_total - S_new = +{cached}, not -{cached}.")
        if torch.equal(got, ones.tril(diagonal=cached - 1)):
            raise Hint(f"in {what} a new query does not see itself: query i sits at position S_total - S_new + i, and "
                       "its own key is visible, so diagonal = S_total - S_new, not one less.")
        if torch.equal(got, ones):
            raise Hint(f"in {what} every key is visible. That is right for one new token, whose keys are all in its "
                       "past, but new query i must not see the new keys after it: the bottom rows of the triangle.")
        if bool((got & ~expected).any()):
            raise Hint(f"in {what} a new query sees a key after its own position (its future): query i, at position "
                       "S_total - S_new + i, sees keys 0..S_total - S_new + i only, the lower triangle.")
        raise Hint(f"in {what} a new query misses a key of its past: every cached key (columns 0..S_total - S_new - 1) "
                   "comes before every new query, and query i also sees the new keys up to its own.")
    return "the new queries see every cached key and the new keys up to their own position."


@grader("04.3")
def check_04_3(next_positions) -> str:
    """next_positions(mask (B, S_total) left padding, True = real, S_new) -> (B, S_new) ints: the new tokens' ids."""
    # B, S_total and S_new all different; rows full, partly padded, and with no real token yet (all padding)
    for lengths, S_total, S_new in [([5, 3, 0, 4], 5, 2), ([2, 6, 1], 6, 4), ([7, 0], 7, 1)]:
        B = len(lengths)
        n = torch.tensor(lengths)  # (B,): real tokens so far, per row
        mask = torch.arange(S_total)[None, :] >= (S_total - n)[:, None]  # (B, S_total): left padding
        got = call(next_positions, mask.clone(), S_new)
        got = expect_shape(expect_tensor(got, "the positions"), (B, S_new), "the positions")
        if got.is_floating_point() or got.is_complex() or got.dtype == torch.bool:
            raise Hint(f"positions index an embedding table: return an integer tensor (e.g. torch.long), got "
                       f"{got.dtype}.")
        if got.dtype not in (torch.long, torch.int32):
            raise Hint(f"positions index an embedding table, and nn.Embedding takes torch.long (or torch.int32) "
                       f"indices only: it refuses your {got.dtype}. Count in torch.long, mask.long().sum(-1), or "
                       "convert with .long() at the end.")
        got = got.long()
        expected = n[:, None] + torch.arange(S_new)  # (B, S_new): each row goes on from its own count
        if torch.equal(got, expected):
            continue
        has_real = n > 0  # (B,)
        if torch.equal(got, torch.full_like(got, S_total) + torch.arange(S_new)):
            raise Hint(f"these are the columns the new tokens land in ({S_total}, {S_total + 1}, ...), the same for "
                       "every row. Count each row's real tokens instead: a row with 3 real tokens goes on at "
                       "position 3.")
        if torch.equal(got[has_real], expected[has_real] - 1):
            raise Hint("off by one: a row with n real tokens used positions 0..n-1 (its last position id is n - 1), "
                       "so its next token is at position n.")
        if torch.equal(got, expected + 1):
            raise Hint("off by one: a row with n real tokens used positions 0..n-1, so its next token is at n, not "
                       "n + 1.")
        if torch.equal(got[has_real], expected[has_real]) and torch.equal(got[~has_real], expected[~has_real] + 1):
            raise Hint(f"a row with no real token yet (lengths {lengths}) must start at position 0, got "
                       f"{fmt(got[~has_real][0])}: 'the last position id plus one' fails there, since the clamped "
                       "position ids of its pads are 0, not -1. Count the real tokens: mask.sum(-1).")
        if torch.equal(got, (S_total - n)[:, None] + torch.arange(S_new)):
            raise Hint("that counts each row's padding; True = real token, so count the True entries: a row with 3 "
                       "real tokens goes on at position 3.")
        if S_new > 1 and torch.equal(got[:, :1].expand_as(got), got):
            raise Hint("every new token of a row got the same position: the S_new new tokens are consecutive, n, "
                       "n + 1, ...")
        raise Hint(f"for rows with {lengths} real tokens and S_new = {S_new} the positions should be "
                   f"{expected.tolist()}, got {got.tolist()}: each row goes on from its own number of real tokens.")
    return "each row goes on from its own number of real tokens, wherever its padding ends, also from none."


def _reference_generation(layer, prompt: Tensor, steps: int) -> Tensor:
    """What generate must return, without a cache: the whole sequence recomputed at every step, (1, P + steps, C)."""
    with torch.no_grad():
        xs = prompt  # (1, P, C)
        for _ in range(steps):
            xs = torch.cat([xs, layer(xs)[:, -1:]], dim=1)  # (1, S + 1, C): the last output fed back
        return layer(xs)  # (1, P + steps, C)


def _fed_back(calls: list[tuple[Tensor, object, Tensor]], prompt: Tensor) -> None:
    """Given the successful calls of the layer with a cache, (input, cache, output) each, in order, raise the hint
    that names what went wrong with the cache or with the token fed back; return if the calls were right."""
    P = prompt.shape[1]
    if len({id(cache) for _, cache, _ in calls}) > 1:
        raise Hint("a new cache at each call forgets every key and value before it: make one cache, "
                   "layer.new_cache(1), before the prompt, and pass that same cache to every call.")
    inputs = torch.cat([x for x, _, _ in calls], dim=1)  # (1, S_fed, C): every token fed through the cache
    outputs = torch.cat([y for _, _, y in calls], dim=1)  # (1, S_fed, C)
    if inputs.shape[1] < P or not close(inputs[:, :P], prompt):
        raise Hint("the cache is missing the prompt's keys and values: feed the prompt through the cache first, "
                   "layer(prompt, cache=cache), whose outputs are the first P outputs too, then the tokens fed back.")
    for t in range(P, inputs.shape[1]):
        x, step = inputs[:, t], t - P + 1
        if close(x, outputs[:, t - 1]):
            continue
        if t > P and close(x, inputs[:, t - 1]):
            raise Hint(f"at step {step} you fed the same token as at the step before: the token you feed back must "
                       "be each step's new output, out[:, -1:], updated at every step.")
        for s in range(t - 1):
            if close(x, outputs[:, s]):
                which = "the first output" if s == 0 else f"output {s}"
                raise Hint(f"at step {step} you fed back {which}, not the last one: the next input is the output of "
                           f"the latest position (here position {t - 1}), out[:, -1:].")
        if any(close(x, inputs[:, s]) for s in range(t)):
            raise Hint(f"at step {step} you fed an input (a token already fed, such as the prompt's last one) "
                       "instead of an output: feed back the layer's last output, out[:, -1:].")
        raise Hint(f"the input of your step {step} is not the last output of the call before it, nor any earlier "
                   "output or input: feed back the output itself, out[:, -1:], with nothing added or changed.")


@grader("04.4")
def check_04_4(generate) -> str:
    """generate(layer, prompt (1, P, C), steps) -> (1, P + steps, C) with a KV cache: each token projected once."""
    from attention_lib import CausalAttention

    # (P, steps, C, NH): B = 1, and no two of B, P, steps, NH, HS, C alike but in the last, a prompt of one token
    for P, steps, C, NH in [(4, 3, 12, 2), (2, 6, 20, 4), (1, 5, 6, 3)]:
        layer = CausalAttention(C, NH, context_size=P + steps).to(dtype()).eval()  # the cache fills up exactly
        prompt = torch.randn(1, P, C, dtype=dtype())  # (1, P, C)
        expected = _reference_generation(detached(layer), prompt, steps)  # (1, P + steps, C), before the answer
        projected = []  # tokens projected by Wqkv, per call
        calls = []  # (input, cache, output) of each successful call of the layer with a cache

        def record(module, args, kwargs, out, calls=calls):
            if kwargs.get("cache") is not None:  # forward takes the cache by keyword only (decode passes it so too)
                x = args[0] if args else kwargs["x"]
                y = out[0] if isinstance(out, tuple) else out  # (out, weights) with return_weights=True
                calls.append((x.detach().clone(), kwargs["cache"], y.detach().clone()))

        def count(module, args, out, projected=projected):
            projected.append(args[0].shape[1])

        hooks = [layer.Wqkv.register_forward_hook(count),
                 layer.register_forward_hook(record, with_kwargs=True)]
        try:
            with torch.enable_grad():  # as in a notebook: the no_grad is the answer's to take
                got = call(generate, layer, prompt.clone(), steps)
        finally:
            for hook in hooks:
                hook.remove()
        if isinstance(got, list | tuple):
            raise Hint("return one tensor (1, P + steps, C): torch.cat the outputs along dim=1.")
        got = expect_tensor(got, "generate(layer, prompt, steps)")
        if tuple(got.shape) == (1, steps, C):
            raise Hint(f"for a prompt of {P} tokens and {steps} steps you returned the {steps} generated outputs "
                       f"only: return all the outputs, the prompt's {P} first, (1, P + steps, C) = "
                       f"{(1, P + steps, C)}.")
        got = expect_shape(got, (1, P + steps, C), "generate(layer, prompt, steps)")
        if not close(got, expected):
            if calls:
                _fed_back(calls, prompt)
                inputs = torch.cat([x for x, _, _ in calls], dim=1)  # (1, S_fed, C)
                if close(got, inputs):
                    raise Hint("you returned the inputs (the prompt, then the tokens fed back); return the outputs "
                               "of the layer, (1, P + steps, C).")
            expect_close(got, expected, f"the outputs for P = {P}, steps = {steps}",
                         why="Each step's input is the previous step's last output.")
        if sum(projected) > P + steps:
            raise Hint(f"the outputs are right, but Wqkv projected {sum(projected)} tokens where a cache needs "
                       f"{P + steps}: use one cache, layer(x, cache=cache), for the prompt and for each new token, "
                       "instead of recomputing the whole sequence.")
    return "generation through one cache projected each token once, and equals recomputing the whole sequence."
