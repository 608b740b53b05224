"""Contracts that hold for every layer at once: how masks from the package's helpers are read, what bad arguments
give (a clear TypeError/ValueError raised by the package, never a torch-internal error, never an output), the
failed decoding step that leaves its cache alone, construction memory, and compilation with torch.compile."""

from __future__ import annotations

import os
import subprocess
import sys
import traceback
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from reference import causal as by_hand_causal
from reference import layer64
from reference import padding as by_hand_padding

import attention_lib
from attention_lib import (
    BidirectionalAttention,
    CausalAttention,
    CrossAttention,
    DecoderBlock,
    GroupedQueryAttention,
    KVCache,
    SingleHeadAttention,
    attend,
    attention_impls,
    causal_mask,
    explicit_attention,
    kv_cache_bytes,
    masked_softmax,
    padding_mask,
    rope_cos_sin,
    sdpa_attention,
    tiled_attention,
)


def reference(layer: torch.nn.Module, x: torch.Tensor, full_mask: torch.Tensor, context=None) -> torch.Tensor:
    """The shared float64 reference; full_mask: (B, S, S_kv) bool, written out by hand."""
    return layer64(layer, x, full_mask, context=context)[0]


PACKAGE = Path(attention_lib.__file__).resolve().parent
LAYERS = ["single", "bidirectional", "causal", "cross"]


def make_layer(kind: str, C: int = 8, NH: int = 2, **kwargs) -> torch.nn.Module:
    if kind == "single":
        return SingleHeadAttention(C, **kwargs)
    if kind == "bidirectional":
        return BidirectionalAttention(C, NH, **kwargs)
    if kind == "causal":
        return CausalAttention(C, NH, context_size=16, **kwargs)
    return CrossAttention(C, NH, kv_hidden_size=6, **kwargs)


def run(layer: torch.nn.Module, x: torch.Tensor, mask=None, context=None, **kwargs):
    if isinstance(getattr(layer, "_orig_mod", layer), CrossAttention):  # a compiled module keeps the original
        return layer(x, context, mask, **kwargs)
    return layer(x, mask, **kwargs)


# --- the mask contract: no helper's mask is misread, whatever B, S, S_kv and NH are ------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(LAYERS),
    B=st.integers(1, 3),
    S=st.integers(1, 3),
    S_kv=st.integers(1, 3),
    NH=st.sampled_from([1, 2, 3]),
    which=st.sampled_from(["padding", "causal", "padding_and_causal"]),
    left=st.booleans(),
    impl=st.sampled_from(["sdpa", "explicit"]),
    data=st.data(),
)
def test_helper_masks_are_read_as_what_they_are_or_refused(kind, B, S, S_kv, NH, which, left, impl, data):
    """B, S, S_kv and NH drawn from {1, 2, 3} collide often: a (S, S) mask would pass for (B, S_kv) when B == S,
    a (B, S, S) one for (NH, S, S) when B == NH. Each helper mask is either exactly what it says or an error."""
    C = 2 * 3 * NH  # divisible by NH, and by 4 for the single head
    layer = make_layer(kind, C=C, NH=NH).eval()
    layer.attn_impl = impl
    if kind != "cross":
        S_kv = S  # self-attention
    lengths = data.draw(st.lists(st.integers(0, S_kv), min_size=B, max_size=B), label="lengths")
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 1000), label="seed"))
    x = torch.randn(B, S, C, generator=g)
    context = torch.randn(B, S_kv, 6, generator=g) if kind == "cross" else None

    pad_by_hand = by_hand_padding(lengths, S_kv, left)[:, None, :].expand(B, S, S_kv)  # (B, S, S_kv)
    tri_by_hand = by_hand_causal(S, S_kv)[None].expand(B, S, S_kv)  # (B, S, S_kv)
    if which == "padding":
        mask, full = padding_mask(lengths, seq_len=S_kv, left=left), pad_by_hand
    elif which == "causal":
        mask, full = causal_mask(S, S_kv), tri_by_hand
    else:
        mask = padding_mask(lengths, seq_len=S_kv, left=left)[:, None, :] & causal_mask(S, S_kv)  # (B, S, S_kv)
        full = pad_by_hand & tri_by_hand
    if kind == "causal":
        full = full & by_hand_causal(S, S)  # the layer's own rule on top
    multi_head = kind != "single"
    if multi_head and mask.ndim == 3 and mask.shape[0] != 1:
        with pytest.raises(ValueError, match="ambiguous"):  # (B, S, S_kv) or (NH, S, S_kv)? A clear error.
            run(layer, x, mask, context)
        return
    with torch.no_grad():
        out = run(layer, x, mask, context)
    assert torch.allclose(out.double(), reference(layer, x, full, context), atol=1e-5)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    B=st.integers(1, 3),
    S=st.integers(1, 3),
    S_kv=st.integers(1, 3),
    NH=st.sampled_from([None, 1, 2, 3]),
    which=st.sampled_from(["padding", "causal", "padding_and_causal"]),
    is_causal=st.booleans(),
    left=st.booleans(),
    data=st.data(),
)
def test_helper_masks_are_read_as_what_they_are_by_the_functions(B, S, S_kv, NH, which, is_causal, left, data):
    """The functions follow the layers' rule: a 2-D mask is (B, S_kv), whatever B, S and S_kv are (they collide
    often in {1, 2, 3}), for q (B, S, HS) and (B, NH, S, HS), on every path, with and without is_causal."""
    lengths = data.draw(st.lists(st.integers(0, S_kv), min_size=B, max_size=B), label="lengths")
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 1000), label="seed"))
    heads = () if NH is None else (NH,)
    q = torch.randn(B, *heads, S, 4, generator=g)  # (B, [NH,] S, HS)
    k, v = torch.randn(2, B, *heads, S_kv, 4, generator=g).unbind(0)  # each (B, [NH,] S_kv, HS)
    spread = (B, *(1,) * len(heads), 1, S_kv)  # a padding mask over the keys, by hand, with q's rank
    pad_by_hand = by_hand_padding(lengths, S_kv, left).reshape(spread).expand(*q.shape[:-1], S_kv)
    tri_by_hand = by_hand_causal(S, S_kv).expand(*q.shape[:-1], S_kv)
    pad = padding_mask(lengths, seq_len=S_kv, left=left)  # (B, S_kv)
    if which == "padding":
        mask, full = pad, pad_by_hand
    elif which == "causal":
        mask, full = causal_mask(S, S_kv), tri_by_hand
    else:  # combined by the user with the scores' rank, as the series shows it
        mask = pad.reshape(spread) & causal_mask(S, S_kv).reshape(*(1,) * (q.ndim - 2), S, S_kv)
        full = pad_by_hand & tri_by_hand
    if is_causal:
        full = full & tri_by_hand
    scores = q.double() @ k.double().transpose(-2, -1) / 2.0  # (B, [NH,] S, S_kv), √HS = 2
    e = (scores - scores.amax(-1, keepdim=True)).exp() * full
    total = e.sum(-1, keepdim=True)
    expected = torch.where(total > 0, e / total.clamp_min(1e-300), torch.zeros_like(e)) @ v.double()
    outputs = {
        "explicit_attention": explicit_attention(q, k, v, mask, is_causal=is_causal)[0],
        "sdpa_attention": sdpa_attention(q, k, v, mask, is_causal=is_causal),
        **{f"attend-{i}": attend(q, k, v, mask=mask, is_causal=is_causal, impl=i)[0] for i in attention_impls()},
    }
    for name, out in outputs.items():
        assert torch.allclose(out.double(), expected, atol=1e-5), name


def test_a_causal_mask_is_causal_when_the_batch_size_equals_the_length():
    """The failure this contract prevents: with B == S a 2-D (S, S) triangle passed for a padding mask."""
    B = S = 3
    layer = BidirectionalAttention(8, 2).eval()
    x = torch.randn(B, S, 8)
    with torch.no_grad():
        out = layer(x, causal_mask(S))
    expected = reference(layer, x, by_hand_causal(S, S)[None].expand(B, S, S))
    assert torch.allclose(out.double(), expected, atol=1e-5)


# --- bad arguments: a clear error from the package, never a torch-internal one, never an output --------------------


def raised_by_package(err: BaseException) -> bool:
    """True when the innermost frame that raised lies in attention_lib (not in torch or Python)."""
    frames = traceback.extract_tb(err.__traceback__)
    return bool(frames) and Path(frames[-1].filename).resolve().parent == PACKAGE


def expect_clear_error(call) -> None:
    try:
        result = call()
    except (TypeError, ValueError) as err:
        assert raised_by_package(err), f"{type(err).__name__} raised outside the package: {err}"
        assert len(str(err)) > 20, f"an unhelpful message: {err!r}"
        return
    raise AssertionError(f"no error, returned {type(result).__name__}")


not_a_size = st.one_of(
    st.none(), st.booleans(), st.integers(max_value=0), st.floats(allow_nan=True), st.text(max_size=2),
    st.just([2]), st.just(torch.tensor(2)), st.just(2.0), st.just(np.float64(3.0)),
)
not_a_probability = st.one_of(
    st.none(), st.booleans(), st.floats(max_value=-1e-6), st.floats(min_value=1.000001), st.just(float("nan")),
    st.text(max_size=2), st.just([0.1]),
)
KINDS = ["single", "bidirectional", "causal", "grouped", "cross", "block"]  # every layer of the package
# The constructor arguments each kind takes (GroupedQueryAttention's options too), and good values for them.
GOOD_ARGS = {"hidden_size": 8, "num_heads": 2, "num_kv_heads": 1, "context_size": 8, "kv_hidden_size": 6,
             "ffn_size": 16, "attn_drop": 0.1, "out_drop": 0.1, "dropout": 0.1, "window": 3, "rope_theta": 100.0,
             "alibi": True}
CONSTRUCTORS = {
    "single": (lambda a: SingleHeadAttention(a["hidden_size"]), {"hidden_size"}),
    "bidirectional": (lambda a: BidirectionalAttention(a["hidden_size"], a["num_heads"], a["attn_drop"], a["out_drop"]),
                      {"hidden_size", "num_heads", "attn_drop", "out_drop"}),
    "causal": (lambda a: CausalAttention(a["hidden_size"], a["num_heads"], a["context_size"], a["attn_drop"],
                                         a["out_drop"]),
               {"hidden_size", "num_heads", "context_size", "attn_drop", "out_drop"}),
    "grouped": (lambda a: GroupedQueryAttention(a["hidden_size"], a["num_heads"], a["num_kv_heads"], a["context_size"],
                                                a["attn_drop"], a["out_drop"], window=a["window"],
                                                rope_theta=a["rope_theta"], alibi=a["alibi"]),
                {"hidden_size", "num_heads", "num_kv_heads", "context_size", "attn_drop", "out_drop", "window",
                 "rope_theta", "alibi"}),
    "cross": (lambda a: CrossAttention(a["hidden_size"], a["num_heads"], a["kv_hidden_size"], a["attn_drop"],
                                       a["out_drop"]),
              {"hidden_size", "num_heads", "kv_hidden_size", "attn_drop", "out_drop"}),
    "block": (lambda a: DecoderBlock(a["hidden_size"], a["num_heads"], a["ffn_size"], a["context_size"],
                                     a["kv_hidden_size"], a["dropout"]),
              {"hidden_size", "num_heads", "ffn_size", "context_size", "kv_hidden_size", "dropout"}),
}
OPTIONAL = {"kv_hidden_size", "window", "rope_theta"}  # None is a valid choice for these


@settings(max_examples=250, deadline=None)
@given(kind=st.sampled_from(KINDS), data=st.data())
def test_constructors_refuse_bad_arguments_naming_them(kind, data):
    build, uses = CONSTRUCTORS[kind]
    which = data.draw(st.sampled_from(sorted(uses)), label="which")
    strategy = not_a_probability if which.endswith("drop") or which == "dropout" else not_a_size
    if which == "alibi":
        strategy = st.one_of(st.none(), st.integers(), st.text(max_size=2))
    value = data.draw(strategy, label=which)
    assume(not (which in OPTIONAL and value is None))
    assume(not (which == "rope_theta" and isinstance(value, float) and value > 0 and value != float("inf")))
    args = GOOD_ARGS | {which: value}
    try:
        build(args)
    except (TypeError, ValueError) as err:
        assert raised_by_package(err), f"{type(err).__name__} raised outside the package: {err}"
        assert which in str(err) or (which == "num_heads" and "num_kv_heads" in str(err)), (which, str(err))
    else:
        raise AssertionError(f"{kind}: {which}={value!r} accepted")


def test_sizes_that_do_not_divide_are_refused_with_both_numbers():
    for build, words in [
        (lambda: BidirectionalAttention(10, 3), ["hidden_size=10", "num_heads=3"]),
        (lambda: CausalAttention(6, 4, 8), ["hidden_size=6", "num_heads=4"]),
        (lambda: GroupedQueryAttention(32, 8, 3, 8), ["num_heads=8", "num_kv_heads=3"]),
        (lambda: GroupedQueryAttention(24, 8, 2, 8, rope_theta=1e4), ["head size must be even", "HS=3"]),
        (lambda: DecoderBlock(7, 2, 16, 4), ["hidden_size=7", "num_heads=2"]),
        (lambda: SingleHeadAttention(3), ["hidden_size must be at least 4", "got 3"]),
    ]:
        with pytest.raises(ValueError) as err:
            build()
        assert all(word in str(err.value) for word in words), str(err.value)


def make_any(kind: str) -> torch.nn.Module:
    """A layer of every kind with C = 8, NH = 2 (cross and block: a context of width 6)."""
    if kind == "grouped":
        return GroupedQueryAttention(8, 2, 1, 16, rope_theta=100.0, alibi=True, window=3)
    if kind == "block":
        return DecoderBlock(8, 2, 16, 16, kv_hidden_size=6)
    return make_layer(kind)


def run_any(layer, x, mask=None, context=None, context_mask=None, positions=None):
    if isinstance(layer, DecoderBlock):
        return layer(x, context, mask, context_mask)
    if isinstance(layer, GroupedQueryAttention):
        return layer(x, mask, positions=positions)
    return run(layer, x, mask, context)


B, S, S_KV, C8 = 2, 3, 4, 8  # the batch of the bad-input tests: the cross kinds read a context of S_KV tokens
BAD_X = [  # (what, x, error, words the message must hold)
    ("None", None, TypeError, ["x", "Tensor", "NoneType"]),
    ("a list", [[[0.0] * C8]], TypeError, ["x", "Tensor", "list"]),
    ("a NumPy array", np.zeros((1, 2, C8), dtype=np.float32), TypeError, ["x", "Tensor", "ndarray"]),
    ("no batch axis", torch.randn(S, C8), ValueError, ["x", "(B, S, 8)", f"({S}, 8)"]),
    ("a 4-D x", torch.randn(B, S, C8, 1), ValueError, ["x", "(B, S, 8)", f"({B}, {S}, 8, 1)"]),
    ("the wrong width", torch.randn(B, S, C8 + 1), ValueError, ["x", "(B, S, 8)", f"({B}, {S}, 9)"]),
    ("integers", torch.ones(B, S, C8, dtype=torch.int64), TypeError, ["x", "floating", "int64"]),
    ("bools", torch.ones(B, S, C8, dtype=torch.bool), TypeError, ["x", "floating", "bool"]),
    ("float64", torch.randn(B, S, C8).double(), TypeError, ["x", "dtype torch.float32", "float64"]),
    ("float16", torch.randn(B, S, C8).half(), TypeError, ["x", "dtype torch.float32", "float16"]),
    ("the meta device", torch.ones(B, S, C8, device="meta"), ValueError, ["x", "device", "meta"]),
]


def bad_masks(S_kv: int, heads: bool) -> list:
    """(what, mask, error, words) for a layer whose scores are (B, [NH,] S, S_kv)."""
    scores = f"({B}, 2, {S}, {S_kv})" if heads else f"({B}, {S}, {S_kv})"
    return [
        ("a float mask", torch.ones(B, S_kv), TypeError, ["mask", "torch.bool", "float32"]),
        ("an int mask", torch.ones(B, S_kv, dtype=torch.int64), TypeError, ["mask", "torch.bool", "int64"]),
        ("a list", [[True] * S_kv] * B, TypeError, ["mask", "list"]),
        ("padding too long", torch.ones(B, S_kv + 1, dtype=torch.bool), ValueError,
         ["mask", f"(B, S_kv) = ({B}, {S_kv})", f"({B}, {S_kv + 1})"]),
        ("padding of another batch", torch.ones(B + 1, S_kv, dtype=torch.bool), ValueError,
         ["mask", f"(B, S_kv) = ({B}, {S_kv})", f"({B + 1}, {S_kv})"]),
        ("a bare (S, S_kv) table", torch.ones(S, S_kv, dtype=torch.bool), ValueError,
         ["mask", "padding mask", "mask[None]"]),
        ("3-D of another batch", torch.ones(B + 1, S, S_kv, dtype=torch.bool), ValueError,
         ["mask", f"({B + 1}, {S}, {S_kv})"]),
        ("4-D over other heads", torch.ones(B, 5, S, S_kv, dtype=torch.bool), ValueError,
         ["mask", scores, f"({B}, 5, {S}, {S_kv})"]),
        ("5-D", torch.ones(1, B, 1, S, S_kv, dtype=torch.bool), ValueError, ["mask", scores]),
        ("the meta device", torch.ones(B, S_kv, dtype=torch.bool, device="meta"), ValueError,
         ["mask", "device", "meta"]),
    ]


BAD_CONTEXT = [
    ("None", None, TypeError, ["context", "NoneType"]),
    ("a pair of tensors", (torch.randn(B, S_KV, 6),) * 2, TypeError, ["context", "tuple"]),
    ("the wrong width", torch.randn(B, S_KV, 7), ValueError, ["context", "kv_hidden_size", "6", f"({B}, {S_KV}, 7)"]),
    ("another batch", torch.randn(B + 1, S_KV, 6), ValueError, ["context", "batch size", f"{B + 1}"]),
    ("float64", torch.randn(B, S_KV, 6).double(), TypeError, ["context", "float64"]),
]


def bad_inputs(kind: str) -> list:
    """(argument, what, value, error, words): every bad input of a layer of `kind`."""
    cases = [("x", *case) for case in BAD_X]
    if kind in ("cross", "block"):
        cases += [("context", *case) for case in BAD_CONTEXT]
        cases += [("context_mask" if kind == "block" else "mask", *case) for case in bad_masks(S_KV, heads=True)]
    if kind != "cross":
        cases += [("mask", *case) for case in bad_masks(S, heads=kind != "single")]
    if kind == "grouped":
        cases += [
            ("positions", "float positions", torch.arange(S).float(), TypeError, ["positions", "integer"]),
            ("positions", "positions too long", torch.arange(S + 1), ValueError, ["positions", f"({S},)"]),
            ("x", "longer than context_size", torch.randn(B, 17, C8), ValueError, ["context_size", "16", "17"]),
        ]
    return cases


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(KINDS), data=st.data())
def test_forward_refuses_bad_inputs_naming_them(kind, data):
    """Every layer refuses every bad x, mask, context and positions with a TypeError or ValueError raised by the
    package, whose message names the argument and shows what was expected and what came."""
    layer = make_any(kind).eval()
    argument, what, value, error, words = data.draw(st.sampled_from(bad_inputs(kind)), label="case")
    args = {"x": torch.randn(B, S, C8), "context": torch.randn(B, S_KV, 6)} | {argument: value}
    with torch.no_grad(), pytest.raises(error) as err:
        run_any(layer, **args)
    assert raised_by_package(err.value), f"{type(err.value).__name__} raised outside the package: {err.value}"
    message = str(err.value)
    missing = [word for word in words if word not in message]
    assert not missing, f"{kind}, {argument} {what}: {missing} not in {message!r}"


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_functions_refuse_bad_arguments(data):
    q = torch.randn(2, 3, 4)
    call = data.draw(
        st.sampled_from(
            [
                lambda v: padding_mask(v),
                lambda v: padding_mask([1, 2], seq_len=v),
                lambda v: causal_mask(v),
                lambda v: causal_mask(3, v),
                lambda v: attend(q, q, q, mask=v),
                lambda v: attend(q, q, q, impl=v),
                lambda v: KVCache(v, 2, 4, 8),
                lambda v: CausalAttention(8, 2, 8).new_cache(v),
                lambda v: CausalAttention(8, 2, 8).new_cache(2, max_length=v),
                lambda v: masked_softmax(torch.randn(2, 3), v),
                lambda v: attend(q, q, q, is_causal=True, window=v),
                lambda v: rope_cos_sin(torch.arange(3), v),
                lambda v: kv_cache_bytes(v, 2, 2, 4),
                lambda v: kv_cache_bytes(10, v, 2, 4),
                lambda v: kv_cache_bytes(10, 2, 2, 4, window=v),
                lambda v: filled_cache().crop(v),
            ]
        ),
        label="call",
    )
    value = data.draw(
        st.one_of(
            st.none(), st.booleans(), st.integers(max_value=-1), st.floats(allow_nan=True), st.text(max_size=2),
            st.just([]), st.just(torch.ones(2, 3, 3)), st.just(torch.tensor([2.5, 1.0])),
        ),
        label="value",
    )
    try:
        call(value)
    except (TypeError, ValueError) as err:
        assert raised_by_package(err), f"{type(err).__name__} raised outside the package: {err}"
    else:  # None is valid where the argument is optional (a mask, seq_len, kv_len, max_length, window): nothing else
        assert value is None


def filled_cache() -> KVCache:
    cache = KVCache(1, 2, 4, 8)
    cache.append(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4))
    return cache


def test_integers_of_numpy_are_counts_and_lengths_too():
    cache = filled_cache()
    cache.crop(np.int64(2))
    assert len(cache) == cache.seen == 2 and type(len(cache)) is int
    assert kv_cache_bytes(np.int64(10), np.int32(2), 2, 4) == kv_cache_bytes(10, 2, 2, 4) == 2 * 10 * 2 * 2 * 4 * 2
    assert kv_cache_bytes(0, 2, 2, 4) == 0  # no token, no bytes


def test_rotary_angles_refuse_an_odd_head_size():
    with pytest.raises(ValueError, match="head_size must be even"):
        rope_cos_sin(torch.arange(3), 5)  # HS + 1 columns, silently, before


@pytest.mark.parametrize("impl", ["sdpa", "explicit", "tiled"])
def test_every_path_takes_booleans_only_for_is_causal(impl):
    q = torch.randn(1, 2, 4, 8)
    for bad in ("no", 1, None, torch.tensor(True)):
        with pytest.raises(TypeError, match="is_causal must be True or False"):
            attend(q, q, q, is_causal=bad, impl=impl)
    with pytest.raises(TypeError, match="is_causal must be True or False"):
        tiled_attention(q, q, q, is_causal="no")  # ran causal, before
    with pytest.raises(ValueError, match="window=2 needs is_causal=True"):
        attend(q, q, q, window=2, impl=impl)


@pytest.mark.parametrize("impl", ["sdpa", "explicit", "tiled"])
def test_a_mask_of_higher_rank_than_the_scores_is_refused_on_every_path(impl):
    """Single-head q (B, S, HS) has (B, S, S_kv) scores: a 4-D mask would broadcast them to (B, B, S, S_kv)."""
    q, k = torch.randn(2, 4, 8), torch.randn(2, 5, 8)
    for mask in (torch.ones(2, 1, 1, 5, dtype=torch.bool), torch.ones(1, 1, 4, 5, dtype=torch.bool)):
        expect_clear_error(lambda mask=mask: attend(q, k, k, mask=mask, impl=impl))
        with pytest.raises(ValueError, match=r"got \(\d, 1, \d, 5\)"):
            attend(q, k, k, mask=mask, impl=impl)
    expect_clear_error(lambda: explicit_attention(q, k, k, torch.ones(2, 1, 1, 5, dtype=torch.bool)))
    expect_clear_error(lambda: tiled_attention(q, k, k, torch.ones(2, 1, 1, 5, dtype=torch.bool)))


@pytest.mark.parametrize("impl", ["sdpa", "explicit", "tiled"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_call_of_no_token_returns_no_token(kind, impl):
    """S = 0 is an empty batch of queries, not an error: (B, 0, C) out, and (B, NH, 0, S_kv) weights."""
    layer = make_any(kind).eval()
    for module in layer.modules():
        if hasattr(module, "attn_impl") and not isinstance(module, SingleHeadAttention):
            module.attn_impl = impl
    with torch.no_grad():
        out = run_any(layer, torch.randn(2, 0, 8), context=torch.randn(2, 3, 6))
    assert out.shape == (2, 0, 8)
    if kind in ("cross", "block"):  # and a context of no token: every query is blind, so zeros
        with torch.no_grad():
            out = run_any(layer, torch.randn(2, 3, 8), context=torch.randn(2, 0, 6))
        assert out.shape == (2, 3, 8) and torch.isfinite(out).all()


# --- the hostile cases one by one ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build,error,match",
    [
        (lambda: BidirectionalAttention(8, 2.0), TypeError, "num_heads must be an int >= 1, got 2.0"),
        (lambda: BidirectionalAttention(8.0, 2), TypeError, "hidden_size must be an int >= 1, got 8.0"),
        (lambda: BidirectionalAttention(-8, 2), ValueError, "hidden_size must be an int >= 1, got -8"),
        (lambda: BidirectionalAttention(8, True), TypeError, "num_heads must be an int >= 1, got True"),
        (lambda: CrossAttention(8, 2, kv_hidden_size=-4), ValueError, "kv_hidden_size must be an int >= 1, got -4"),
        (lambda: CausalAttention(8, 2, 8).new_cache(True), TypeError, "batch_size must be an int >= 1, got True"),
        (lambda: SingleHeadAttention(8.0), TypeError, "hidden_size must be an int >= 1, got 8.0"),
    ],
)
def test_sizes_follow_one_rule(build, error, match):
    with pytest.raises(error, match=match):
        build()


def test_numpy_ints_are_sizes_everywhere():
    layer = CausalAttention(np.int64(8), np.int32(2), np.int64(6))
    assert (layer.hidden_size, layer.num_heads, layer.context_size) == (8, 2, 6)
    assert all(type(v) is int for v in (layer.hidden_size, layer.num_heads, layer.context_size))
    cache = layer.new_cache(np.int64(2), max_length=np.int16(4))
    assert (cache.batch_size, cache.max_length) == (2, 4)
    assert CrossAttention(np.int64(8), 2, kv_hidden_size=np.int64(6)).kv_hidden_size == 6


def test_construction_memory_does_not_grow_with_context_size():
    """CausalAttention(64, 4, 131072) once held a (131072, 131072) bool buffer: 16 GiB. Now it holds no mask."""
    code = (
        "import resource, torch\n"
        "from attention_lib import CausalAttention\n"
        "torch.ones(1)\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "layer = CausalAttention(64, 4, 131072)\n"
        "after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "print((after - before) / 1024)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ)
    grown_mib = float(out.stdout.strip())
    assert grown_mib < 8, f"constructing the layer grew the peak memory by {grown_mib:.1f} MiB"
    layer = CausalAttention(64, 4, 131072).eval()
    assert not list(layer.buffers())
    with torch.no_grad():  # and it still works, with and without padding
        x = torch.randn(2, 5, 64)
        assert torch.allclose(layer(x, padding_mask([5, 3])), layer(x, padding_mask([5, 3]), return_weights=True)[0],
                              atol=1e-5)


# --- torch.compile(fullgraph=True): every layer's forward, and decode ------------------------------------------------


@pytest.mark.parametrize("kind", LAYERS)
def test_forward_compiles_with_fullgraph_and_matches_eager(kind):
    torch._dynamo.reset()
    layer = make_layer(kind, C=16, NH=4).eval()
    compiled = torch.compile(layer, fullgraph=True, dynamic=True)
    with torch.no_grad():
        for S in (5, 7):  # a second length: the dynamic graph serves both
            x, context = torch.randn(2, S, 16), torch.randn(2, 4, 6)
            S_kv = 4 if kind == "cross" else S
            mask = padding_mask([S_kv, 2], seq_len=S_kv)
            for m in (None, mask):
                expected = run(layer, x, m, context)
                torch.testing.assert_close(run(compiled, x, m, context), expected, atol=1e-5, rtol=1e-5)


def test_decode_compiles_with_fullgraph_and_matches_eager():
    torch._dynamo.reset()
    layer = CausalAttention(16, 4, 32).eval()
    decode = torch.compile(layer.decode, fullgraph=True, dynamic=True)
    cache, eager_cache = layer.new_cache(2), layer.new_cache(2)
    x = torch.randn(2, 6, 16)
    with torch.no_grad():
        for start, stop in [(0, 3), (3, 4), (4, 5), (5, 6)]:
            torch.testing.assert_close(
                decode(x[:, start:stop], cache), layer.decode(x[:, start:stop], eager_cache), atol=1e-5, rtol=1e-5
            )
    assert len(cache) == len(eager_cache) == 6


@pytest.mark.parametrize("impl", ["sdpa", "explicit", "tiled"])
def test_a_bias_that_does_not_broadcast_and_an_integer_mask_get_the_packages_words(impl):
    q = torch.randn(2, 3, 4, 8)
    expect_clear_error(lambda: attend(q, q, q, bias=torch.randn(7, 7), impl=impl))
    with pytest.raises(ValueError, match=r"bias must broadcast to the scores \(2, 3, 4, 4\), got \(7, 7\)"):
        attend(q, q, q, bias=torch.randn(7, 7), impl=impl)
    for mask in (torch.ones(4, 4, dtype=torch.int64), torch.ones(4, 4), [[True] * 4] * 4):
        with pytest.raises(TypeError, match="mask must be a bool tensor, True = may attend"):
            masked_softmax(torch.randn(4, 4), mask)
