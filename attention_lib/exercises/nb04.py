"""Graders of the exercises of notebook 04 (causal attention and the KV cache)."""

from __future__ import annotations

import contextlib

import torch

from ._grading import Hint, expect_close, expect_shape, expect_tensor, grader

__all__ = ["check_04_1", "check_04_2", "check_04_3", "check_04_4"]


@grader("04.1")
def check_04_1(average_past) -> str:
    """average_past(x (B, S, C)) -> (B, S, C): token i = the mean of tokens 0..i."""
    B, S, C = 2, 5, 3
    x = torch.randn(B, S, C, generator=torch.Generator().manual_seed(0))  # (B, S, C)
    got = expect_shape(average_past(x.clone()), (B, S, C), "average_past(x)")
    counts = torch.arange(1, S + 1, dtype=x.dtype)[:, None]  # (S, 1): i + 1 tokens in row i
    expected = x.cumsum(1) / counts  # (B, S, C)
    if torch.allclose(got, x.mean(1, keepdim=True).expand_as(x), atol=1e-5):
        raise Hint("every token got the mean of the whole sequence: the future leaked in. Row i must average "
                   "tokens 0..i only: multiply by a lower-triangular matrix.")
    if torch.allclose(got, x.cumsum(1) / S, atol=1e-5):
        raise Hint("row i is divided by S; divide it by i + 1, the number of tokens it averages (normalise each "
                   "row of the triangle to sum to 1).")
    if torch.allclose(got, x.flip(1).cumsum(1).flip(1) / counts.flip(0), atol=1e-5):
        raise Hint("token i averages tokens i..S-1, its future: use the lower triangle (tril), not the upper one.")
    expect_close(got, expected, "average_past(x)", why="Compare got[0, 2] with x[0, :3].mean(0).")
    return "each token is the average of its past, itself included."


@contextlib.contextmanager
def _without_causal_mask(fn):
    """Inside the block the package's `causal_mask` refuses to run, under whatever name `fn` or the package holds it:
    the exercise asks for the mask built by hand."""
    import attention_lib
    from attention_lib import masks

    original = masks.causal_mask

    def refuse(*args, **kwargs):
        raise Hint("build the mask yourself (torch.ones(S_new, S_total, dtype=torch.bool).tril(diagonal=...)) "
                   "instead of calling causal_mask")

    spaces = [vars(masks), vars(attention_lib), getattr(fn, "__globals__", {})]
    found = [(space, name) for space in spaces for name, value in list(space.items()) if value is original]
    for space, name in found:
        space[name] = refuse
    try:
        yield
    finally:
        for space, name in found:
            space[name] = original


@grader("04.2")
def check_04_2(decode_mask) -> str:
    """decode_mask(S_new, S_total) -> (S_new, S_total) bool: the bottom rows of the causal triangle, by hand."""
    for S_new, S_total in [(1, 6), (2, 6), (3, 3), (4, 9)]:
        with _without_causal_mask(decode_mask):
            answer = decode_mask(S_new, S_total)
        got = expect_shape(expect_tensor(answer, "the mask"), (S_new, S_total), f"decode_mask({S_new}, {S_total})")
        if got.dtype != torch.bool:
            raise Hint(f"the mask should have dtype torch.bool (True = may attend), got {got.dtype}.")
        ones = torch.ones(S_new, S_total, dtype=torch.bool)
        expected = ones.tril(diagonal=S_total - S_new)  # (S_new, S_total)
        if torch.equal(got, ~expected):
            raise Hint("True must mean 'may attend' (the series' convention), and False 'hidden': invert it.")
        if S_new != S_total and torch.equal(got, ones.tril()):
            raise Hint(f"decode_mask({S_new}, {S_total}) is aligned at the top left, so the first new query sees "
                       "only key 0. The new queries are the LAST positions: query i sits at position "
                       "S_total - S_new + i and sees keys 0..S_total - S_new + i (tril's diagonal argument).")
        if not torch.equal(got, expected):
            raise Hint(f"decode_mask({S_new}, {S_total}) is not the last {S_new} rows of the {S_total} x "
                       f"{S_total} lower triangle.")
    return "the new queries see every cached key and the new keys up to their own position."


@grader("04.3")
def check_04_3(next_positions) -> str:
    """next_positions(mask (B, S_total) left padding, True = real, S_new) -> (B, S_new) ints: the new tokens' ids."""
    lengths = torch.tensor([5, 3, 1, 4])  # real tokens so far, per row
    S_total, S_new = 5, 3
    mask = torch.arange(S_total)[None, :] >= (S_total - lengths)[:, None]  # (B, S_total): left padding
    got = expect_shape(expect_tensor(next_positions(mask.clone(), S_new), "the positions"), (len(lengths), S_new),
                       "the positions")
    if got.is_floating_point() or got.dtype == torch.bool:
        raise Hint(f"positions index an embedding table: return an integer tensor (e.g. torch.long), got {got.dtype}.")
    expected = lengths[:, None] + torch.arange(S_new)  # (B, S_new): each row goes on from its own count
    if torch.equal(got, torch.full_like(got, S_total) + torch.arange(S_new)):
        raise Hint(f"these are the columns the new tokens land in ({S_total}, {S_total + 1}, ...), the same for every "
                   "row. Count each row's real tokens instead: a row with 3 real tokens goes on at position 3.")
    if torch.equal(got, expected - 1):
        raise Hint("off by one: a row with n real tokens used positions 0..n-1, so its next token is at position n.")
    if torch.equal(got, expected + 1):
        raise Hint("off by one: a row with n real tokens used positions 0..n-1, so its next token is at n, not n + 1.")
    if torch.equal(got[:, :1].expand_as(got), got):
        raise Hint("every new token of a row got the same position: the S_new new tokens are consecutive, n, n + 1, ...")
    if not torch.equal(got, expected):
        raise Hint(f"the positions should be {expected.tolist()} for rows with {lengths.tolist()} real tokens.")
    return "each row goes on from its own number of real tokens, wherever its padding ends."


@grader("04.4")
def check_04_4(generate) -> str:
    """generate(layer, prompt (1, P, C), steps) -> (1, P + steps, C) with layer.decode and a cache."""
    from attention_lib import CausalAttention

    P, steps, C = 4, 5, 16
    layer = CausalAttention(C, 4, context_size=P + steps).eval()
    prompt = torch.randn(1, P, C)  # (1, P, C)
    projected = []
    hook = layer.Wqkv.register_forward_hook(lambda mod, args, out: projected.append(args[0].shape[1]))
    try:
        got = generate(layer, prompt.clone(), steps)
    finally:
        hook.remove()
    got = expect_shape(got, (1, P + steps, C), "generate(layer, prompt, steps)").detach()
    with torch.no_grad():
        xs = prompt  # (1, P, C)
        for _ in range(steps):
            xs = torch.cat([xs, layer(xs)[:, -1:]], dim=1)  # (1, S + 1, C): the last output fed back
        expected = layer(xs)  # (1, P + steps, C)
    if torch.allclose(got[:, :P], expected[:, :P], atol=1e-5) and not torch.allclose(got, expected, atol=1e-5):
        raise Hint("the prompt's outputs are right but the generated ones are not: the cache is missing the "
                   "prompt's keys and values. Feed the whole prompt through layer.decode(prompt, cache) first.")
    expect_close(got, expected, "the outputs", why="Each step's input is the previous step's last output.")
    if sum(projected) > P + steps:
        raise Hint(f"the outputs are right, but Wqkv projected {sum(projected)} tokens where a cache needs "
                   f"{P + steps}: use layer.decode with one cache instead of recomputing the whole sequence.")
    return f"generation through the cache projected each of the {P + steps} tokens once."
