"""Graders of the exercises of notebook 05 (cross attention and the decoder block)."""

from __future__ import annotations

import functools
import math
import re
from typing import NoReturn

import torch
from torch import Tensor, nn

from ..functional import masked_softmax
from ..masks import causal_mask
from ._grading import (Hint, call, close, detached, dtype, expect_close, expect_gradients, expect_precision,
                       expect_shape, fmt, grader, requiring_grad)

__all__ = ["check_05_1", "check_05_2", "check_05_3"]


# --- 05.1: cross attention by hand ---------------------------------------------------------------------------------


def _cross(x: Tensor, context: Tensor, Wq: nn.Module, Wkv: nn.Module, Wo: nn.Module, num_heads: int,
           mask: Tensor | None, *, scale: float | None = None, layout: str = "[k | v]", split: bool = True,
           merge: bool = True, dim: int = -1, safe: bool = False, out: bool = True) -> Tensor:
    """Cross attention with an explicit softmax, and its usual mistakes: x (B, S, C), context (B, S_kv, C_kv), mask
    None or bool broadcasting to the scores (B, NH, S, S_kv) -> (B, S, C).

    scale: of the scores (default 1/√HS); layout: how Wkv's 2C outputs hold k and v ("[k | v]", "[v | k]", or
    "per head", [k_h | v_h] for each head); split / merge: whether the heads are split and merged with the transpose;
    dim: the softmax's axis; safe: a query that sees no key gets zero weights (masked_softmax) rather than NaN;
    out: whether Wo is applied."""
    B, S, C = x.shape
    S_kv, HS = context.shape[1], C // num_heads
    kv = Wkv(context)  # (B, S_kv, 2C)
    if layout == "per head":
        k, v = kv.reshape(B, S_kv, num_heads, 2, HS).unbind(3)  # 2 x (B, S_kv, NH, HS)
        k, v = k.reshape(B, S_kv, C), v.reshape(B, S_kv, C)  # 2 x (B, S_kv, C)
    else:
        k, v = kv.chunk(2, dim=-1)  # 2 x (B, S_kv, C)
        if layout == "[v | k]":
            k, v = v, k

    def heads(t: Tensor) -> Tensor:  # (B, L, C) -> (B, NH, L, HS)
        if split:
            return t.reshape(B, t.shape[1], num_heads, HS).transpose(1, 2)
        return t.reshape(B, num_heads, t.shape[1], HS)  # tokens and heads mixed up

    q, k, v = heads(Wq(x)), heads(k), heads(v)  # (B, NH, S, HS), (B, NH, S_kv, HS) x 2
    scores = q @ k.transpose(-2, -1) * (HS**-0.5 if scale is None else scale)  # (B, NH, S, S_kv)
    if safe:
        weights = masked_softmax(scores, mask)  # (B, NH, S, S_kv): zeros for a query that sees no key
    else:
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = scores.softmax(dim=dim)  # (B, NH, S, S_kv): NaN where a softmax saw -inf only
    ctx = weights @ v  # (B, NH, S, HS)
    ctx = ctx.transpose(1, 2).reshape(B, S, C) if merge else ctx.reshape(B, S, C)  # (B, S, C)
    return Wo(ctx) if out else ctx


def _largest_score(x: Tensor, context: Tensor, Wq: nn.Module, Wkv: nn.Module, num_heads: int) -> float:
    """The largest |score| of cross attention, |q · k| / √HS, over every head, query and context token."""
    B, S, C = x.shape
    HS = C // num_heads
    q = Wq(x).reshape(B, S, num_heads, HS).transpose(1, 2)  # (B, NH, S, HS)
    k = Wkv(context)[..., :C].reshape(B, -1, num_heads, HS).transpose(1, 2)  # (B, NH, S_kv, HS)
    return (q @ k.transpose(-2, -1)).abs().max().item() / HS**0.5


def _agrees(got: Tensor, candidate: Tensor, expected: Tensor) -> bool:
    """Whether the answer `got` (B, S, C) is the `candidate` mistake on every query row where the mistake is defined
    (no NaN), and the mistake differs from the right answer there: an answer's way of handling a query that sees
    nothing (NaN, zeros, uniform weights) does not hide the mistake it makes elsewhere."""
    rows = ~candidate.isnan().any(dim=-1)  # (B, S)
    if not bool(rows.any()) or close(candidate[rows], expected[rows]):
        return False
    return close(got[rows], candidate[rows])


def _reference_gradients(fn, inputs: list[Tensor], modules: list[nn.Module], probe: Tensor) -> list[Tensor]:
    """The gradients of sum(fn(*inputs, *modules) · probe) with respect to the inputs, then to every parameter of the
    modules in order, computed in float64 on copies: the reference of `expect_gradients`, before the answer runs."""
    leaves = [t.detach().double().requires_grad_() for t in inputs]
    copies = [detached(m).double() for m in modules]
    params = [p for m in copies for p in m.parameters()]
    with torch.enable_grad():
        out = fn(*leaves, *copies)
        grads = torch.autograd.grad((out * probe.double()).sum(), leaves + params, allow_unused=True)
    return [torch.zeros_like(t) if grad is None else grad for t, grad in zip(leaves + params, grads, strict=True)]


def _named(n: int, sizes: dict[str, int]) -> str:
    names = [name for name, size in sizes.items() if size == n]
    return f"{n} ({' = '.join(names)})" if names else str(n)


def _explain_error(error: RuntimeError, sizes: dict[str, int]) -> NoReturn:
    """Raise the hint for a RuntimeError of the learner's cross attention: every size of the case differs, so the
    numbers in torch's message name the axes that do not fit."""
    legend = ", ".join(f"{name} = {n}" for name, n in sizes.items())
    B, NH, S, S_kv = sizes["B"], sizes["NH"], sizes["S"], sizes["S_kv"]
    found = re.search(r"tensor a \((\d+)\) must match the size of tensor b \((\d+)\)", str(error))
    if found and {int(found[1]), int(found[2])} in ({B, NH}, {S, S_kv}):
        a, b = (_named(int(n), sizes) for n in found.groups())
        raise Hint(f"your code raised RuntimeError: {error}. The sizes {a} and {b} met: the mask does not fit the "
                   f"scores (B, NH, S, S_kv) = {(B, NH, S, S_kv)}. The (B, S_kv) padding mask must become "
                   "(B, 1, 1, S_kv), context_mask[:, None, None, :] or prepare_mask(context_mask, B, S, S_kv, "
                   "num_heads), so that it spreads over the heads and the queries (notebook 00's mask[:, None, :] "
                   "fits scores without a heads axis).")
    if "is invalid for input of size" in str(error):
        raise Hint(f"your code raised RuntimeError: {error}. A reshape does not fit ({legend}): q has S = {S} "
                   f"tokens per sequence, k and v have S_kv = {S_kv}, context.shape[1]; each splits into "
                   f"num_heads = {NH} heads of HS = C // num_heads = {sizes['HS']}.")
    raise Hint(f"your code raised RuntimeError: {error}. Every size differs here ({legend}), so the numbers name "
               "the axes that do not fit: Wq reads x (width C), Wkv reads the context (width C_kv) and gives 2C.")


@grader("05.1")
def check_05_1(cross_attention) -> str:
    """`cross_attention(x, context, Wq, Wkv, Wo, num_heads, context_mask)` -> (B, S, C): queries from x (B, S, C), keys
    and values from the context (B, S_kv, C_kv) through Wkv laid out [k | v], the context's padding (B, S_kv) hidden
    from every query, a query whose context is all padding gets zero weights (its output is Wo's bias); gradients
    reach x, the context and the three layers."""
    g = torch.Generator().manual_seed(51)
    # no two sizes alike, so that an axis taken for another shows; S < S_kv and S > S_kv, C_kv < C and C_kv > C;
    # every case has a partly padded context, the first and the last an all-padding one (the queries see nothing);
    # padding on the right, on the left and in holes: the mask, not a count of real tokens, says which token is real
    cases = [  # (B, S, S_kv, NH, HS, C_kv, context mask rows (1 = real), whether the scores go beyond e^score's range)
        (3, 4, 6, 2, 5, 7, ["111111", "000011", "000000"], False),
        (2, 7, 3, 4, 6, 30, ["100", "111"], False),
        (5, 3, 8, 6, 2, 9, ["11111111", "00000000", "10110110", "11100000", "00000111"], True),
    ]
    for B, S, S_kv, NH, HS, C_kv, rows, loud in cases:
        C = NH * HS
        sizes = {"B": B, "S": S, "S_kv": S_kv, "NH": NH, "HS": HS, "C": C, "C_kv": C_kv}
        Wq, Wkv, Wo = (nn.Linear(n_in, n_out).to(dtype()) for n_in, n_out in ((C, C), (C_kv, 2 * C), (C, C)))
        x = torch.randn(B, S, C, generator=g, dtype=dtype())  # (B, S, C)
        context = torch.randn(B, S_kv, C_kv, generator=g, dtype=dtype())  # (B, S_kv, C_kv)
        with torch.no_grad():
            if loud:  # x scaled so that the largest score is twice ln(the dtype's largest number): e^score overflows
                x = x * (2 * math.log(torch.finfo(dtype()).max) / _largest_score(x, context, Wq, Wkv, NH))
            real = torch.tensor([[c == "1" for c in row] for row in rows])  # (B, S_kv): True = real token
            ref = (x.clone(), context.clone(), detached(Wq), detached(Wkv), detached(Wo), NH)  # the grader's copies
            pad = real[:, None, None, :]  # (B, 1, 1, S_kv)
            expected = _cross(*ref, pad, safe=True)  # (B, S, C), before the answer runs
        probe = torch.randn(B, S, C, generator=g, dtype=torch.float64)  # (B, S, C): the gradients of sum(out · probe)
        want = _reference_gradients(functools.partial(_cross, num_heads=NH, mask=pad, safe=True), [x, context],
                                    [Wq, Wkv, Wo], probe)  # for x, the context, then the layers' parameters
        (x_leaf, x_given), (c_leaf, c_given) = requiring_grad(x), requiring_grad(context)  # inputs in a graph
        try:
            out = call(cross_attention, x_given, c_given, Wq, Wkv, Wo, NH, real.clone())
        except Exception as raised:  # only the learner's own RuntimeError gets these hints
            error = getattr(raised, "error", None)
            if not isinstance(error, RuntimeError):
                raise
            _explain_error(error, sizes)
        what = f"cross_attention(x, context, ...) for x {(B, S, C)} and context {(B, S_kv, C_kv)}"
        out = expect_shape(out, (B, S, C), what)
        got = out.detach()
        if close(got, expected):
            if not loud:  # scores beyond e^score's range make float32 gradients differ by rounding alone
                leaves = [x_leaf, c_leaf, *Wq.parameters(), *Wkv.parameters(), *Wo.parameters()]
                expect_gradients(out, leaves, want, probe, what)
            continue
        expect_precision(got, expected, what)
        with torch.no_grad():  # the mistakes, on the grader's copies
            _diagnose_05_1(got, expected, ref, real, rows, sizes, loud)
        expect_close(got, expected, f"the output for x {(B, S, C)} and context {(B, S_kv, C_kv)}",
                     why="Wq reads x, Wkv reads the context and is laid out [k | v]; split both into heads of "
                         "HS = C // num_heads and scale by 1/√HS.")
    return ("queries from x, keys and values from the context, its padding hidden wherever it is, no triangle, zeros "
            "for a query whose context is all padding, gradients for every input; S < S_kv and S > S_kv, C_kv < C "
            "and C_kv > C.")


def _diagnose_05_1(got: Tensor, expected: Tensor, ref: tuple, real: Tensor, rows: list[str], sizes: dict[str, int],
                   loud: bool) -> None:
    """Raise the hint for the usual mistake that `got` (B, S, C) makes, if it is one: `ref` the grader's copies of the
    inputs, `real` (B, S_kv) the context mask, `rows` its rows as text, `loud` whether e^score overflows."""
    S, S_kv, NH, HS = sizes["S"], sizes["S_kv"], sizes["NH"], sizes["HS"]
    pad = real[:, None, None, :]  # (B, 1, 1, S_kv)
    seen = real.any(dim=-1)  # (B,): contexts with some real token
    if close(got[seen], expected[seen]):  # right wherever a query sees some key: the empty context is not
        b = int((~seen).nonzero()[0])  # a context that is all padding
        empty, want = got[b, 0], expected[b, 0]  # (C,): one of its queries
        if bool(empty.isnan().any()):
            raise Hint(f"for a context that is all padding (row {b} of context_mask, {rows[b]}) your output is NaN "
                       f"({fmt(empty[:4])}...): its queries see no key, and the softmax of a row of -inf is 0/0. The "
                       "series' rule: a query that sees nothing gets zero weights, so its output is Wo's bias, never "
                       "NaN. Use notebook 00's masked_softmax, or zero such rows' weights after the softmax.")
        uniform = _cross(*ref, None, scale=0.0)  # (B, S, C): equal scores, equal weights on every key
        if close(got[~seen], uniform[~seen]):
            raise Hint("a context that is all padding gives its queries uniform weights over the padded tokens: "
                       "filling hidden scores with a large negative number rather than -inf leaves such a row equal "
                       "scores. A query that sees nothing gets zero weights, so its output is Wo's bias "
                       f"{fmt(want[:4])}..., here {fmt(empty[:4])}...: zero its weights after the softmax (notebook "
                       "00's masked_softmax does).")
        raise Hint(f"a query whose context is all padding sees no key: its weights are zero and its output is Wo's "
                   f"bias, {fmt(want[:4])}..., not {fmt(empty[:4])}... (zero the weights, then let Wo add its bias).")
    triangle = torch.ones(S, S_kv, dtype=torch.bool).tril()  # (S, S_kv): j <= i
    counted = torch.arange(S_kv) < real.sum(dim=-1, keepdim=True)  # (B, S_kv): the first `length` tokens
    mistakes = [  # (hint, the mistake's options of _cross)
        ("it is causal: query i only sees context tokens 0..i. Cross attention is not causal: the whole "
         "source is known, so every query may see every real context token.", dict(mask=pad & triangle)),
        ("it is causal (the triangle of causal_mask(S, S_kv), aligned at the end of the keys). Cross "
         "attention is not causal: every query may see every real context token.",
         dict(mask=pad & causal_mask(S, S_kv))),
        ("the context's padding is not masked: the padded context tokens get weight. Hide them with the "
         "(B, S_kv) mask, as (B, 1, 1, S_kv).", dict(mask=None)),
        ("the mask is inverted: True means a real context token, which may be attended; you hid the real "
         "tokens and let the padding through.", dict(mask=~pad)),
        (f"you rebuilt the mask from the number of real tokens, as if the real tokens always came first: here "
         f"context_mask has the rows {rows}, whose padding is not all on the right. Use the mask you are given, "
         "context_mask[:, None, None, :].", dict(mask=counted[:, None, None, :], safe=True)),
        (f"you forgot to scale the scores: divide q @ kᵀ by √HS = √{HS} before the softmax.",
         dict(mask=pad, scale=1.0)),
        (f"you divided the scores by HS = {HS}; the scale is 1/√HS = 1/{HS**0.5:.3g}.",
         dict(mask=pad, scale=1 / HS)),
        ("k and v are swapped: Wkv's output is laid out [k | v], the first C numbers are the keys, the last C "
         "the values.", dict(mask=pad, layout="[v | k]")),
        ("Wkv's output is laid out [k | v]: the first C numbers are the keys of every head, the last C the "
         "values. You cut it per head into [k_h | v_h]: split it into its two halves first (chunk(2, "
         "dim=-1)), then each half into heads.", dict(mask=pad, layout="per head")),
        (f"the heads are split by reshape(B, NH, S, HS) alone, which cuts the row of a token across "
         f"tokens: reshape to (B, S, NH, HS) = (B, S, {NH}, {HS}), then transpose(1, 2).",
         dict(mask=pad, split=False)),
        ("the heads are merged without the transpose: (B, NH, S, HS).reshape(B, S, C) mixes tokens and heads. "
         "Transpose back to (B, S, NH, HS) first, .transpose(1, 2), then reshape to (B, S, C).",
         dict(mask=pad, merge=False)),
        ("the softmax runs over the queries (dim=-2): it must run over the context tokens, the last axis "
         "(dim=-1), so that each query's weights sum to 1.", dict(mask=pad, dim=-2)),
        ("Wo is missing: the merged heads (B, S, C) go through the output projection Wo.",
         dict(mask=pad, out=False)),
    ]
    for hint, options in mistakes:
        if _agrees(got, _cross(*ref, **options), expected):
            raise Hint(hint)
    if loud and bool(got[seen].isnan().any()):
        top = _largest_score(*ref[:4], NH)
        raise Hint(f"NaN for queries that see real context tokens, with scores up to {top:.3g}: an "
                   f"exponential overflowed (e^{math.log(torch.finfo(dtype()).max):.0f} is inf in {dtype()}), "
                   "and inf / inf is NaN. Hide the padding with -inf and let softmax take the exponentials: "
                   "it subtracts each row's largest score first.")
    for name in ("C", "C_kv", "S", "S_kv", "NH"):
        if _agrees(got, _cross(*ref, pad, scale=sizes[name] ** -0.5), expected):
            raise Hint(f"you scaled the scores by 1/√{name} = 1/√{sizes[name]}; the scale is 1/√HS, the "
                       f"width of one head: HS = C // num_heads = {HS}.")


# --- 05.2: post-norm ------------------------------------------------------------------------------------------------


def _post_norm(b: nn.Module, x: Tensor, context: Tensor) -> Tensor:
    """The 2017 order from the block's parts: x = norm_i(x + f_i(x)) for self_attn, cross_attn, ffn."""
    x = b.norm1(x + b.self_attn(x))  # (B, S, C)
    x = b.norm2(x + b.cross_attn(x, context))  # (B, S, C)
    return b.norm3(x + b.ffn(x))  # (B, S, C)


def _post_norm_mistakes(b: nn.Module, x: Tensor, context: Tensor) -> list[tuple[str, Tensor]]:
    """(hint, output) for the usual mistakes of post_norm_block, computed on the grader's copy `b` of the block."""
    sa, ffn = b.self_attn, b.ffn

    def ca(h: Tensor) -> Tensor:
        return b.cross_attn(h, context)

    mistakes = []
    h = x + sa(b.norm1(x))
    h = h + ca(b.norm2(h))
    mistakes.append(("that is the pre-norm block of the main path, x + f(norm(x)). Post-norm adds first and "
                     "normalises the sum: x = norm(x + f(x)).", h + ffn(b.norm3(h))))
    h = b.norm2(ca(b.norm1(sa(x))))
    mistakes.append(("there is no residual connection: add each sub-layer's input to its output before the norm, "
                     "x = norm(x + f(x)).", b.norm3(ffn(h))))
    h = b.norm1(x + sa(x))
    h = b.norm2(h + ca(h))
    mistakes.append(("the last sub-layer is not normalised: the feed-forward step is norm3(x + ffn(x)) too.",
                     h + ffn(h)))
    h = x + b.norm1(sa(x))
    h = h + b.norm2(ca(h))
    mistakes.append(("you normalised the sub-layer's output before adding it, x + norm(f(x)). Post-norm normalises "
                     "the sum: x = norm(x + f(x)).", h + b.norm3(ffn(h))))
    h = b.norm1(x + sa(x))
    h = b.norm2(h + ca(x))
    mistakes.append(("every sub-layer reads the block's input x: each reads the output of the step before, x = "
                     "norm1(x + self_attn(x)), then x = norm2(x + cross_attn(x, context)) with that new x in both "
                     "places, then norm3(x + ffn(x)).", b.norm3(h + ffn(x))))
    h = b.norm1(x + ca(x))
    h = b.norm2(h + sa(h))
    mistakes.append(("the cross attention runs before the self-attention. The order is self_attn (with norm1), "
                     "cross_attn (norm2), ffn (norm3): the tokens first read each other, then the context.",
                     b.norm3(h + ffn(h))))
    h = b.norm1(x + sa(x))
    h = b.norm1(h + ca(h))
    mistakes.append(("every step uses norm1: each sub-layer has its own norm with its own weights, norm1 after "
                     "self_attn, norm2 after cross_attn, norm3 after ffn.", b.norm1(h + ffn(h))))
    for eps in (1e-5, 1e-6, 1e-12):  # the defaults of F.layer_norm and of other libraries, in place of the block's
        plain = detached(b)
        for norm in (plain.norm1, plain.norm2, plain.norm3):
            norm.eps = eps
        mistakes.append((f"your layer norm does not use the norms' own eps: this block's norms have eps = "
                         f"{b.norm1.eps:g} (norm.eps), yours behave as if it were {eps:g}. Call the norm modules, "
                         "block.norm1(...), or pass their eps: F.layer_norm(h, norm.normalized_shape, norm.weight, "
                         "norm.bias, norm.eps).", _post_norm(plain, x, context)))
    if context.shape[-1] == x.shape[-1]:  # norm2 can read the context only when C_kv == C
        h = b.norm1(x + sa(x))
        h = b.norm2(h + b.cross_attn(h, b.norm2(context)))
        mistakes.append(("the context went through norm2: the norms act on x, the decoder's stream; the context (the "
                         "encoder's output) goes to cross_attn as it is.", b.norm3(h + ffn(h))))
    return mistakes


@grader("05.2")
def check_05_2(post_norm_block) -> str:
    """`post_norm_block(block, x, context)` -> the 2017 order, x = norm(x + f(x)), from the block's parts; gradients
    reach x, the context and every weight of the block."""
    from .. import DecoderBlock

    g = torch.Generator().manual_seed(52)
    # no two sizes alike: (B, S, S_kv, NH, HS, C_kv, C_ff, the norms' eps); the first case is PyTorch's own post-norm
    # layer, whose context has the width of x (C_kv = C), the others a context of another width and norms whose eps
    # is not LayerNorm's default (it is the block's to choose); S = 1 last
    cases = [(3, 5, 7, 2, 8, None, 24, 1e-3), (2, 6, 3, 4, 5, 9, 13, 0.1), (4, 1, 5, 3, 2, 11, 7, 1e-5)]
    for B, S, S_kv, NH, HS, C_kv, C_ff, eps in cases:
        C = NH * HS
        with torch.no_grad():
            if C_kv is None:
                torch_layer = nn.TransformerDecoderLayer(C, NH, C_ff, dropout=0.0, layer_norm_eps=eps,
                                                         norm_first=True, batch_first=True, dtype=dtype()).eval()
                for norm in (torch_layer.norm1, torch_layer.norm2, torch_layer.norm3):  # not the identity: the
                    norm.weight.uniform_(0.5, 1.5), norm.bias.uniform_(-0.5, 0.5)  # place of a norm shows
                block = DecoderBlock.from_torch(torch_layer, context_size=S)  # the same weights
            else:
                block = DecoderBlock(C, NH, C_ff, context_size=S, kv_hidden_size=C_kv, eps=eps).to(dtype()).eval()
                for norm in (block.norm1, block.norm2, block.norm3):
                    norm.weight.uniform_(0.5, 1.5), norm.bias.uniform_(-0.5, 0.5)
            x = torch.randn(B, S, C, generator=g, dtype=dtype())  # (B, S, C)
            context = torch.randn(B, S_kv, C_kv or C, generator=g, dtype=dtype())  # (B, S_kv, C_kv)
            copy, inputs = detached(block), (x.clone(), context.clone())  # the grader's, for the reference and
            if C_kv is None:  # the mistakes; the reference before the answer runs
                torch_layer.norm_first = False  # PyTorch's post-norm layer, which the block's parts must reproduce
                expected = torch_layer(*inputs, tgt_mask=~causal_mask(S)[0], tgt_is_causal=True)  # (B, S, C)
            else:
                expected = _post_norm(copy, *inputs)  # (B, S, C)
        probe = torch.randn(B, S, C, generator=g, dtype=torch.float64)  # (B, S, C): the gradients of sum(out · probe)
        want = _reference_gradients(lambda x, c, b: _post_norm(b, x, c), [x, context], [block], probe)
        (x_leaf, x_given), (c_leaf, c_given) = requiring_grad(x), requiring_grad(context)  # inputs in a graph

        def refuse(*args, **kwargs):
            raise Hint("compute the block from its parts (norm1..3, self_attn, cross_attn, ffn), not with "
                       "block(...): block(...) is the pre-norm order.")

        block.forward = refuse  # an attribute of this block only: deleted below, whatever happens
        try:
            out = call(post_norm_block, block, x_given, c_given)
        finally:
            del block.forward
        what = f"post_norm_block(block, x, context) for x {(B, S, C)} and context {tuple(context.shape)}"
        out = expect_shape(out, (B, S, C), what)
        got = out.detach()
        if close(got, expected):
            expect_gradients(out, [x_leaf, c_leaf, *block.parameters()], want, probe, what)
            continue
        with torch.no_grad():
            for hint, mistake in _post_norm_mistakes(copy, *inputs):
                if close(mistake, expected):  # this case cannot tell the mistake (S = 1 hides some)
                    continue
                if close(got, mistake):
                    raise Hint(hint)
        expect_close(got, expected, what, why="Three steps, each x = norm_i(x + f(x)): self_attn, cross_attn "
                     "(with the context), ffn; the grader compares with nn.TransformerDecoderLayer(norm_first="
                     "False) holding the same weights.")
    return ("post-norm, as in the 2017 Transformer and nn.TransformerDecoderLayer(norm_first=False), also with a "
            "context of another width, norms of another eps and one token; gradients reach every weight.")


# --- 05.3: decoding through a stack ---------------------------------------------------------------------------------


class _Record:
    """What the answer did with the blocks, recorded by hooks: the self-attention's calls in order, (block, tokens);
    the calls of each block's forward, (block, cache, cached tokens, x); each block's projections of the context."""

    def __init__(self, blocks: list[nn.Module]):
        self.calls: list[tuple[int, int]] = []  # (block, tokens its self-attention saw)
        self.steps: list[tuple[int, object, int | None, Tensor]] = []  # (block, cache, len(cache), x)
        self.projections = [0] * len(blocks)
        self.outputs: list[tuple[int, Tensor]] = []  # (block, output of its forward)
        self._hooks = []
        for n, block in enumerate(blocks):
            self._hooks += [
                block.self_attn.Wqkv.register_forward_hook(lambda m, args, out, n=n: self.calls.append(
                    (n, args[0].shape[1]))),
                block.cross_attn.Wkv.register_forward_hook(lambda m, args, out, n=n: self._projected(n)),
                block.register_forward_pre_hook(lambda m, args, kwargs, n=n: self._step(n, args, kwargs),
                                                with_kwargs=True),
                block.register_forward_hook(lambda m, args, out, n=n: self.outputs.append((n, out.detach().clone()))),
            ]

    def _projected(self, n: int) -> None:
        self.projections[n] += 1

    def _step(self, n: int, args: tuple, kwargs: dict) -> None:
        x = args[0] if args else kwargs.get("x")
        cache = kwargs.get("cache")
        length = len(cache) if hasattr(cache, "__len__") else None
        self.steps.append((n, cache, length, x.detach().clone() if isinstance(x, Tensor) else x))

    def remove(self) -> None:
        for hook in self._hooks:
            hook.remove()


def _check_record(record: _Record, L: int, S: int, x: Tensor, complete: bool) -> None:
    """Raise the hint for a way of running the stack of L blocks over the S tokens of x (B, S, C) that generation
    cannot use, from what the hooks recorded; `complete`: whether the answer returned (else it raised, and the
    record stops where it failed)."""
    if not record.calls:
        return
    lengths = [tokens for _, tokens in record.calls]
    if any(n != 1 for n in lengths):
        raise Hint(f"the blocks' self-attention saw {lengths} tokens per call: run one token per step, x[:, t:t+1], "
                   "through every block, each block with its own cache (block.new_cache(B)), as "
                   "generation does: token t + 1 does not exist yet when token t runs.")
    called = sorted({n for n, _ in record.calls})
    if complete and called != list(range(L)):
        raise Hint(f"only blocks {called} of the {L} ran: a stack runs token t through every block in turn, "
                   "blocks[0] first, each block reading the previous block's output.")
    order = [n for n, _ in record.calls]
    generation = (list(range(L)) * S)[: len(order)]  # step 0 through blocks 0..L-1, then step 1, ...
    if order != generation:
        if order == [n for n in range(L) for _ in range(S)][: len(order)]:
            raise Hint("you decoded layer by layer: blocks[0] over every token, then blocks[1] over its outputs. "
                       "Generation cannot: token t + 1 only exists after the whole stack has produced token t. "
                       "Make the steps the outer loop and the blocks the inner one: each step runs token t through "
                       "every block.")
        raise Hint(f"the blocks ran in the order {order}: at each step token t goes through blocks[0], blocks[1], "
                   "... in the order of the list, each reading the previous block's output.")
    if [n for n, *_ in record.steps[: len(order)]] == order:  # the calls went through block(...) or block.decode
        owner: dict[int, int] = {}
        for i, (n, cache, length, h) in enumerate(record.steps):
            t = i // L  # the step of this call
            if cache is None:
                raise Hint("a block ran without a cache: token t then sees only itself in the self-attention. Give "
                           "every block its own cache, block.new_cache(B), made before the loop, and pass it at every "
                           "step: block(h, context_kv, cache=cache).")
            if owner.setdefault(id(cache), n) != n:
                raise Hint("one cache serves two blocks: each block's self-attention keeps its own keys and values, "
                           "so the second block saw the first block's tokens as its own past. Make one cache per "
                           "block: caches = [block.new_cache(B) for block in blocks].")
            if length != t:
                raise Hint(f"at step {t} a block's cache held {length} tokens instead of the {t} before it: a new "
                           "cache at every step forgets the past. Make the caches once, before the loop over the "
                           "tokens, and pass the same cache to the same block at every step.")
            if n == 0 and isinstance(h, Tensor) and not torch.equal(h, x[:, t : t + 1]):
                raise Hint(f"at step {t} the first block read something other than token {t} of x: it reads "
                           f"x[:, {t}:{t + 1}], the given token (in generation the token the model chose at step "
                           f"{t - 1}; here the tokens are given), not the stack's output of the step before.")
            if n > 0 and isinstance(h, Tensor):
                previous = record.outputs[i - 1][1] if i - 1 < len(record.outputs) else None
                if previous is not None and not torch.equal(h, previous):
                    raise Hint(f"at step {t} blocks[{n}] did not read the output of blocks[{n - 1}]: in a stack, "
                               "each block reads the previous block's output (h = block(h, ...)), and the "
                               "step's output is the last block's.")
    if not complete:
        return
    if 0 in record.projections:
        raise Hint(f"the blocks' Wkv projected the context {record.projections} times: each block has its own "
                   "cross attention and its own Wkv, so project the context once per block, with that block's "
                   "block.cross_attn.project_context(context), before the loop.")
    if any(n > 1 for n in record.projections):
        raise Hint(f"the context was projected {record.projections} times by the blocks. It does not change between "
                   "steps: project it once per block with block.cross_attn.project_context(context), before the "
                   "loop, and pass that ContextKV at every step.")


@grader("05.3")
def check_05_3(decode_stack) -> str:
    """`decode_stack(blocks, x (B, S, C), context (B, S_kv, C_kv))` -> (B, S, C): a stack of blocks, one token per
    step through every block, one cache per block, the context projected once per block."""
    from .. import DecoderBlock

    g = torch.Generator().manual_seed(53)
    # no two sizes alike: (L blocks, B, S, S_kv, NH, HS, C_kv); S < S_kv and S > S_kv, a stack of 3, one token;
    # the blocks' context_size (their longest sequence) is more than S, as in a model that generates less
    cases = [(2, 2, 4, 5, 3, 6, 7), (3, 1, 6, 2, 4, 5, 9), (2, 3, 1, 4, 2, 5, 6)]
    for L, B, S, S_kv, NH, HS, C_kv in cases:
        C = NH * HS
        blocks = [DecoderBlock(C, NH, 2 * C + 1, context_size=L * S + 3, kv_hidden_size=C_kv).to(dtype()).eval()
                  for _ in range(L)]
        x = torch.randn(B, S, C, generator=g, dtype=dtype())  # (B, S, C)
        context = torch.randn(B, S_kv, C_kv, generator=g, dtype=dtype())  # (B, S_kv, C_kv)
        tokens = x.clone()  # (B, S, C): what the first block must read, step by step
        with torch.no_grad():  # the reference, before the answer runs, on copies made before the hooks
            expected = x.clone()
            for block in [detached(block) for block in blocks]:
                expected = block(expected, context.clone())  # (B, S, C): block n reads block n - 1's output
        record = _Record(blocks)
        try:  # with gradients enabled, as in a notebook: a cache keeps none, so the answer turns them off itself
            got = call(decode_stack, blocks, x, context)
        except Exception as raised:  # a wrong way of running the stack can make the code fail: name it first
            if getattr(raised, "error", None) is not None:
                _check_record(record, L, S, tokens, complete=False)
            raise
        finally:
            record.remove()
        what = f"decode_stack(blocks, x, context) for {L} blocks, x {(B, S, C)} and context {(B, S_kv, C_kv)}"
        got = expect_shape(got, (B, S, C), what).detach()
        _check_record(record, L, S, tokens, complete=True)
        expect_close(got, expected, what, why="Each step runs token t through blocks[0], then its output through "
                     "blocks[1], and so on, each block with its own cache; step t's output is row t of the stack's "
                     "output.")
    return ("one token per step through every block in order, one cache each, the context projected once per block; "
            "with 2 and 3 blocks, S < S_kv, S > S_kv and a single token.")
