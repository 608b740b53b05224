"""Caches through `forward`, as property tests over every layer that writes one (CausalAttention, every option of
GroupedQueryAttention, DecoderBlock): a prompt and then single tokens through `layer(x, cache=c)` equal the full
forward, with and without padding; a call refused at any step, by any of its checks, leaves the cache byte for byte
as it was, and so does a call whose attention fails after every check; the caches' own `append` refuses the same
way. Plus the `Cache` protocol itself: `extend` keeps nothing, `commit` keeps what `extend` showed."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import padding

from attention_lib import (
    Cache,
    CausalAttention,
    DecoderBlock,
    GroupedQueryAttention,
    KVCache,
    SlidingWindowCache,
    padding_positions,
    register_attention_impl,
)
from attention_lib import functional as functional_module

C, NH, CONTEXT = 16, 4, 12
KINDS = ["causal", "grouped", "block"]


def make(kind: str, nkv: int = 2, rope: bool = False, alibi: bool = False, window: int | None = None):
    torch.manual_seed(0)
    if kind == "causal":
        return CausalAttention(C, NH, CONTEXT).eval()
    if kind == "block":
        return DecoderBlock(C, NH, 2 * C, CONTEXT, kv_hidden_size=6).eval()
    return GroupedQueryAttention(C, NH, nkv, CONTEXT, rope_theta=1e3 if rope else None, alibi=alibi,
                                 window=window).eval()


def call(layer, x, mask=None, cache=None, positions=None, context=None, context_mask=None):
    """One call of any of the three layers: the block takes its context too."""
    if isinstance(layer, DecoderBlock):
        return layer(x, context, mask, context_mask, cache=cache)
    return layer(x, mask, cache=cache, positions=positions)


def snapshot(cache: Cache) -> tuple:
    """Everything a cache holds, to the byte: its storage, its counts, and what a commit would keep."""
    return (cache._keys.clone().view(torch.uint8), cache._values.clone().view(torch.uint8), len(cache), cache.seen,
            cache._staged)


def same(cache: Cache, before: tuple) -> bool:
    now = snapshot(cache)
    return torch.equal(now[0], before[0]) and torch.equal(now[1], before[1]) and now[2:] == before[2:]


options = st.fixed_dictionaries({
    "kind": st.sampled_from(KINDS),
    "nkv": st.sampled_from([1, 2, 4]),
    "rope": st.booleans(),
    "alibi": st.booleans(),
    "window": st.sampled_from([None, 2, 3, 5]),
})


def prepare(opts, B: int = 2, S: int = 9):
    """The layer, its inputs (x, a left-padded mask or None, positions, a context and its mask)."""
    layer = make(**opts)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(B, S, C, generator=g)  # (B, S, C)
    context = torch.randn(B, 5, 6, generator=g)  # (B, S_kv, C_kv): the block's
    return layer, x, context


# --- a prompt, then single tokens ----------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(opts=options, padded=st.booleans(), prompt=st.integers(1, 5),
       impl=st.sampled_from(["sdpa", "explicit", "tiled"]))
def test_a_prompt_then_single_tokens_equal_the_full_forward(opts, padded, prompt, impl):
    layer, x, context = prepare(opts)
    layer.attn_impl = impl
    B, S, _ = x.shape
    pad = torch.cat([padding([prompt, max(1, prompt - 2)], prompt, left=True), torch.ones(B, S - prompt, dtype=bool)],
                    dim=1) if padded else None  # (B, S): left-padded prompts, then real tokens
    positions = None if pad is None else padding_positions(pad)  # (B, S)
    context_mask = padding([5, 3], 5)  # (B, S_kv)
    with torch.no_grad():
        full = call(layer, x, pad, None, positions, context, context_mask)  # (B, S, C)
        cache = layer.new_cache(B)
        parts = []
        for start, stop in [(0, prompt)] + [(t, t + 1) for t in range(prompt, S)]:
            parts.append(call(layer, x[:, start:stop], None if pad is None else pad[:, :stop], cache,
                              None if positions is None else positions[:, start:stop], context, context_mask))
    assert cache.seen == S and len(cache) == (S if cache.window is None else min(S, cache.window))
    real = torch.ones(B, S, dtype=torch.bool) if pad is None else pad  # padded queries see nothing in both: compare all
    torch.testing.assert_close(torch.cat(parts, dim=1)[real], full[real], atol=1e-5, rtol=1e-5)


# --- a refused call leaves the cache as it was ---------------------------------------------------------------------

REFUSALS = [
    "x of another width", "x of integers", "x in float64", "x without a batch axis", "x on the meta device",
    "a float mask", "a mask of the wrong length", "a mask of another batch", "a mask on the meta device",
    "a 3-D mask per sequence", "positions of the wrong length", "float positions", "another batch",
    "past context_size", "gradients enabled", "a cache of other heads", "not a cache", "tiled with dropout",
    "a context of another width", "a context mask of the wrong length",
]


def refused(name: str, layer, x, mask, positions, context, context_mask, cache):
    """The arguments of a call that `name` makes wrong, from good ones; None when it does not apply to the layer."""
    block, B, S = isinstance(layer, DecoderBlock), x.shape[0], x.shape[1]
    total = cache.seen + S
    args = dict(x=x, mask=mask, positions=positions, context=context, context_mask=context_mask, cache=cache)
    change = {
        "x of another width": dict(x=torch.randn(B, S, C + 1)),
        "x of integers": dict(x=x.long()),
        "x in float64": dict(x=x.double()),
        "x without a batch axis": dict(x=x[0]),
        "x on the meta device": dict(x=x.to("meta")),
        "a float mask": dict(mask=torch.ones(B, total)),
        "a mask of the wrong length": dict(mask=torch.ones(B, total + 1, dtype=torch.bool)),
        "a mask of another batch": dict(mask=torch.ones(B + 1, total, dtype=torch.bool)),
        "a mask on the meta device": dict(mask=torch.ones(B, total, dtype=torch.bool, device="meta")),
        "a 3-D mask per sequence": dict(mask=torch.ones(B, S, total, dtype=torch.bool)),
        "positions of the wrong length": None if block else dict(positions=torch.arange(S + 1)),
        "float positions": None if block else dict(positions=torch.arange(S).float()),
        "another batch": dict(x=torch.randn(B + 1, S, C), mask=None, positions=None, context=None,
                              context_mask=None) if not block else dict(x=torch.randn(B + 1, S, C)),
        "past context_size": dict(x=torch.randn(B, CONTEXT - cache.seen + 1, C), mask=None, positions=None),
        "gradients enabled": "grad",
        "a cache of other heads": dict(cache=KVCache(B, 8, C // NH, CONTEXT)),
        "not a cache": dict(cache=(cache.keys, cache.values)),
        "tiled with dropout": "tiled",
        "a context of another width": dict(context=torch.randn(B, 5, 7)) if block else None,
        "a context mask of the wrong length": dict(context_mask=torch.ones(B, 4, dtype=torch.bool)) if block else None,
    }[name]
    if change is None:
        return None
    return change if isinstance(change, str) else args | change


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(opts=options, step=st.integers(0, 4), refusal=st.sampled_from(REFUSALS), padded=st.booleans())
def test_a_refused_call_at_any_step_leaves_the_cache_byte_identical(opts, step, refusal, padded):
    layer, x, context = prepare(opts)
    B, S, _ = x.shape
    pad = padding([S, S - 3], S, left=True) if padded else None  # (B, S)
    positions = None if pad is None else padding_positions(pad)
    context_mask = padding([5, 3], 5)
    cache = layer.new_cache(B)
    with torch.no_grad():
        call(layer, x[:, :3], None if pad is None else pad[:, :3], cache,  # a prompt, then `step` single tokens
             None if positions is None else positions[:, :3], context, context_mask)
        for t in range(3, 3 + step):
            call(layer, x[:, t : t + 1], None if pad is None else pad[:, : t + 1], cache,
                 None if positions is None else positions[:, t : t + 1], context, context_mask)
    t = 3 + step
    good = dict(x=x[:, t : t + 1], mask=None if pad is None else pad[:, : t + 1],
                positions=None if positions is None else positions[:, t : t + 1], context=context,
                context_mask=context_mask)
    args = refused(refusal, layer, cache=cache, **good)
    if args is None:
        return
    before = snapshot(cache)
    if args == "grad":  # a cache keeps no gradients: a call with them enabled is refused
        with pytest.raises(RuntimeError, match="without gradients"):
            call(layer, **good, cache=cache)
    elif args == "tiled":  # the tiled path has no attention dropout: refused in training mode
        attn = layer.self_attn if isinstance(layer, DecoderBlock) else layer
        attn.attn_impl, attn.attn_drop = "tiled", 0.1
        with torch.no_grad(), pytest.raises(ValueError, match="no attention dropout"):
            call(layer.train(), **good, cache=cache)
    else:
        with torch.no_grad(), pytest.raises((TypeError, ValueError)):
            call(layer, **args)
    assert same(cache, before), refusal
    with torch.no_grad():  # and the next valid step is the right one
        attn = layer.self_attn if isinstance(layer, DecoderBlock) else layer
        attn.attn_impl, attn.attn_drop = "sdpa", 0.0
        layer.eval()
        step_out = call(layer, **good, cache=cache)
        full = call(layer, x[:, : t + 1], None if pad is None else pad[:, : t + 1], None,
                    None if positions is None else positions[:, : t + 1], context, context_mask)
    torch.testing.assert_close(step_out[:, -1], full[:, -1], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", KINDS + ["rolling"])
def test_a_call_whose_attention_fails_after_every_check_keeps_nothing(kind, monkeypatch):
    """The attention itself fails (a path registered to raise): the cache shows nothing of the call."""
    layer = make("grouped", window=3) if kind == "rolling" else make(kind)
    x, context = torch.randn(2, 6, C), torch.randn(2, 5, 6)
    cache = layer.new_cache(2)
    with torch.no_grad():
        call(layer, x[:, :4], cache=cache, context=context)

    def broken(q, k, v, **kwargs):
        raise RuntimeError("a path that fails after every check has passed")

    monkeypatch.setitem(functional_module._ATTENTION_IMPLS, "test-broken", broken)
    keys, values, length, seen = cache.keys.clone(), cache.values.clone(), len(cache), cache.seen
    layer.attn_impl = "test-broken"
    with torch.no_grad(), pytest.raises(RuntimeError, match="a path that fails"):
        call(layer, x[:, 4:5], cache=cache, context=context)
    assert (len(cache), cache.seen) == (length, seen)
    assert torch.equal(cache.keys, keys) and torch.equal(cache.values, values)
    layer.attn_impl = "sdpa"
    with torch.no_grad():
        step = call(layer, x[:, 4:6], cache=cache, context=context)
        full = call(layer, x, context=context)
    torch.testing.assert_close(step, full[:, 4:6], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("make_cache", [lambda: KVCache(2, 2, 4, 8), lambda: SlidingWindowCache(2, 2, 4, window=3)])
@pytest.mark.parametrize("bad", [
    lambda k: (k[:1], k[:1]),  # another batch
    lambda k: (k[:, :1], k[:, :1]),  # other heads
    lambda k: (k.double(), k.double()),  # another dtype
    lambda k: (k, torch.randn(2, 2, 2, 4)),  # k and v of different shapes
    lambda k: (k[0], k[0]),  # not 4-D
    lambda k: (k.requires_grad_(), k),  # gradients, with gradients enabled
    lambda k: (torch.randn(2, 2, 9, 4), torch.randn(2, 2, 9, 4)),  # more than a KVCache of 8 holds
])
def test_append_refuses_without_writing(make_cache, bad):
    cache = make_cache()
    cache.append(torch.randn(2, 2, 3, 4), torch.randn(2, 2, 3, 4))
    before = snapshot(cache)
    k, v = bad(torch.randn(2, 2, 1, 4))
    try:
        cache.append(k, v)
    except (TypeError, ValueError, RuntimeError):
        pass
    else:
        assert isinstance(cache, SlidingWindowCache) and k.shape[2] == 9  # a rolling cache always has room
        return
    assert same(cache, before)


def test_extend_keeps_nothing_and_commit_keeps_what_extend_showed():
    for cache in (KVCache(1, 2, 4, 8), SlidingWindowCache(1, 2, 4, window=3)):
        ks = torch.randn(1, 2, 6, 4)
        cache.append(ks[:, :, :2], ks[:, :, :2])
        keys, _ = cache.extend(ks[:, :, 2:4], ks[:, :, 2:4])  # (1, 2, S_kv, 4): kept ones, then the new ones
        assert len(cache) == 2 and cache.seen == 2 and torch.equal(cache.keys, ks[:, :, :2])
        assert torch.equal(keys[:, :, -2:], ks[:, :, 2:4])
        cache.commit()
        assert cache.seen == 4 and torch.equal(cache.keys, ks[:, :, max(0, 4 - (cache.window or 8)) : 4])
        with pytest.raises(RuntimeError, match="nothing to commit"):
            cache.commit()
        assert isinstance(cache, Cache)


def test_a_registered_path_with_dropout_false_is_refused_before_any_work():
    def no_dropout(q, k, v, **kwargs):
        raise AssertionError("the path ran")

    register_attention_impl("test-no-dropout", no_dropout, dropout=False)
    try:
        layer = CausalAttention(C, NH, CONTEXT, attn_drop=0.5, attn_impl="test-no-dropout").train()
        cache = layer.new_cache(1)
        before = snapshot(cache)
        with pytest.raises(ValueError, match="'test-no-dropout' has no attention dropout"), torch.no_grad():
            layer(torch.randn(1, 2, C), cache=cache)
        assert same(cache, before)
    finally:
        functional_module._ATTENTION_IMPLS.pop("test-no-dropout")
        functional_module._WITHOUT_DROPOUT.discard("test-no-dropout")


# --- steps that broadcast, steps of no token, inference mode -------------------------------------------------------

BROADCAST_MASKS = {  # masks prepare_mask accepts that broadcast over the keys: all True, so they hide nothing
    "a scalar": lambda B, S, total: torch.tensor(True),
    "(1, 1, 1, 1)": lambda B, S, total: torch.ones(1, 1, 1, 1, dtype=torch.bool),
    "(B, 1, S_new, 1)": lambda B, S, total: torch.ones(B, 1, S, 1, dtype=torch.bool),
    "(B, S_total)": lambda B, S, total: torch.ones(B, total, dtype=torch.bool),
}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(opts=options, steps=st.lists(st.sampled_from([0, 1, 2]), min_size=1, max_size=6),
       mask=st.sampled_from(sorted(BROADCAST_MASKS)), impl=st.sampled_from(["sdpa", "explicit", "tiled"]))
def test_masks_that_broadcast_over_the_keys_and_calls_of_no_token_are_steps_like_any_other(opts, steps, mask, impl):
    """A rolling cache sliced a mask's size-1 key axis to 0 and wrote before failing; a call of no token shortened it.
    Here any step of 0, 1 or 2 tokens, with any of these masks, gives the full forward's rows, and a step of no token
    leaves the cache as it was."""
    layer, x, context = prepare(opts)
    layer.attn_impl = impl
    B = x.shape[0]
    cache, outs, t = layer.new_cache(B), [], 0
    with torch.no_grad():
        full = call(layer, x, context=context)  # (B, S, C)
        for n in [2] + steps:
            n = min(n, x.shape[1] - t)
            before = snapshot(cache)
            out = call(layer, x[:, t : t + n], BROADCAST_MASKS[mask](B, n, t + n), cache, context=context)
            assert out.shape == (B, n, C)
            if n == 0:
                assert same(cache, before), "a call of no token changed the cache"
            outs.append(out)
            t += n
    assert cache.seen == t
    torch.testing.assert_close(torch.cat(outs, dim=1), full[:, :t], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", KINDS + ["rolling"])
def test_a_cache_made_in_inference_mode_is_refused_outside_it_and_kept_whole(kind):
    """torch writes an inference tensor outside inference mode and only then raises: the cache refuses first."""
    layer = make("grouped", window=3) if kind == "rolling" else make(kind)
    x, context = torch.randn(2, 6, C), torch.randn(2, 5, 6)
    with torch.inference_mode():
        cache = layer.new_cache(2)
        call(layer, x[:, :4], cache=cache, context=context)
    before = snapshot(cache)
    with torch.no_grad(), pytest.raises(RuntimeError, match="made under torch.inference_mode"):
        call(layer, x[:, 4:5], cache=cache, context=context)
    assert same(cache, before)
    with torch.inference_mode():
        step = call(layer, x[:, 4:6], cache=cache, context=context)
        full = call(layer, x, context=context)
    torch.testing.assert_close(step, full[:, 4:6], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", KINDS + ["rolling"])
def test_a_cache_filled_in_inference_mode_then_written_under_no_grad_keeps_every_token(kind):
    layer = make("grouped", window=3) if kind == "rolling" else make(kind)
    x, context = torch.randn(2, 6, C), torch.randn(2, 5, 6)
    cache = layer.new_cache(2)  # made outside inference mode: writable in both
    with torch.inference_mode():
        call(layer, x[:, :4], cache=cache, context=context)
    with torch.no_grad():
        step = call(layer, x[:, 4:6], cache=cache, context=context)
        full = call(layer, x, context=context)
    assert cache.seen == 6
    torch.testing.assert_close(step, full[:, 4:6], atol=1e-5, rtol=1e-5)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(window=st.sampled_from([1, 2, 3, 5]), filled=st.integers(1, 9), undo=st.integers(0, 9))
def test_a_rolling_cache_undoes_only_what_it_still_holds(window, filled, undo):
    """After the window has filled, the oldest tokens are gone: crop refuses to undo more than the next step can be
    computed from (and changes nothing then); every crop it accepts lets the next step equal the full forward."""
    layer = make("grouped", window=window)
    x = torch.randn(1, 10, C, generator=torch.Generator().manual_seed(window * 100 + filled))
    cache = layer.new_cache(1)
    with torch.no_grad():
        call(layer, x[:, :filled], cache=cache)
    if undo > len(cache):
        return
    before = snapshot(cache)
    try:
        cache.crop(len(cache) - undo)
    except ValueError as error:
        assert "can undo at most" in str(error) and same(cache, before)
        return
    t = cache.seen  # the position of the next token
    with torch.no_grad():
        step = call(layer, x[:, t : t + 1], cache=cache)
        full = call(layer, x[:, : t + 1])
    torch.testing.assert_close(step[:, -1], full[:, -1], atol=1e-5, rtol=1e-5)
