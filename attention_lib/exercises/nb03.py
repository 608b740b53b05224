"""Graders for the exercises of notebook 03 (multi-head bidirectional attention)."""

from __future__ import annotations

import contextlib
import inspect
import math
from collections.abc import Callable, Iterator
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..bidirectional import BidirectionalAttention
from ._grading import (Hint, call, close, detached, dtype, expect_close, expect_precision, expect_shape,
                       expect_tensor, fmt, grader, requiring_grad)
from .nb00 import _expect_gradients, _probed_gradients

__all__ = ["check_03_1", "check_03_2", "check_03_3"]


def _interleaved(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """q, k, v (B, NH, S, HS) -> (B, S, 3C) laid out [q0 k0 v0 | q1 k1 v1 | ...]."""
    B, NH, S, HS = q.shape
    return torch.stack([q, k, v], dim=3).transpose(1, 2).reshape(B, S, 3 * NH * HS)  # (B, S, NH, 3, HS) flattened


@grader("03.1")
def check_03_1(split_interleaved) -> str:
    """split_interleaved(qkv (B, S, 3C) laid out [q0 k0 v0 | q1 k1 v1 | ...], num_heads) -> q, k, v (B, NH, S, HS),
    through which the gradients reach qkv."""
    g = torch.Generator().manual_seed(1)
    probes = torch.Generator().manual_seed(11)  # apart from g, so that the inputs do not depend on the probes
    gradients = []  # checked once every case's output is right: a wrong output has the more telling hint
    # no two sizes alike (nor 3, the number of parts), so that an axis taken for another shows in the shape
    for B, S, NH, HS in [(2, 5, 4, 6), (4, 6, 2, 5), (1, 7, 5, 2)]:
        q, k, v = torch.randn(3, B, NH, S, HS, generator=g, dtype=dtype()).unbind(0)  # each (B, NH, S, HS)
        qkv = _interleaved(q, k, v)  # (B, S, 3C)
        # the gradient of the three parts, side by side, for a random probe, in float64 before the answer runs
        leaf64 = qkv.detach().double().requires_grad_()  # (B, S, 3C)
        parts64 = leaf64.reshape(B, S, NH, 3, HS).permute(3, 0, 2, 1, 4)  # (3, B, NH, S, HS)
        probe, (expected_grad,) = _probed_gradients(parts64, [leaf64], probes)  # (3, B, NH, S, HS), (B, S, 3C)
        leaf, given = requiring_grad(qkv)  # qkv in a graph, as the output of Wqkv is
        got = call(split_interleaved, given, NH)
        if isinstance(got, Tensor) and not got.is_nested and got.ndim == 5 and got.shape[0] == 3:
            got = tuple(got.unbind(0))  # a stacked (3, B, NH, S, HS) unpacks into q, k, v as well
        if not isinstance(got, tuple | list) or len(got) != 3:
            raise Hint("return three tensors, q, k and v (e.g. a tuple, or the result of unbind(0)).")
        got = [expect_tensor(t, name) for t, name in zip(got, "qkv", strict=True)]
        if all(tuple(t.shape) == (B, S, NH, HS) for t in got):
            raise Hint(f"q, k and v should be (B, NH, S, HS) = {(B, NH, S, HS)}, got (B, S, NH, HS) = "
                       f"{(B, S, NH, HS)}: the heads must come before the sequence, so that each head is one "
                       "(S, HS) problem. Move them with permute (or transpose(1, 2)).")
        got = [expect_shape(t, (B, NH, S, HS), name) for t, name in zip(got, "qkv", strict=True)]
        thirds = qkv.reshape(B, S, 3, NH, HS).permute(2, 0, 3, 1, 4)  # the main path's [q | k | v] reading
        if all(close(t, o) for t, o in zip(got, thirds, strict=True)):
            raise Hint("that reads the [q | k | v] layout of the main path. Here each head's q, k and v sit side by "
                       "side: the last dimension is (head, part, column), so reshape(B, S, NH, 3, HS).")
        if close(got[0], k) or close(got[0], v):
            raise Hint("the parts come in the order q, k, v inside each head: q is part 0, k part 1, v part 2.")
        for t, want, name in zip(got, (q, k, v), "qkv", strict=True):
            expect_close(t, want, name, why=f"For B, S, NH, HS = {B, S, NH, HS} the last dimension of qkv is "
                         "(head, part, column), HS columns per part: reshape to (B, S, NH, 3, HS), then move the part "
                         "first and the heads before the sequence. Compare q[0, 1, 0] with qkv[0, 0, 3 * HS:4 * HS].")
        # the three parts come from one graph: their gradient is taken at once, through the three stacked
        gradients.append((torch.stack(got), [leaf], [expected_grad], probe, f"(q, k, v) for B, S, NH, HS = "
                          f"{B, S, NH, HS}"))
    for checked in gradients:
        _expect_gradients(*checked)
    return ("q, k and v of every head, read from the interleaved layout, for any B, S, NH and HS, and the gradients "
            "reach qkv through them.")


def _multi_head(x: Tensor, Wqkv: nn.Module, Wo: nn.Module | None, num_heads: int, *, split: str = "right",
                scale: str = "head", softmax_dim: int = -1, merge: str = "right") -> Tensor:
    """The reference (and its usual mistakes): multi-head attention from a fused Wqkv, maths written out, in float64.

    split: "right" reads [q | k | v] as (part, head, column), then (B, NH, S, HS); "interleaved" reads 03.1's layout
    (head, part, column); "no_transpose" reshapes each (B, S, C) part straight to (B, NH, S, HS); "heads_last" keeps
    (B, S, NH, HS), so that the heads attend to one another. scale: "head" √HS, "hidden" √C, "none". merge: "right"
    transposes to (B, S, NH, HS) before the reshape; "no_transpose" does not. Wo None: the output of the merge."""
    B, S, C = x.shape
    HS = C // num_heads
    qkv = Wqkv(x).double()  # (B, S, 3C)
    if split == "interleaved":
        q, k, v = qkv.reshape(B, S, num_heads, 3, HS).permute(3, 0, 2, 1, 4)  # 3 x (B, NH, S, HS)
    elif split == "no_transpose":
        q, k, v = (t.reshape(B, num_heads, S, HS) for t in qkv.chunk(3, dim=-1))  # tokens and heads mixed up
    elif split == "heads_last":
        q, k, v = qkv.reshape(B, S, 3, num_heads, HS).permute(2, 0, 1, 3, 4)  # 3 x (B, S, NH, HS)
    else:
        q, k, v = qkv.reshape(B, S, 3, num_heads, HS).permute(2, 0, 3, 1, 4)  # 3 x (B, NH, S, HS)
    divisor = {"head": math.sqrt(HS), "hidden": math.sqrt(C), "none": 1.0}[scale]
    context = (q @ k.transpose(-2, -1) / divisor).softmax(dim=softmax_dim) @ v  # (B, NH, S, HS) (or (B, S, NH, HS))
    if split == "heads_last":
        context = context.transpose(1, 2)  # (B, NH, S, HS), so that the merge below reads it as usual
    merged = context.transpose(1, 2) if merge == "right" else context  # (B, S, NH, HS) or (B, NH, S, HS)
    merged = merged.reshape(B, S, C)  # (B, S, C)
    if Wo is None:
        return merged
    return F.linear(merged, Wo.weight.double(), None if Wo.bias is None else Wo.bias.double())  # (B, S, C)


# what a mistake in multi-head attention computes, and the hint it gets (tried in this order)
_MISTAKES_03_2: list[tuple[dict, str]] = [
    (dict(scale="none"), "the scores are not scaled: divide q·kᵀ by √HS, the square root of the head size, before the "
                         "softmax."),
    (dict(scale="hidden"), "the scores are divided by √C; divide by √HS, the head size, the width of the vectors "
                           "whose dot product forms a score."),
    (dict(merge="no_transpose"), "the heads were merged without the transpose: context is (B, NH, S, HS), and "
                                 "reshape(B, S, C) on it puts chunks of one head's sequence in a token's row. "
                                 "transpose(1, 2) first, to (B, S, NH, HS), then reshape."),
    (dict(split="no_transpose"), "the heads were split without the transpose: reshape(B, NH, S, HS) straight from "
                                 "(B, S, C) cuts one head's sequence out of several tokens. reshape(B, S, NH, HS) "
                                 "first, then transpose(1, 2) (or reshape(B, S, 3, NH, HS) and "
                                 "permute(2, 0, 3, 1, 4))."),
    (dict(split="heads_last"), "q, k and v are (B, S, NH, HS), so each token's heads attend to one another instead "
                               "of each head's tokens: the heads must come before the sequence, (B, NH, S, HS), "
                               "permute(2, 0, 3, 1, 4) after reshape(B, S, 3, NH, HS)."),
    (dict(split="interleaved"), "that reads the interleaved layout of exercise 03.1, (head, part, column). Wqkv here "
                                "is laid out [q | k | v], as in this notebook: reshape(B, S, 3, NH, HS)."),
    (dict(softmax_dim=-2), "the softmax runs over the queries: it must run over the keys, the last axis of the scores "
                           "(B, NH, S, S), so that each query's weights sum to 1."),
    (dict(Wo=None), "the heads are merged but Wo is missing: the output projection mixes the concatenated heads, "
                    "return Wo(merged)."),
]


@contextlib.contextmanager
def _written_out(fn: Callable) -> Iterator[None]:
    """Inside the block F.scaled_dot_product_attention and F.multi_head_attention_forward (under whatever name
    torch.nn.functional or `fn`'s module holds them), nn.MultiheadAttention and every layer of attention_lib refuse to
    run: the exercise asks for the maths written out. Everything is put back as it was however the block ends."""
    originals = {id(f): f for f in (F.scaled_dot_product_attention, F.multi_head_attention_forward)}

    def refuse(*args, **kwargs):
        raise Hint("write the attention out (scores, softmax, weighted sum) instead of calling "
                   "F.scaled_dot_product_attention, nn.MultiheadAttention (or its F.multi_head_attention_forward) "
                   "or a layer of attention_lib.")

    def refuse_layers(module, args):
        if type(module).__module__.startswith("attention_lib.") or isinstance(module, nn.MultiheadAttention):
            refuse()

    spaces = [vars(F), getattr(fn, "__globals__", {})]
    found = [(space, name, value) for space in spaces for name, value in list(space.items()) if id(value) in originals]
    handle = nn.modules.module.register_module_forward_pre_hook(refuse_layers)
    try:
        for space, name, _ in found:
            space[name] = refuse
        yield
    finally:
        handle.remove()
        for space, name, value in found:
            space[name] = value


def _steep(Wqkv: nn.Linear, num_heads: int, shift: float) -> None:
    """Add `shift` to every score of every head, the same for every key of a row, in place: coordinate 0 of each head's
    q and k becomes the constant √(shift·√HS), so that q·k/√HS grows by `shift` and the softmax does not change."""
    C = Wqkv.in_features
    HS = C // num_heads
    big = math.sqrt(shift * math.sqrt(HS))
    with torch.no_grad():
        for h in range(num_heads):
            for row in (h * HS, C + h * HS):  # coordinate 0 of head h in the q third, then in the k third
                Wqkv.weight[row] = 0.0
                Wqkv.bias[row] = big


@grader("03.2")
def check_03_2(multi_head_attention) -> str:
    """multi_head_attention(x (B, S, C), Wqkv, Wo, num_heads) -> (B, S, C), with the maths written out, and its
    gradients with respect to x and the weights."""
    probes = torch.Generator().manual_seed(12)  # its own: the inputs come from the grader's seed 0, as before
    gradients = []  # checked once every case's output is right: a wrong output has the more telling hint
    # e^score overflows above 88.7 in float32 and 709.8 in float64: scores shifted beyond that, on every key alike
    shift = 800.0 if dtype() == torch.float64 else 120.0
    cases = [  # B, S, C, NH (HS = C // NH): no two sizes alike, so that an axis taken for another shows
        (2, 5, 12, 3, 0.0, "x (2, 5, 12), 3 heads of 4"),
        (3, 4, 10, 5, 0.0, "x (3, 4, 10), 5 heads of 2"),
        (4, 7, 6, 2, 0.0, "x (4, 7, 6), 2 heads of 3"),
        (2, 5, 12, 3, shift, f"every score {shift:g} higher (e^score overflows in {dtype()})"),
    ]
    for B, S, C, NH, steep, what in cases:
        Wqkv, Wo = nn.Linear(C, 3 * C).to(dtype()), nn.Linear(C, C).to(dtype())
        if steep:
            _steep(Wqkv, NH, steep)
        x = torch.randn(B, S, C, dtype=dtype())  # (B, S, C)
        ref_Wqkv, ref_Wo = detached(Wqkv), detached(Wo)  # the reference, before the answer runs
        # the output and its gradients for a random probe, with respect to x and the four weights, in float64
        leaf64, Wqkv64, Wo64 = x.detach().double().requires_grad_(), detached(Wqkv).double(), detached(Wo).double()
        expected = _multi_head(leaf64, Wqkv64, Wo64, NH)  # (B, S, C)
        probe, expected_grads = _probed_gradients(expected, [leaf64, *Wqkv64.parameters(), *Wo64.parameters()],
                                                  probes)
        expected = expected.detach()
        with torch.no_grad():
            mistakes = []  # (what the mistake computes, its hint)
            for kw, hint in _MISTAKES_03_2:
                kw = dict(kw)
                mistakes.append((_multi_head(x, ref_Wqkv, kw.pop("Wo", ref_Wo), NH, **kw), hint))
        leaf, given = requiring_grad(x)  # x in a graph, as the input of a layer is
        with _written_out(multi_head_attention):
            got = call(multi_head_attention, given, Wqkv, Wo, NH)
        if isinstance(got, tuple):
            raise Hint("return only the output (B, S, C), not a tuple.")
        got = expect_shape(got, (B, S, C), f"the output for {what}")
        if close(got, expected):
            gradients.append((got, [leaf, *Wqkv.parameters(), *Wo.parameters()], expected_grads, probe,
                              f"the output for {what}"))
            continue
        if bool(got.isnan().any() | got.isinf().any()):
            raise Hint(f"the output has NaN or inf for {what}: an exponential overflowed (e^score is inf above 88.7 "
                       "in float32, 709.8 in float64), and inf / inf is NaN. Take scores.softmax(dim=-1): it "
                       "subtracts each row's largest score first, which changes nothing in the weights.")
        expect_precision(got, expected, f"the output for {what}")  # before the mistakes, none of which it is
        for wrong, hint in mistakes:
            if close(got, wrong):
                raise Hint(hint)
        expect_close(got, expected, f"the output for {what}", why="Check each step's shape against the notebook's "
                     "forward pass: (B, S, 3C) -> (B, S, 3, NH, HS) -> 3 x (B, NH, S, HS), scores / √HS, softmax over "
                     "the last axis, (B, NH, S, HS) -> (B, S, NH, HS) -> (B, S, C), then Wo.")
    for checked in gradients:
        _expect_gradients(*checked)
    return ("your multi-head attention equals BidirectionalAttention's explicit path, also when e^score overflows, "
            "and so do its gradients.")


class _MhaCall(NamedTuple):
    """How the answer called nn.MultiheadAttention: what tells its mistakes apart when the outputs alone do not."""

    need_weights: bool
    grad: bool  # autograd on
    training: bool
    attn_mask: bool  # given
    key_padding_mask: bool  # given
    float_padding: bool  # a float key_padding_mask that is not additive (values other than 0 and -inf)
    large_negative: bool  # ... whose hiding values are large and negative, such as -1e9: additive in all but name


@grader("03.3")
def check_03_3(torch_attention) -> str:
    """torch_attention(mha, x (B, S, C), mask (B, S), True = real) -> (B, S, C), as our layer computes it: a query
    that sees no key (a sequence of only padding) gets zero weights, a zero context, so Wo's bias as its output; and
    the gradients with respect to x and mha's weights are finite and right."""
    probes = torch.Generator().manual_seed(13)  # its own: the inputs come from the grader's seed 0, as before
    gradients = []  # checked once every case's output is right: a wrong output has the more telling hint
    # (S, C, NH, lengths), B = len(lengths): no two of B, S, NH, HS, C alike, and in each case a sequence of only
    # padding, whose queries see no key, beside full and partly padded ones
    for S, C, NH, lengths in [(5, 8, 2, [5, 2, 0]), (6, 15, 3, [0, 6, 1, 4]), (7, 12, 4, [3, 0])]:
        B = len(lengths)
        mha = nn.MultiheadAttention(C, NH, batch_first=True).to(dtype()).eval()
        with torch.no_grad():  # its biases start at 0: random ones, so that Wo's bias shows where it is the output
            mha.in_proj_bias.normal_()
            mha.out_proj.bias.normal_()
        x = torch.randn(B, S, C, dtype=dtype())  # (B, S, C)
        mask = torch.arange(S)[None, :] < torch.tensor(lengths)[:, None]  # (B, S): True = real token
        seen = mask.any(dim=-1)  # (B,): the sequences with a real token
        theirs = detached(mha)  # the references, before the answer runs
        with torch.no_grad():
            expected = BidirectionalAttention.from_torch(theirs)(x, mask)  # (B, S, C): what our layer computes
        with torch.enable_grad():  # off nn.MultiheadAttention's fast path, with need_weights=False: no NaN
            not_inverted = theirs(x, x, x, key_padding_mask=mask, need_weights=False)[0].detach()  # (B, S, C)
            unmasked = theirs(x, x, x, need_weights=False)[0].detach()  # (B, S, C)
            # our layer's gradients for a random probe, in float64, with respect to x, then to mha's in_proj_weight,
            # in_proj_bias, out_proj.weight and out_proj.bias, which its Wqkv and Wo copy in that order
            ours64 = BidirectionalAttention.from_torch(detached(mha).double(), attn_impl="explicit")
            leaf64 = x.detach().double().requires_grad_()  # (B, S, C)
            probe, expected_grads = _probed_gradients(ours64(leaf64, mask), [leaf64, *ours64.Wqkv.parameters(),
                                                                            *ours64.Wo.parameters()], probes)
        leaf, given = requiring_grad(x)  # x in a graph, as the input of a layer is
        weights = [mha.in_proj_weight, mha.in_proj_bias, mha.out_proj.weight, mha.out_proj.bias]
        calls: list[_MhaCall] = []  # every call of mha by the answer

        def record(module, args, kwargs, calls=calls):
            bound = inspect.signature(module.forward).bind(*args, **kwargs)
            bound.apply_defaults()
            a = bound.arguments
            padding = a["key_padding_mask"]
            ordinary = isinstance(padding, Tensor) and padding.layout == torch.strided and not padding.is_nested
            additive = (not ordinary or padding.device.type != "cpu" or not padding.is_floating_point()
                        or bool(((padding == 0) | (padding == float("-inf"))).all()))
            large_negative = not additive and bool(((padding == 0) | (padding <= -1e4)).all())
            calls.append(_MhaCall(bool(a["need_weights"]), torch.is_grad_enabled(), module.training,
                                  a["attn_mask"] is not None, padding is not None, not additive, large_negative))

        handle = mha.register_forward_pre_hook(record, with_kwargs=True)
        try:
            with torch.enable_grad():  # as in a model being trained: the grader runs your code with autograd on
                got = call(torch_attention, mha, given, mask.clone())
        except Exception as raised:  # only the learner's own error gets this hint
            if getattr(raised, "error", None) is None or not any(c.attn_mask and not c.key_padding_mask for c in calls):
                raise
            raise Hint("attn_mask is a mask of (query, key) pairs, (S, S) or (B·NH, S, S); a padding mask (B, S) "
                       "goes in key_padding_mask, inverted (True = ignore): key_padding_mask=~mask.") from None
        finally:
            handle.remove()
        if isinstance(got, tuple):
            raise Hint("nn.MultiheadAttention returns a pair (output, weights): return only the output, its [0].")
        got = expect_shape(got, (B, S, C), "the output")
        nan_rows = got.detach().isnan().any(dim=-1)  # (B, S)
        if bool(nan_rows.any()):
            where = f"sequence {int(nan_rows.any(-1).nonzero()[0])} (lengths {lengths})"
            if bool((nan_rows.any(-1) & mask.all(-1)).any()):  # NaN where every key is real: all of them were hidden
                full = int((nan_rows.any(-1) & mask.all(-1)).nonzero()[0])
                raise Hint(f"the output has NaN in sequence {full} (lengths {lengths}), which has no padding: every "
                           "one of its keys was hidden. key_padding_mask is True where a key must be ignored, the "
                           "opposite of our mask (True = real token): pass key_padding_mask=~mask.")
            if any(c.need_weights for c in calls):
                raise Hint(f"the output has NaN in {where}: with need_weights=True, its default, "
                           "nn.MultiheadAttention computes the weights too, and a query that sees no key (a sequence "
                           "of only padding) gets NaN. Our layer gives such a query zero weights, so its output is "
                           "Wo's bias: pass need_weights=False, which computes that (Appendix C).")
            if any(not c.grad and not c.training for c in calls):
                raise Hint(f"the output has NaN in {where}: your call ran under torch.no_grad() with mha in eval "
                           "mode, nn.MultiheadAttention's inference fast path, which gives NaN to a query that sees "
                           "no key (a sequence of only padding; Appendix C). Off the fast path need_weights=False "
                           "gives it Wo's bias, as our layer does: leave autograd as your caller has it.")
        if close(got, expected):
            gradients.append((got, [leaf, *weights], expected_grads, probe, any(c.need_weights for c in calls)))
            continue
        if any(c.large_negative for c in calls):
            raise Hint("a float key_padding_mask is added to the scores: -1e9 hides the padding keys of a sequence "
                       "with real tokens, but in a sequence of only padding every key gets the same -1e9, so its "
                       "queries spread their weights evenly over the padding instead of seeing no key (our layer: "
                       "zero weights, Wo's bias). Pass the bool mask, True = ignore: key_padding_mask=~mask, with "
                       "need_weights=False.")
        if any(c.float_padding for c in calls):
            raise Hint("a float key_padding_mask is added to the scores (0 keeps a key, -inf hides it), so a mask of "
                       "0s and 1s such as (~mask).float() hides nothing, it only raises the padding keys' scores by "
                       "1. Pass a bool mask, True where a key must be ignored: key_padding_mask=~mask.")
        expect_precision(got, expected, "the output")  # before the mistakes below, none of which it is
        if close(got[mask], not_inverted[mask]):
            raise Hint("key_padding_mask is True where a key must be ignored, the opposite of our mask (True = real "
                       "token): pass key_padding_mask=~mask.")
        if close(got[mask], unmasked[mask]):
            raise Hint("the padding is not masked: the real tokens still attend to the padding keys. Hiding keys is "
                       "what key_padding_mask does (inverted: ~mask); changing the output afterwards hides nothing.")
        if bool((got[~mask] == 0).all()) and close(got[mask], expected[mask]):
            raise Hint(f"the outputs of the padding queries are 0 (lengths {lengths}), but our layer computes a "
                       "padding query like any other: it attends to the real keys of its sequence (with none, its "
                       "output is Wo's bias). The mask hides keys, not queries: don't zero the outputs.")
        if close(got[seen], expected[seen]) and bool((got[~seen] == 0).all()):
            raise Hint(f"the sequence of only padding gives 0, but our layer gives each of its queries zero "
                       f"weights and a zero context, so Wo's bias, mha.out_proj.bias = {fmt(mha.out_proj.bias[:3])}"
                       "...: replacing NaN by 0 after the output projection drops the bias. need_weights=False "
                       "gives no NaN in the first place (Appendix C).")
        expect_close(got, expected, "the output", why="key_padding_mask is True where a key must be ignored: pass "
                     "~mask, need_weights=False, and call mha(x, x, x, ...) for self-attention.")
    for got, leaves, expected_grads, probe, asked_weights in gradients:
        if got.requires_grad:  # (without a gradient, expect_gradients says so)
            grads = torch.autograd.grad((got * probe.to(got.dtype)).sum(), leaves, allow_unused=True,
                                        retain_graph=True)
            if not all(grad is None or bool(torch.isfinite(grad).all()) for grad in grads):
                where = ("from nn.MultiheadAttention with need_weights=True, its default" if asked_weights else
                         "from a softmax over -inf only")
                raise Hint("the output is right, but its gradient has NaN: a query that sees no key (a sequence of "
                           f"only padding) gets NaN weights {where}, and replacing the NaN afterwards (torch.where, "
                           "nan_to_num, Wo's bias put in by hand) fixes the output only. On the way back the NaN "
                           "reaches x and mha's weights, and training breaks: pass need_weights=False, which gives "
                           "such a query Wo's bias without any NaN (Appendix C).")
        _expect_gradients(got, leaves, expected_grads, probe, "the output")
    return ("nn.MultiheadAttention with key_padding_mask=~mask and need_weights=False computes what our layer "
            "computes, also for a sequence of only padding (Wo's bias), with finite and right gradients.")
