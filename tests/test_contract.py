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
    ContextKV,
    CrossAttention,
    KVCache,
    SingleHeadAttention,
    attend,
    attention_impls,
    causal_mask,
    explicit_attention,
    padding_mask,
    sdpa_attention,
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


@settings(max_examples=150, deadline=None)
@given(
    which=st.sampled_from(["hidden_size", "num_heads", "context_size", "kv_hidden_size", "attn_drop", "out_drop"]),
    kind=st.sampled_from(["single", "bidirectional", "causal", "cross"]),
    data=st.data(),
)
def test_constructors_refuse_bad_arguments(which, kind, data):
    value = data.draw(not_a_probability if which.endswith("drop") else not_a_size, label=which)
    assume(not (which == "kv_hidden_size" and value is None))  # None means "the width of x", a valid choice
    args = {"hidden_size": 8, "num_heads": 2, "context_size": 8, "kv_hidden_size": 6, "attn_drop": 0.1, "out_drop": 0.1}
    args[which] = value
    constructors = {
        "single": lambda: SingleHeadAttention(args["hidden_size"]),
        "bidirectional": lambda: BidirectionalAttention(
            args["hidden_size"], args["num_heads"], attn_drop=args["attn_drop"], out_drop=args["out_drop"]
        ),
        "causal": lambda: CausalAttention(
            args["hidden_size"], args["num_heads"], args["context_size"], args["attn_drop"], args["out_drop"]
        ),
        "cross": lambda: CrossAttention(
            args["hidden_size"], args["num_heads"], args["kv_hidden_size"], args["attn_drop"], args["out_drop"]
        ),
    }
    uses = {
        "single": {"hidden_size"},
        "bidirectional": {"hidden_size", "num_heads", "attn_drop", "out_drop"},
        "causal": {"hidden_size", "num_heads", "context_size", "attn_drop", "out_drop"},
        "cross": {"hidden_size", "num_heads", "kv_hidden_size", "attn_drop", "out_drop"},
    }
    if which in uses[kind]:
        expect_clear_error(constructors[kind])


def bad_x_strategy(C: int):
    return st.one_of(
        st.none(), st.just([[[0.0] * C]]), st.just(np.zeros((1, 2, C), dtype=np.float32)),
        st.sampled_from([(2, C), (1, 2, C, 1), (1, 2, C + 1), (1, 2, 1)]).map(lambda s: torch.randn(*s)),
        st.sampled_from([torch.int64, torch.bool, torch.float64, torch.float16]).map(
            lambda d: torch.ones(1, 2, C, dtype=d)
        ),
        st.just(torch.ones(1, 2, C, device="meta")),
    )


def bad_mask_strategy(B: int, S: int, S_kv: int):
    return st.one_of(
        st.just([[True] * S_kv] * B),
        st.sampled_from([torch.float32, torch.int64, torch.uint8, torch.float64]).map(
            lambda d: torch.ones(B, S_kv, dtype=d)
        ),
        st.sampled_from([(B, S_kv + 1), (B + 1, S_kv), (S_kv + 1,), (B, 2, 1, S + 1, S_kv), (B, 5, S, S_kv)]).map(
            lambda s: torch.ones(*s, dtype=torch.bool)
        ),
        st.just(torch.ones(B, S_kv, dtype=torch.bool, device="meta")),
    )


@settings(max_examples=150, deadline=None)
@given(kind=st.sampled_from(LAYERS), data=st.data())
def test_forward_refuses_bad_x_and_bad_masks(kind, data):
    layer = make_layer(kind, C=8, NH=2).eval()
    B, S, S_kv = 2, 3, 4 if kind == "cross" else 3
    good_x, good_context = torch.randn(B, S, 8), torch.randn(B, S_kv, 6)
    what = data.draw(st.sampled_from(["x", "mask", "context"] if kind == "cross" else ["x", "mask"]), label="what")
    x, mask, context = good_x, None, good_context
    if what == "x":
        x = data.draw(bad_x_strategy(8), label="x")
    elif what == "mask":
        mask = data.draw(bad_mask_strategy(B, S, S_kv), label="mask")
    else:
        context = data.draw(
            st.one_of(bad_x_strategy(6), st.just((good_context, good_context)), st.just(torch.randn(B + 1, S_kv, 6))),
            label="context",
        )
    with torch.no_grad():
        expect_clear_error(lambda: run(layer, x, mask, context))


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
    else:  # None is valid where the argument is optional (a mask, seq_len, kv_len, max_length): nothing else is
        assert value is None


# --- the hostile cases one by one ------------------------------------------------------------------------------------


def test_a_failed_decode_leaves_the_cache_as_it_was():
    layer = CausalAttention(16, 4, 8).eval()
    cache, clean = layer.new_cache(2), layer.new_cache(2)
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        layer.decode(x[:, :3], cache)
        layer.decode(x[:, :3], clean)
        failing = [
            lambda: layer.decode(x[:, 3:4], cache, mask=torch.ones(2, 4, dtype=torch.bool, device="meta")),
            lambda: layer.decode(x[:, 3:4].double(), cache),
            lambda: layer.decode(x[:, 3:4], cache, mask=torch.ones(2, 4)),
        ]
        for call in failing:
            with pytest.raises((TypeError, ValueError)):
                call()
            assert len(cache) == 3
        with pytest.raises(ValueError, match="attn_impl"):
            layer.attn_impl = "no-such-path"  # refused when set
        assert len(cache) == 3
        retry, expected = layer.decode(x[:, 3:5], cache), layer.decode(x[:, 3:5], clean)  # the retry is exact
    assert len(cache) == 5 and torch.equal(retry, expected) and torch.equal(cache.keys, clean.keys)


@pytest.mark.parametrize("kind", LAYERS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_x_of_another_dtype_gets_a_clear_error(kind, dtype):
    layer = make_layer(kind)
    x, context = torch.randn(2, 3, 8), torch.randn(2, 4, 6)
    with pytest.raises(TypeError, match=rf"x must have the layer's dtype torch.float32, got {dtype}"):
        run(layer, x.to(dtype), None, context)
    if kind == "cross":
        with pytest.raises(TypeError, match=rf"context must have the layer's dtype torch.float32, got {dtype}"):
            layer(x, context.to(dtype))
        kv = layer.project_context(context)
        with pytest.raises(TypeError, match=rf"context.k must have the layer's dtype torch.float32, got {dtype}"):
            layer(x, ContextKV(kv.k.to(dtype), kv.v.to(dtype)))


@pytest.mark.parametrize("kind", LAYERS)
def test_a_mask_on_another_device_gets_a_clear_error(kind):
    layer = make_layer(kind)
    S_kv = 4 if kind == "cross" else 3
    mask = torch.ones(2, S_kv, dtype=torch.bool, device="meta")
    with pytest.raises(ValueError, match=r"mask must be on the device of x \(cpu\), got a mask on meta"):
        run(layer, torch.randn(2, 3, 8), mask, torch.randn(2, 4, 6))


@pytest.mark.parametrize("kind", ["bidirectional", "causal", "cross"])
@pytest.mark.parametrize("name", ["attn_drop", "out_drop"])
@pytest.mark.parametrize("p", [-0.5, 1.5])
def test_dropout_rates_outside_0_1_are_refused_at_construction(kind, name, p):
    with pytest.raises(ValueError, match=rf"{name} must be a float in \[0, 1\], got {p}"):
        make_layer(kind, **{name: p})


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
