"""Graders for the exercises of notebook 02 (the single-head forward pass)."""

from __future__ import annotations

import functools
import math
import warnings

import torch
from torch import Tensor, nn

from .. import functional
from ..functional import attend, explicit_attention, masked_softmax, register_attention_impl
from ..masks import padding_mask
from ..single_head import SingleHeadAttention
from ._grading import (Hint, call, close, detached, dtype, expect_close, expect_precision, expect_shape,
                       expect_tensor, fmt, grader, requiring_grad)
from .nb00 import _expect_gradients, _probed_gradients

__all__ = ["check_02_1", "check_02_2", "check_02_3"]


def _said(error: BaseException) -> str:
    """What the learner's code raised, as a sentence: "RuntimeError: the message"."""
    return f"{type(error).__name__}: {str(error).rstrip('.')}"


def _learner_error(raised: Exception, *kinds: type[BaseException]) -> BaseException:
    """The exception the learner's code raised, if `raised` wraps one of `kinds`; otherwise re-raise `raised` (a
    hint, "not attempted yet", another learner error or the grader's own bug) as it is."""
    error = getattr(raised, "error", None)
    if not isinstance(error, kinds):
        raise raised
    return error


# --- 02.1 -----------------------------------------------------------------------------------------------------------


@grader("02.1")
def check_02_1(split_qkv) -> str:
    """`split_qkv(qkv, head_size)` returns (q, k, v), the three consecutive blocks of the last axis, with their
    gradients."""
    probes = torch.Generator().manual_seed(5)
    gradients = []  # checked once every case's output is right: a wrong output has the more telling hint
    # (B, S, HS), no two alike (nor 3 * HS); the last qkv is a transposed view, not contiguous in memory
    for B, S, HS, contiguous in [(2, 3, 4, True), (5, 4, 3, True), (3, 7, 2, False)]:
        numbers = torch.arange(B * S * 3 * HS, dtype=dtype())  # each number shows its position in its token's row
        # token (b, s) at row b * S + s of memory; or at row s * B + b, as Wqkv(x) of an (S, B, C) x, transposed
        leaf, given = requiring_grad(numbers.reshape(B, S, 3 * HS) if contiguous else numbers.reshape(S, B, 3 * HS))
        qkv = given if contiguous else given.transpose(0, 1)  # (B, S, 3 * HS), in a graph as a layer's output is
        what = f"qkv of shape {(B, S, 3 * HS)}{'' if contiguous else ' that is not contiguous (a transposed view)'}"
        # the three blocks, and their gradient for a random probe, in float64, before the answer runs
        leaf64 = leaf.detach().double().requires_grad_()
        qkv64 = leaf64 if contiguous else leaf64.transpose(0, 1)  # (B, S, 3 * HS)
        expected = [qkv64[..., i * HS : (i + 1) * HS] for i in range(3)]  # 3 x (B, S, HS)
        probe, (expected_grad,) = _probed_gradients(torch.cat(expected, dim=-1), [leaf64], probes)  # (B, S, 3 * HS)
        expected = [e.detach() for e in expected]
        try:
            parts = call(split_qkv, qkv, HS)
        except Exception as raised:
            error = _learner_error(raised, RuntimeError)
            if "invalid for input of size" in str(error):
                raise Hint(f"for {what} and head_size = {HS} your code raised {_said(error)}. Take the sizes "
                           "from the arguments, qkv.shape[:-1] and head_size, not from the notebook's B, S and HS: "
                           "the function must work for any qkv.") from None
            if "view" in str(error) and not contiguous:
                raise Hint(f"for {what} your code raised {_said(error)}. .view can only reuse memory laid out "
                           "in the order of the new shape, and an input may come transposed: use .reshape (a view "
                           "when it can be, a copy when it must) or qkv.split(head_size, dim=-1).") from None
            raise
        if not isinstance(parts, tuple | list):
            shown = (type(parts).__name__ if not isinstance(parts, Tensor) else "one nested tensor" if parts.is_nested
                     else f"one tensor of shape {tuple(parts.shape)}")  # a nested tensor has no shape
            raise Hint(f"return the tuple (q, k, v) of three tensors (B, S, HS); you returned {shown}. After the "
                       "reshape to (B, S, 3, HS), unbind dim 2 (or use qkv.split(head_size, dim=-1)).")
        if len(parts) != 3:
            pieces = (f", one per feature of the head (HS = {HS}), as split(3, dim=-1) (pieces of size 3) or an "
                      "unbind over the axis of size HS give" if len(parts) == HS else "")
            raise Hint(f"for {what} and head_size = {HS} you returned {len(parts)} tensors, not 3 (q, k, v){pieces}. "
                       "Cut the last axis into 3 blocks of head_size: qkv.split(head_size, dim=-1), or reshape it to "
                       "(3, head_size) and unbind dim -2.")
        parts = [expect_tensor(got, name) for got, name in zip(parts, "qkv", strict=True)]
        for name, got, want, lo in zip("qkv", parts, expected, (0, HS, 2 * HS), strict=True):
            if tuple(got.shape) != (B, S, HS):
                why = (f"it has {got.shape[-1]} features per token, not head_size = {HS}: {name} is the block "
                       f"[{lo}:{lo + HS}] of the last axis" if tuple(got.shape[:-1]) == (B, S) else
                       "split the last axis, the features, not the tokens")
                raise Hint(f"for {what}, {name} should have shape (B, S, HS) = {(B, S, HS)}, got "
                           f"{tuple(got.shape)}: {why}.")
            if not close(got, want):
                raise Hint(_misplaced(name, got, qkv, lo, HS))
        # the three parts come from one graph: their gradient is taken at once, through the three side by side
        gradients.append((torch.cat(parts, dim=-1), [leaf], [expected_grad], probe, f"(q, k, v) for {what}"))
    for checked in gradients:
        _expect_gradients(*checked)
    return ("q, k and v are the consecutive blocks [0:HS], [HS:2HS], [2HS:3HS] of every token's row, and the "
            "gradients reach qkv through them.")


def _misplaced(name: str, got: Tensor, qkv: Tensor, lo: int, HS: int) -> str:
    """What the first token whose `name` (B, S, HS) is wrong holds, read as positions of the rows of `qkv`, whose
    numbers are distinct and each says where it sits; the layout puts `name` at [lo:lo + HS] of each row."""
    B, S, width = qkv.shape
    got = got.detach().double()  # (B, S, HS)
    right = qkv.detach().double()[..., lo : lo + HS]  # (B, S, HS)
    wrong = ~torch.isclose(got, right).all(dim=-1)  # (B, S): the tokens whose part is wrong
    b, s = (int(i) for i in wrong.nonzero()[0]) if bool(wrong.any()) else (0, 0)
    token = f"token {s} of sequence {b}" if B > 1 else f"token {s}"
    shown = got[b, s]  # (HS,)
    # where each of its numbers sits in qkv: a token (b', s') and a position p in that token's row
    where = (qkv.detach().double()[..., None] == shown).nonzero()  # (HS matches, 4): b', s', p, index into shown
    if len(where) == HS and len(set(where[:, 3].tolist())) == HS:
        rows = {(int(r[0]), int(r[1])) for r in where}
        positions = [int(p) for _, _, p, _ in sorted(where.tolist(), key=lambda r: r[3])]
        if rows == {(b, s)}:
            held = f"the numbers at positions {positions} of its own row of qkv"
        elif len(rows) == 1:
            (b2, s2), = rows
            other = f"token {s2} of sequence {b2}" if B > 1 else f"token {s2}"
            held = f"the numbers at positions {positions} of the row of {other}"
        else:
            held = f"numbers from the rows of {len(rows)} different tokens"
    else:
        held = f"{fmt(shown)}, numbers that are not all from qkv"
    interleaved = close(got[b, s], right.new_tensor(range(lo // HS, width, 3)) + qkv.detach().double()[b, s, 0])
    tail = " Reshape the last axis to (3, HS), not (HS, 3), and unbind dim 2." if interleaved else ""
    return (f"{name} of {token} holds {held}, but the layout [q | k | v] puts {name} at positions "
            f"{list(range(lo, lo + HS))} of each token's row.{tail}")


# --- 02.2 -----------------------------------------------------------------------------------------------------------


def _layers(C: int, seed: int) -> tuple[nn.Linear, nn.Linear]:
    """Wqkv = nn.Linear(C, 3 * HS) and Wo = nn.Linear(HS, C), HS = C // 4, in dtype(), random from `seed`."""
    g = torch.Generator().manual_seed(seed)
    HS = C // 4
    Wqkv, Wo = nn.Linear(C, 3 * HS, dtype=dtype()), nn.Linear(HS, C, dtype=dtype())
    with torch.no_grad():
        for p in (*Wqkv.parameters(), *Wo.parameters()):
            p.copy_(torch.randn(p.shape, generator=g, dtype=dtype()))
    return Wqkv, Wo


def _steps(x: Tensor, Wqkv: nn.Linear, Wo: nn.Linear, mask: Tensor | None, *, scale: float | None = None,
           dim: int = -1, fill: float | None = None, interleaved: bool = False) -> Tensor:
    """The seven steps, or one of their usual mistakes: x (B, S, C) -> (B, S, C).

    mask: None or broadcasting to the scores (B, S, S_kv); it hides keys as masked_softmax does (a query that sees
    nothing gets zeros), or with `fill` the hidden scores are set to that number. scale: the divisor of q kᵀ
    (default √HS); dim: the axis of the softmax; interleaved: q, k, v read from the last axis as (HS, 3)."""
    HS = Wo.in_features
    qkv = Wqkv(x)  # (B, S, 3 * HS)
    q, k, v = qkv.unflatten(-1, (HS, 3)).unbind(-1) if interleaved else qkv.split(HS, dim=-1)  # each (B, S, HS)
    scores = q @ k.transpose(-2, -1) / (math.sqrt(HS) if scale is None else scale)  # (B, S, S_kv)
    if mask is None:
        weights = scores.softmax(dim=dim)
    elif fill is None:
        weights = masked_softmax(scores, mask)
    else:
        weights = scores.masked_fill(~mask, fill).softmax(dim=dim)
    return Wo(weights @ v)  # (B, S, C)


@grader("02.2")
def check_02_2(forward) -> str:
    """`forward(x, Wqkv, Wo, mask=None)` is single-head attention's output (B, S, C), mask a (B, S_kv) padding, with
    its gradients with respect to x and the weights."""
    g = torch.Generator().manual_seed(6)
    probes = torch.Generator().manual_seed(16)  # apart from g, so that the inputs do not depend on the probes
    gradients = []  # checked once every case's output is right: a wrong output has the more telling hint
    # (B, S, C) with HS = C // 4: no two of B, S, C, HS alike, so that a scale by the wrong size shows. Every size
    # runs without a mask first, so that an error that comes with the mask is the mask's.
    cases = [
        ((3, 5, 8), [None, [5, 2, 4]], False),
        ((2, 7, 12), [None, [7, 3]], False),
        ((4, 3, 20), [None, [3, 0, 1, 2]], False),  # sequence 1 is all padding: its queries see no key
        ((5, 2, 16), [None, [2, 1, 2, 2, 1]], True),  # scores beyond the range of e^x
    ]
    for (B, S, C), masks, extreme in cases:
        HS = C // 4
        Wqkv, Wo = _layers(C, seed=B * 100 + C)
        x = torch.randn(B, S, C, generator=g, dtype=dtype())  # (B, S, C)
        # the reference and every variant below, in float64 on copies, before the answer runs
        x64 = x.detach().double()  # (B, S, C)
        Wqkv64, Wo64 = (detached(W).double().requires_grad_(False) for W in (Wqkv, Wo))
        if extreme:  # the largest score 1.5 times the log of the dtype's largest number: e^score overflows
            q, k, _ = Wqkv64(x64).split(HS, dim=-1)  # each (B, S, HS)
            top = (q @ k.transpose(-2, -1) / math.sqrt(HS)).max().item()
            factor = math.sqrt(1.5 * math.log(torch.finfo(dtype()).max) / top)
            x = x * factor
            x64 = x.double()  # the very numbers the answer gets
        steps = functools.partial(_steps, x64, Wqkv64, Wo64)  # steps(mask, ...): the seven steps, or a mistake
        layer = SingleHeadAttention(C, attn_impl="explicit").double()  # its weights require grad: the reference's
        layer.load_state_dict({"Wqkv.weight": Wqkv64.weight, "Wqkv.bias": Wqkv64.bias, "Wo.weight": Wo64.weight,
                               "Wo.bias": Wo64.bias})
        weights64 = [layer.Wqkv.weight, layer.Wqkv.bias, layer.Wo.weight, layer.Wo.bias]
        for lengths in masks:
            mask = None if lengths is None else padding_mask(lengths, seq_len=S)  # (B, S_kv)
            m = None if mask is None else mask[:, None, :]  # (B, 1, S_kv): the keys hidden in every row
            what = (f"for x {(B, S, C)} (HS = {HS})" + ("" if mask is None else f" and padding lengths {lengths}")
                    + (f", scores up to {1.5 * math.log(torch.finfo(dtype()).max):.3g}" if extreme else ""))
            # the output and its gradients for a random probe, with respect to x and the four weights
            leaf64 = x64.clone().requires_grad_()
            expected = layer(leaf64, mask)  # (B, S, C)
            probe, expected_grads = _probed_gradients(expected, [leaf64, *weights64], probes)
            expected = expected.detach()
            leaf, given = requiring_grad(x)  # x in a graph, as the input of a layer is
            try:
                with warnings.catch_warnings():  # k.T on a batch warns that it is deprecated: the hint says why
                    warnings.filterwarnings("ignore", message=".*x\\.T.*", category=UserWarning)
                    got = call(forward, given, Wqkv, Wo, mask)
            except Exception as raised:
                error = _learner_error(raised, RuntimeError, TypeError)
                text = f"{what} your code raised {_said(error)}."
                if "invalid for input of size" in str(error):
                    raise Hint(f"{text} Take the sizes from x (B, S, _ = x.shape) and the head size from the "
                               "layers (Wo.in_features), not from the notebook's B, S and HS.") from None
                if mask is None and "NoneType" in str(error):
                    raise Hint(f"{text} mask is optional: apply it only when it is given (if mask is not "
                               "None: ...).") from None
                if mask is not None and isinstance(error, RuntimeError):
                    raise Hint(f"{text} Your code runs without a mask, so the padding mask is the trouble: it is "
                               "(B, S_kv), one row per sequence, and the scores are (B, S, S_kv). Spread it over "
                               "the query rows with mask[:, None, :], (B, 1, S_kv).") from None
                if isinstance(error, RuntimeError) and ("must match the size" in str(error) or "x.T" in str(error)):
                    raise Hint(f"{text} On a batch of keys (B, S, HS), k.T reverses all three axes, (HS, S, B), "
                               "and q @ k.T cannot line up the batches: use k.transpose(-2, -1), which swaps "
                               "the last two axes only.") from None
                raise
            if isinstance(got, tuple | list):
                raise Hint(f"return only the output (B, S, C), not a {type(got).__name__}: the weights are for "
                           "looking at, the layer's output is Wo(weights @ v).")
            got = expect_tensor(got, f"forward(...) {what}")
            if tuple(got.shape) == (B, S, HS):
                raise Hint(f"{what} the output has the head's width HS = {HS}: project it back to C = {C} with "
                           "Wo.")
            got = expect_shape(got, (B, S, C), f"forward(...) {what}")
            if close(got, expected):
                gradients.append((got, [leaf, *Wqkv.parameters(), *Wo.parameters()], expected_grads, probe,
                                  f"forward(...) {what}"))
                continue
            got = got.detach()  # its own dtype: `close` takes the tolerance of the less precise of the two
            sees = torch.ones(B, S, dtype=torch.bool) if mask is None else mask.any(-1, keepdim=True).expand(B, S)
            real = torch.ones(B, S, dtype=torch.bool) if mask is None else mask  # (B, S): real queries
            nan_rows = got.isnan().any(dim=-1)  # (B, S)
            if bool(nan_rows.any()):
                if bool((nan_rows & real).any()):
                    raise Hint(f"{what} the output of a real token is NaN: an exponential overflowed (e^89 is inf "
                               "in float32, e^710 in float64) and inf / inf is NaN. scores.softmax(dim=-1) "
                               "subtracts each row's largest score before the exponential: use it rather than "
                               "exp() and a sum.")
                if bool((nan_rows & sees).any()):
                    raise Hint(f"NaN in the output {what}: a padded query's row of scores is all -inf. A padding "
                               "mask (B, S_kv) hides keys, the columns: spread it over the rows with "
                               "mask[:, None, :], not mask[:, :, None], which hides whole query rows.")
                raise Hint(f"NaN in the output {what}: a sequence of padding only has queries that see no key, "
                           "and the softmax of a row of -inf is 0 / 0. Such a query gets zero weights (the "
                           "masked_softmax of notebook 00 does it), so its output is Wo's bias, "
                           f"{fmt(Wo64.bias[:3])}...")
            expect_precision(got, expected, f"forward(...) {what}")  # before the mistakes, none of which it is
            for divisor, why in [
                (1.0, f"you forgot to scale the scores by 1/√HS (here 1/√{HS}) before the softmax."),
                (math.sqrt(C), f"you scaled the scores by 1/√C = 1/√{C}: they are dot products of the head's "
                               f"vectors, HS = {HS} numbers each, so the scale is 1/√HS = 1/√{HS}."),
                (HS, f"you divided the scores by HS = {HS}; the scale is 1/√HS = 1/{math.sqrt(HS):.3g}."),
                (math.sqrt(B), f"you scaled by 1/√{B}, the size of axis 0 of q, the batch B; HS is the size of "
                               f"the last axis, q.size(-1) = {HS}."),
                (math.sqrt(S), f"you scaled by 1/√{S}, the size of axis 1 of q, the tokens S; HS is the size of "
                               f"the last axis, q.size(-1) = {HS}."),
            ]:
                if close(got, steps(m, scale=divisor)):
                    raise Hint(f"{what} {why}")
            if mask is None and close(got, steps(m, dim=-2)):
                raise Hint("the softmax runs over the wrong axis: it must run over the keys, the last axis "
                           "(dim=-1), so that each query's weights sum to 1.")
            if close(got, steps(m, interleaved=True)):
                raise Hint("you read q, k and v interleaved, as (HS, 3): the layout of Wqkv's output is "
                           "[q | k | v], three consecutive blocks of HS; reshape to (B, S, 3, HS) and unbind "
                           "dim 2.")
            if mask is not None:
                unmasked = steps(None)  # (B, S, C)
                if close(got, unmasked):
                    raise Hint("the output does not change with the mask: the padded keys must get weight 0 "
                               "(set their scores to -inf before the softmax).")
                if close(got[real], unmasked[real]):
                    raise Hint("you hid the padded queries (rows) instead of the padded keys (columns): the "
                               "real queries still read the padding. A padding mask (B, S_kv) hides keys: spread "
                               "it over the rows with mask[:, None, :], not mask[:, :, None].")
                if close(got, steps(m, fill=0.0)):
                    raise Hint(f"{what} the padded keys still get weight: multiplying the scores by the mask "
                               "gives them a score of 0, and e^0 is not 0; a score of 0 is not hidden. Set "
                               "their scores to -inf (masked_fill(~mask, float('-inf'))).")
                if close(got[sees], expected[sees]):
                    uniform = close(got, steps(m, fill=-1e9))  # equal weights over the padding
                    why = (" Filling with a large negative number (-1e9) instead of -inf gives such a row equal "
                           "scores, so an average of the padding: zero the weights of a row that sees nothing "
                           "(masked_softmax does)." if uniform else "")
                    raise Hint(f"{what} the sequences with real tokens are right, but a sequence of padding only "
                               "is not: its queries see no key, so they get zero weights and their output is Wo's "
                               f"bias, {fmt(Wo64.bias[:3])}...; yours begins {fmt(got[~sees][0, :3])}.{why}")
            worst = (got.double() - expected).abs().nan_to_num(float("inf")).max().item()
            raise Hint(f"{what} the output is off by up to {worst:.3g}. Check each step against the notebook: "
                       "split [q | k | v], q @ kᵀ / √HS, softmax over the last axis, @ v, Wo.")
    for checked in gradients:
        _expect_gradients(*checked)
    return ("your seven steps equal SingleHeadAttention with and without a padding mask, for any sizes, a sequence "
            "of padding only, and scores beyond the range of e^x, and so do their gradients.")


# --- 02.3 -----------------------------------------------------------------------------------------------------------


def _triangle(S: int, S_kv: int, diagonal: int) -> Tensor:
    """(S, S_kv) bool, True where j <= i + diagonal; the causal rule is diagonal = S_kv - S."""
    return torch.ones(S, S_kv, dtype=torch.bool).tril(diagonal=diagonal)


def _path(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, bias: Tensor | None, factor: float, *,
          bias_scaled: bool = False, fill: float | None = None) -> Tensor:
    """The context of softmax(q kᵀ · factor + bias) v with `mask` (a query that sees nothing gets zeros), or one of
    the usual mistakes: `bias_scaled`, (q kᵀ + bias) · factor; `fill`, the hidden scores set to that number."""
    scores = q @ k.transpose(-2, -1)  # (..., S, S_kv)
    if bias is None:
        scores = scores * factor
    else:
        scores = (scores + bias) * factor if bias_scaled else scores * factor + bias
    if mask is None:
        weights = scores.softmax(dim=-1)
    elif fill is None:
        weights = masked_softmax(scores, mask)
    else:
        weights = scores.masked_fill(~mask, fill).softmax(dim=-1)
    context = weights @ v  # (..., S, HS)
    if mask is not None and fill is None:
        context = context.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return context


def _cases_02_3() -> list[tuple[str, Tensor, Tensor, Tensor, dict]]:
    """(what, q, k, v, the keywords that are not the default) for the path of exercise 02.3, in dtype()."""
    g = torch.Generator().manual_seed(7)

    def qkv(lead: tuple[int, ...], S: int, S_kv: int, HS: int) -> tuple[Tensor, Tensor, Tensor]:
        q = torch.randn(*lead, S, HS, generator=g, dtype=dtype())  # (..., S, HS)
        k, v = torch.randn(2, *lead, S_kv, HS, generator=g, dtype=dtype()).unbind(0)  # each (..., S_kv, HS)
        return q, k, v

    cases = []
    # B = 2, S = 3 queries after S_kv = 5 keys, HS = 4
    q, k, v = qkv((2,), 3, 5, 4)
    blind = torch.ones(2, 3, 5, dtype=torch.bool)  # (B, S, S_kv)
    blind[0, 2] = False  # query 2 of sequence 0 sees nothing
    some = torch.rand(2, 3, 5, generator=g) > 0.4  # (B, S, S_kv)
    some[:, :, 0] = True  # every query sees key 0, so that only the causal rule leaves a row blind
    alibi = -0.5 * torch.arange(5, 0, -1, dtype=dtype()).expand(1, 3, 5)  # (1, S, S_kv): a penalty by distance
    cases += [
        ("no mask, S = 3 queries and S_kv = 5 keys", q, k, v, {}),
        ("a padding mask (B, 1, S_kv) whose sequence 1 is all padding", q, k, v,
         {"mask": padding_mask([4, 0], seq_len=5)[:, None, :]}),
        ("a mask (B, S, S_kv) in which a query sees no key", q, k, v, {"mask": blind}),
        ("is_causal=True, S = 3 queries after S_kv = 5 keys", q, k, v, {"is_causal": True}),
        ("a mask (B, S, S_kv) and is_causal=True", q, k, v, {"mask": some, "is_causal": True}),
        ("a bias (1, S, S_kv)", q, k, v, {"bias": alibi}),
        ("scale=0.25", q, k, v, {"scale": 0.25}),
        ("a bias and scale=0.25", q, k, v, {"bias": alibi, "scale": 0.25}),
    ]
    # B = 3, S = 6 queries and only S_kv = 4 keys, HS = 2: the causal rule leaves queries 0 and 1 blind
    q, k, v = qkv((3,), 6, 4, 2)
    cases += [
        ("no mask, S = 6 queries and S_kv = 4 keys", q, k, v, {}),
        ("is_causal=True, S = 6 queries and S_kv = 4 keys (queries 0 and 1 see no key)", q, k, v,
         {"is_causal": True}),
        ("a padding mask (B, 1, S_kv) and is_causal=True, S = 6 and S_kv = 4", q, k, v,
         {"mask": padding_mask([4, 3, 1])[:, None, :], "is_causal": True}),
    ]
    # the heads of notebook 03: q (B, NH, S, HS) = (2, 3, 4, 5), k and v (2, 3, 7, 5)
    q, k, v = qkv((2, 3), 4, 7, 5)
    slopes = torch.tensor([0.25, 0.5, 1.0], dtype=dtype())[:, None, None]  # (NH, 1, 1)
    per_head = -slopes * torch.arange(7, dtype=dtype())  # (NH, 1, S_kv): a penalty by key position, one per head
    cases += [
        ("q (B, NH, S, HS) = (2, 3, 4, 5) and k, v (2, 3, 7, 5)", q, k, v, {}),
        ("q (B, NH, S, HS) = (2, 3, 4, 5), a padding mask (B, 1, 1, S_kv), is_causal=True and a bias per head", q,
         k, v, {"mask": padding_mask([7, 2], seq_len=7)[:, None, None, :], "is_causal": True,
                "bias": per_head[None]}),
    ]
    # scores beyond the range of e^x: the largest 1.5 times the log of the dtype's largest number
    q, k, v = qkv((4,), 2, 3, 6)
    top = (q.double() @ k.double().transpose(-2, -1) / math.sqrt(6)).max().item()
    factor = math.sqrt(1.5 * math.log(torch.finfo(dtype()).max) / top)
    cases.append((f"scores up to {1.5 * math.log(torch.finfo(dtype()).max):.3g} and a padding mask (B, 1, S_kv)",
                  q * factor, k * factor, v, {"mask": padding_mask([3, 2, 1, 3])[:, None, :]}))
    return cases


@grader("02.3")
def check_02_3(path) -> str:
    """`path(q, k, v, *, mask, bias, scale, dropout_p, is_causal)` returns (context, weights or None) like the
    explicit path of `attend`, and the context's gradients with respect to q, k, v and the bias are right."""
    probes = torch.Generator().manual_seed(9)
    gradients = []  # checked once every case's output is right: a wrong output has the more telling hint
    for what, q, k, v, case in _cases_02_3():
        args = {"mask": None, "bias": None, "scale": None, "dropout_p": 0.0, "is_causal": False} | case
        mask, bias, scale, is_causal = args["mask"], args["bias"], args["scale"], args["is_causal"]
        S, S_kv, HS = q.size(-2), k.size(-2), q.size(-1)
        # the reference and every variant below, in float64 on copies, before the answer runs
        q64, k64, v64 = (t.detach().double() for t in (q, k, v))
        bias64 = None if bias is None else bias.detach().double()
        inputs = [q, k, v] + ([] if bias is None else [bias])  # what the gradients are taken for
        leaves64 = [t.detach().double().requires_grad_() for t in inputs]
        expected, expected_w = explicit_attention(*leaves64[:3], mask, 0.0, is_causal,
                                                  bias=None if bias is None else leaves64[3], scale=scale)
        probe, expected_grads = _probed_gradients(expected, leaves64, probes)  # the context's, for a random probe
        expected, expected_w = expected.detach(), expected_w.detach()
        leaves, given = zip(*(requiring_grad(t) for t in inputs), strict=True)  # inputs in a graph, as in a layer
        given_args = {n: a.clone() if isinstance(a, Tensor) else a for n, a in args.items()}
        if bias is not None:
            given_args["bias"] = given[3]
        try:
            answer = call(path, *given[:3], **given_args)
        except Exception as raised:
            error = _learner_error(raised, RuntimeError)
            if q.ndim == 4:
                raise Hint(f"with {what} your code raised {_said(error)}. It runs on (B, S, HS), but a path "
                           "gets q (..., S, HS) with any leading axes, (B, NH, S, HS) for the heads of notebook 03: "
                           "write the einsum with '...' for them, torch.einsum('...id,...jd->...ij', q, k).") from None
            if is_causal:
                raise Hint(f"with {what} your code raised {_said(error)}. Your code runs without is_causal, "
                           f"so the triangle is the trouble: it is (S, S_kv) = {(S, S_kv)}, not (S, S), "
                           "torch.ones(S, S_kv, dtype=torch.bool).tril(diagonal=S_kv - S).") from None
            raise
        if not isinstance(answer, tuple | list) or len(answer) != 2:
            raise Hint("a path returns a pair (context, weights or None), as explicit_attention does.")
        context_shape, weights_shape = (*q.shape[:-1], HS), (*q.shape[:-1], S_kv)
        if all(isinstance(t, Tensor) for t in answer):
            shapes = [tuple(expect_tensor(t, f"the {name} with {what}").shape)
                      for t, name in zip(answer, ("context", "weights"), strict=True)]
            if shapes == [weights_shape, context_shape]:
                raise Hint(f"with {what} you returned (weights {weights_shape}, context {context_shape}): a path "
                           "returns (context, weights), the context first.")
        context = expect_shape(answer[0], context_shape, f"the context with {what}")
        if close(context, expected):
            if answer[1] is not None:
                expect_close(answer[1], expected_w, f"the weights with {what}",
                             why="The weights are the softmax over the keys, (..., S, S_kv), before any dropout; a "
                                 "query that sees no key gets zeros.")
            gradients.append((context, list(leaves), expected_grads, probe, f"the context with {what}"))
            continue
        context = context.detach()  # its own dtype: `close` takes the tolerance of the less precise of the two
        # the keys each query may see: the mask AND the causal triangle aligned at the end of the keys
        right = _triangle(S, S_kv, S_kv - S) if is_causal else None  # (S, S_kv)
        visible = mask if right is None else right if mask is None else mask & right
        sees = (torch.ones(*context_shape[:-1], 1, dtype=torch.bool) if visible is None
                else visible.any(dim=-1, keepdim=True).expand(*context_shape[:-1], 1))  # (..., S, 1)
        if bool(context.isnan().any()):
            if bool((context.isnan() & sees).any()):
                raise Hint(f"NaN in the context with {what}, in a query that sees some key: an exponential "
                           "overflowed (e^89 is inf in float32, e^710 in float64) and inf / inf is NaN. "
                           "scores.softmax(dim=-1) subtracts each row's largest score first: use it (or "
                           "masked_softmax) rather than exp() and a sum.")
            raise Hint(f"NaN in the context with {what}: a query that sees no key must get zero weights and a zero "
                       "context (give its row finite scores before the softmax, then zero its weights; "
                       "masked_softmax does both).")
        expect_precision(context, expected, f"the context with {what}")  # before the mistakes, none of which it is
        factor = 1 / math.sqrt(HS) if scale is None else scale

        # ref(mask=..., bias=..., factor=..., a mistake=...): the context with one thing changed
        ref = functools.partial(_path, q64, k64, v64, mask=visible, bias=bias64, factor=factor)
        variants: list[tuple[Tensor, str]] = []  # (the context of a usual mistake, the hint that names it)
        if is_causal:
            top_left, flipped = _triangle(S, S_kv, 0), _triangle(S, S_kv, S - S_kv)  # (S, S_kv) each
            variants += [
                (ref(mask=top_left if mask is None else mask & top_left),
                 f"you aligned the triangle at the top left, tril(): query i sees keys 0..i. The S = {S} queries are "
                 f"the last S of the S_kv = {S_kv} positions, so query i sees keys 0..S_kv - S + i, "
                 "tril(diagonal=S_kv - S), as causal_mask(S, S_kv)."),
                (ref(mask=flipped if mask is None else mask & flipped),
                 f"you shifted the triangle by S - S_kv = {S - S_kv}; the S queries are the last S of the S_kv keys, "
                 f"so query i sees keys 0..S_kv - S + i: tril(diagonal=S_kv - S), diagonal {S_kv - S}, as "
                 "causal_mask(S, S_kv)."),
                (ref(mask=mask),
                 "your context is the one without the triangle, but is_causal=True must hide the future: query i "
                 "may see keys 0..S_kv - S + i only, and with a mask too (AND the two)."),
            ]
            if mask is not None:
                variants.append((ref(mask=mask | right), "when both a mask and is_causal are given, a key is visible "
                                 "only where both allow it: combine them with & (AND), not | (OR)."))
        if mask is not None:
            variants += [
                (ref(mask=right), "hide the keys where the mask is False: your context is the one without the mask."),
                (ref(mask=~mask if right is None else ~mask & right),
                 "True must mean 'may attend': you hid the visible keys and kept the hidden ones."),
                (ref(fill=-1e9),  # differs from the right context in the rows that see no key only
                 "a query that sees no key must get zero weights and a zero context, not equal weights over the "
                 "hidden keys: filling with a large negative number (-1e9) gives such a row equal scores. Zero its "
                 "weights after the softmax (masked_softmax does)."),
            ]
        if bias is not None:
            variants += [
                (ref(bias=None), "you left out the bias: it is added to the scores, after the scaling and before "
                                 "the softmax."),
                (ref(bias_scaled=True), "you scaled the bias with the scores, (q kᵀ + bias) · scale: add it after "
                                        "the scaling, q kᵀ · scale + bias."),
            ]
        if scale is not None:
            variants += [
                (ref(factor=1 / math.sqrt(HS)), f"you used 1/√HS = {1 / math.sqrt(HS):.3g}, but a given scale "
                                                "replaces 1/√HS: multiply q kᵀ by it (only scale=None means 1/√HS)."),
                (ref(factor=1 / scale), f"you divided by scale={scale}: scale is the factor that multiplies q kᵀ "
                                        "(1/√HS when it is None)."),
            ]
        else:
            variants.append((ref(factor=1.0), f"you forgot to scale: scale=None means 1/√HS (here 1/√{HS} = "
                                              f"{1 / math.sqrt(HS):.3g})."))
        for variant, why in variants:  # the context is not the right one (checked above), so a match is the mistake
            if close(context, variant):
                raise Hint(f"with {what}, {why}")
        expect_close(context, expected, f"the context with {what}",
                     why="Compare your scores, weights and context with explicit_attention step by step.")
    for checked in gradients:
        _expect_gradients(*checked)
    _in_a_layer(path)
    return ("your path follows the contract (mask, bias, scale, the causal rule at the end of the keys both ways, "
            "any leading axes, zeros for a blind query, scores beyond e^x's range), with the right gradients, and "
            "runs inside a layer.")


def _in_a_layer(path) -> None:
    """Register `path` for a moment and run SingleHeadAttention and attend on it; the registry ends as it was."""
    g = torch.Generator().manual_seed(8)
    B, S, C = 3, 5, 8  # HS = 2
    layer = SingleHeadAttention(C, attn_impl="explicit").to(dtype())
    x = torch.randn(B, S, C, generator=g, dtype=dtype())  # (B, S, C)
    pad = padding_mask([5, 2, 0])  # (B, S_kv): sequence 2 is all padding
    q = torch.randn(2, 4, 3, 6, generator=g, dtype=dtype())  # (B, NH, S, HS) = (2, 4, 3, 6)
    k, v = torch.randn(2, 2, 4, 5, 6, generator=g, dtype=dtype()).unbind(0)  # each (B, NH, S_kv, HS), S_kv = 5
    keys = padding_mask([5, 1])  # (B, S_kv)
    with torch.no_grad():  # the references, before the path runs
        expected = detached(layer)(x, pad)  # (B, S, C)
        expected_attend = attend(q, k, v, mask=keys, is_causal=True, impl="explicit")[0]  # (B, NH, S, HS)
    name = "exercise-02.3"
    before = functional._ATTENTION_IMPLS.get(name), name in functional._WITHOUT_DROPOUT  # restored in every outcome
    try:
        register_attention_impl(name, path)
        layer.attn_impl = name
        with torch.no_grad():
            mine = call(layer, x, pad)  # (B, S, C)
            expect_close(mine, expected, "SingleHeadAttention's output on your path, with a sequence of padding only")
            mine = call(attend, q, k, v, mask=keys, is_causal=True, impl=name)[0]
            expect_close(mine, expected_attend, "attend's context on your path, with a (B, S_kv) padding mask and "
                         "is_causal=True")
    finally:
        impl, without_dropout = before
        if impl is None:
            functional._ATTENTION_IMPLS.pop(name, None)
        else:
            functional._ATTENTION_IMPLS[name] = impl
        if without_dropout:
            functional._WITHOUT_DROPOUT.add(name)
