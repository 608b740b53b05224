"""GroupedQueryAttention and its pieces (notebook 08): an independent float64 reference for every variant, parity
with Hugging Face's Llama, Mistral, Falcon and BLOOM attention modules (padding and position_ids included), cached
decoding equal to the full forward, the rolling cache, RoPE, ALiBi and window helpers against their definitions,
the weight loaders, the explorer, and clear errors for bad arguments."""

from __future__ import annotations

import traceback
from pathlib import Path

import numpy as np
import pytest
import torch
from reference import causal, layer64, paper_slopes, rope64, window
from reference import padding as _padding

import attention_lib
import attention_lib.bidirectional as bidirectional
import attention_lib.functional
from attention_lib import (
    CausalAttention,
    GroupedQueryAttention,
    KVCache,
    SlidingWindowCache,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    attend,
    kv_cache_bytes,
    padding_positions,
    repeat_kv,
    rope_cos_sin,
    sliding_window_mask,
)
from attention_lib.hf_interop import grouped_rows, hf_attention_kwargs, load_hf_attention

transformers = pytest.importorskip("transformers")
from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask  # noqa: E402

PACKAGE = Path(attention_lib.__file__).resolve().parent

# ---------------------------------------------------------------------------------------------- helpers



def pad_mask(lengths: list[int], S: int, left: bool) -> torch.Tensor:
    return _padding(lengths, S, left)


def reference(layer: GroupedQueryAttention, x: torch.Tensor, pad: torch.Tensor | None = None, positions=None):
    """The shared float64 reference, with what the layer hides written out: the causal rule (or the window) and
    the padding; returns (out (B, S, C), weights (B, NH, S, S))."""
    S = x.shape[1]
    visible = (causal(S) if layer.window is None else window(S, layer.window))[None]  # (1, S, S)
    visible = visible if pad is None else visible & pad[:, None, :]  # (B, S, S)
    return layer64(layer, x, visible, positions=positions)


EXTRAS = {
    "plain": {},
    "rope": {"rope_theta": 100.0},
    "alibi": {"alibi": True},
    "window": {"window": 3},
    "all": {"rope_theta": 100.0, "alibi": True, "window": 4},
}
KV_HEADS = [8, 4, 2, 1]  # with NH = 8: MHA, two kinds of GQA, MQA


def make(nkv: int, extra: str, C: int = 32, NH: int = 8, context_size: int = 16, **kwargs) -> GroupedQueryAttention:
    return GroupedQueryAttention(C, NH, nkv, context_size, **EXTRAS[extra], **kwargs).eval()


# ---------------------------------------------------------------------------------------------- the layer


@pytest.mark.parametrize("nkv", KV_HEADS)
@pytest.mark.parametrize("extra", list(EXTRAS))
@pytest.mark.parametrize("padding", [None, "right", "left"])
@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
def test_matches_float64_reference(nkv, extra, padding, impl):
    torch.manual_seed(nkv * 7 + len(extra))
    layer = make(nkv, extra, bias=padding == "right")
    layer.attn_impl = impl
    B, S = 3, 9
    x = torch.randn(B, S, 32)
    pad = None if padding is None else pad_mask([9, 6, 2], S, left=padding == "left")
    positions = None if pad is None else padding_positions(pad)
    ref, ref_w = reference(layer, x, pad, positions)
    with torch.no_grad():
        out = layer(x, pad, positions=positions)
        out_w, w = layer(x, pad, return_weights=True, positions=positions)
    assert not out.isnan().any()
    assert torch.allclose(out.double(), ref, atol=1e-5) and torch.allclose(out_w.double(), ref, atol=1e-5)
    assert w.shape == (B, 8, S, S) and torch.allclose(w.double(), ref_w, atol=1e-6)


@pytest.mark.parametrize("extra", list(EXTRAS))
def test_blind_queries_give_zero_weights_and_wo_bias(extra):
    torch.manual_seed(1)
    layer = make(2, extra, bias=True)
    x = torch.randn(2, 6, 32)
    pad = pad_mask([6, 2], 6, left=True)
    for impl in ("sdpa", "explicit"):
        layer.attn_impl = impl
        with torch.no_grad():
            out = layer(x, pad)
            _, w = layer(x, pad, return_weights=True)
        assert not out.isnan().any() and not w.isnan().any()
        assert torch.allclose(out[1, :4], layer.Wo.bias.detach().expand(4, 32), atol=1e-6)
        assert torch.all(w[1, :, :4] == 0)
    everything_hidden = torch.zeros(2, 6, dtype=torch.bool)
    with torch.no_grad():
        assert torch.allclose(layer(x, everything_hidden), layer.Wo.bias.detach().expand(2, 6, 32), atol=1e-6)


def test_mha_case_is_causal_attention_with_the_same_state_dict():
    torch.manual_seed(2)
    causal = CausalAttention(32, 8, context_size=16).eval()
    mha = GroupedQueryAttention(32, 8, 8, context_size=16, bias=True).eval()
    mha.load_state_dict(causal.state_dict())
    assert set(mha.state_dict()) == set(causal.state_dict())
    x = torch.randn(3, 7, 32)
    pad = pad_mask([7, 4, 1], 7, left=True)
    with torch.no_grad():
        assert torch.allclose(mha(x, pad), causal(x, pad), atol=1e-6)
        assert torch.allclose(mha(x), causal(x), atol=1e-6)


def test_rope_depends_on_relative_positions_only():
    torch.manual_seed(3)
    layer = make(2, "rope")
    x = torch.randn(2, 7, 32)
    with torch.no_grad():
        out = layer(x)
        assert torch.allclose(layer(x, positions=torch.arange(7) + 50), out, atol=1e-5)
        assert torch.allclose(
            layer(x, positions=torch.tensor([[0, 1, 2, 3, 4, 5, 6], [9, 10, 11, 12, 13, 14, 15]])), out, atol=1e-5
        )
        assert not torch.allclose(layer(x, positions=torch.tensor([0, 1, 2, 3, 5, 6, 7])), out, atol=1e-3)
        plain = make(2, "plain")
        assert torch.equal(plain(x, positions=torch.arange(7) + 50), plain(x))  # no RoPE: positions are unused


def test_left_padding_with_padding_positions_equals_the_sequence_alone():
    torch.manual_seed(4)
    for extra in ("rope", "alibi", "all"):
        layer = make(2, extra)
        x = torch.randn(1, 5, 32)
        padded = torch.cat([torch.randn(1, 3, 32), x], dim=1)  # three pads in front
        pad = pad_mask([5], 8, left=True)
        with torch.no_grad():
            alone = layer(x)
            with_pads = layer(padded, pad, positions=padding_positions(pad))
        assert torch.allclose(with_pads[:, 3:], alone, atol=1e-5)


def test_padding_positions():
    pad = pad_mask([4, 2, 0], 4, left=True)
    assert padding_positions(pad).tolist() == [[0, 1, 2, 3], [0, 0, 0, 1], [0, 0, 0, 0]]
    assert padding_positions(pad_mask([3], 4, left=False)).tolist() == [[0, 1, 2, 0]]  # padding gets 0 on the right too


def test_padding_positions_are_hugging_face_generations_position_ids():
    """What `generate` derives from an attention_mask, for left, right and inner padding (right padding used to
    give its padding the last real position, 1 in [1, 1, 0] -> [0, 1, 1], where Hugging Face writes 0)."""
    from transformers.generation.utils import GenerationMixin

    masks = [pad_mask([5, 3, 1, 0], 5, left=True), pad_mask([5, 3, 1, 0], 5, left=False),
             torch.tensor([[True, False, True, True, False], [False, True, False, False, True]])]
    for mask in masks:
        hf = GenerationMixin._prepare_position_ids_for_generation(None, mask.long(), {"attention_mask": mask.long()})
        assert torch.equal(padding_positions(mask), hf), mask


def test_gradcheck_on_both_paths():
    torch.manual_seed(5)
    layer = GroupedQueryAttention(8, 4, 2, 6, bias=True, rope_theta=10.0, alibi=True, window=3).double()
    x = torch.randn(2, 5, 8, dtype=torch.float64, requires_grad=True)
    pad = pad_mask([5, 3], 5, left=True)
    for impl in ("sdpa", "explicit"):
        layer.attn_impl = impl
        assert torch.autograd.gradcheck(lambda t: layer(t, pad, positions=padding_positions(pad)), (x,))


def test_dropout_only_in_training():
    torch.manual_seed(6)
    layer = GroupedQueryAttention(32, 8, 2, 16, attn_drop=0.5, alibi=True)
    x = torch.randn(2, 6, 32)
    layer.eval()
    with torch.no_grad():
        assert torch.equal(layer(x), layer(x))
    layer.train()
    for impl in ("sdpa", "explicit"):
        layer.attn_impl = impl
        with torch.no_grad():
            assert not torch.allclose(layer(x), layer(x))


def test_float64_layer():
    torch.manual_seed(7)
    layer = make(2, "all").double()
    x = torch.randn(2, 6, 32, dtype=torch.float64)
    assert layer.slopes.dtype == torch.float64
    with torch.no_grad():
        assert torch.allclose(layer(x), reference(layer, x)[0], atol=1e-12)


# ---------------------------------------------------------------------------------------------- cached decoding


def decode_in_chunks(layer, x, pad, positions, chunks, cache=None):
    cache = layer.new_cache(x.shape[0]) if cache is None else cache
    outs, start = [], 0
    for n in chunks:
        end = start + n
        outs.append(
            layer.decode(
                x[:, start:end],
                cache,
                None if pad is None else pad[:, :end],
                positions=None if positions is None else positions[:, start:end],
            )
        )
        start = end
    return torch.cat(outs, dim=1), cache


@pytest.mark.parametrize("nkv", KV_HEADS)
@pytest.mark.parametrize("extra", list(EXTRAS))
@pytest.mark.parametrize("padding", [None, "left"])
@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
def test_cached_decoding_equals_full_forward(nkv, extra, padding, impl):
    torch.manual_seed(nkv + 3 * len(extra))
    layer = make(nkv, extra)
    layer.attn_impl = impl
    B, S = 3, 12
    x = torch.randn(B, S, 32)
    pad = None
    if padding:
        pad = torch.cat([pad_mask([5, 3, 1], 5, left=True), torch.ones(B, S - 5, dtype=torch.bool)], dim=1)
    positions = None if pad is None else padding_positions(pad)
    with torch.no_grad():
        full = layer(x, pad, positions=positions)
        for chunks in ([5] + [1] * 7, [1] * 12, [12], [2, 3, 1, 4, 2]):
            cached, cache = decode_in_chunks(layer, x, pad, positions, chunks)
            assert torch.allclose(cached, full, atol=1e-5), chunks
            assert isinstance(cache, SlidingWindowCache) == (layer.window is not None)
            assert len(cache) == (S if layer.window is None else min(S, layer.window))
            assert cache.keys.shape == (B, nkv, len(cache), layer.head_size)


def test_decode_weights_are_rows_of_the_forward_weights():
    torch.manual_seed(8)
    x = torch.randn(2, 9, 32)
    pad = pad_mask([9, 6], 9, left=True)
    for extra in ("alibi", "window"):
        layer = make(2, extra)
        with torch.no_grad():
            _, w_full = layer(x, pad, return_weights=True, positions=padding_positions(pad))
            cache = layer.new_cache(2)
            layer.decode(x[:, :6], cache, pad[:, :6], positions=padding_positions(pad)[:, :6])
            _, w = layer.decode(
                x[:, 6:8], cache, pad[:, :8], return_weights=True, positions=padding_positions(pad)[:, 6:8]
            )
        S_kv = w.shape[-1]  # all 8 keys, or the window's kept ones followed by the 2 new
        assert w.shape == (2, 8, 2, S_kv)
        assert torch.allclose(w, w_full[:, :, 6:8, 8 - S_kv : 8], atol=1e-6)
        assert torch.all(w_full[:, :, 6:8, : 8 - S_kv] == 0)  # what the rolling cache forgot had weight 0


def test_single_token_decoding_folds_the_groups_instead_of_copying_the_cache(monkeypatch):
    torch.manual_seed(9)
    layer = make(2, "all")
    x = torch.randn(2, 6, 32)
    with torch.no_grad():
        full = layer(x)
        cache = layer.new_cache(2)
        first = layer.decode(x[:, :5], cache)

        def no_copy(t, groups):
            raise AssertionError("repeat_kv called for a single new token")

        monkeypatch.setattr(bidirectional, "repeat_kv", no_copy)
        last = layer.decode(x[:, 5:], cache)
    assert torch.allclose(torch.cat([first, last], dim=1), full, atol=1e-5)


def test_decoding_under_inference_mode_and_in_float64():
    torch.manual_seed(10)
    layer = make(1, "all").double()
    x = torch.randn(2, 7, 32, dtype=torch.float64)
    with torch.no_grad():
        full = layer(x)
    with torch.inference_mode():
        cached, cache = decode_in_chunks(layer, x, None, None, [3, 1, 1, 2])
    assert cache.keys.dtype == torch.float64 and torch.allclose(cached, full, atol=1e-10)


def test_a_causal_layer_refuses_a_rolling_cache():
    """A SlidingWindowCache returns only its last keys: a CausalAttention, which lets a new query see every earlier key,
    would give wrong outputs with one; the cache's window says so, and the layer refuses it."""
    cache = SlidingWindowCache(1, 2, 4, window=3)  # NKV = 2 heads of HS = 4
    assert not isinstance(cache, KVCache)
    causal = CausalAttention(8, 2, context_size=16).eval()  # NH = 2 heads of HS = 4: the cache's sizes
    with torch.no_grad(), pytest.raises(ValueError, match="cache keeps only the last 3 tokens, but the layer's queries "
                                                          "see every earlier token"):
        causal.decode(torch.randn(1, 5, 8), cache)
    assert len(cache) == 0 and cache.seen == 0


def test_decode_refuses_caches_it_cannot_use():
    layer = make(2, "window")  # window 3
    with torch.no_grad():
        with pytest.raises(TypeError, match="cache must be a Cache"):
            layer.decode(torch.randn(1, 1, 32), {"keys": None})
        with pytest.raises(ValueError, match=r"\(NKV, HS\) = \(2, 4\).*got \(8, 4\)"):
            layer.decode(torch.randn(1, 1, 32), make(8, "plain").new_cache(1))
        with pytest.raises(ValueError, match="keeps only the last 2 tokens.*the last 3"):
            layer.decode(torch.randn(1, 1, 32), SlidingWindowCache(1, 2, 4, window=2))
        with pytest.raises(ValueError, match="keeps only the last 5 tokens.*every earlier token"):
            make(2, "plain").decode(torch.randn(1, 1, 32), SlidingWindowCache(1, 2, 4, window=5))
        with pytest.raises(TypeError, match="cache must have the layer's dtype"):
            layer.decode(torch.randn(1, 1, 32), KVCache(1, 2, 4, 8, dtype=torch.float64))
        # a plain cache for a window layer is allowed (the mask hides the old tokens), a longer window cache too
        x = torch.randn(1, 9, 32)
        full = layer(x)
        plain_cached, _ = decode_in_chunks(layer, x, None, None, [4, 1, 1, 3], cache=KVCache(1, 2, 4, 16))
        wide_cached, _ = decode_in_chunks(layer, x, None, None, [4, 1, 1, 3], cache=SlidingWindowCache(1, 2, 4, 5))
    assert torch.allclose(plain_cached, full, atol=1e-5) and torch.allclose(wide_cached, full, atol=1e-5)


def test_new_cache_sizes():
    assert type(make(2, "plain").new_cache(3)) is KVCache
    assert make(2, "plain").new_cache(3).max_length == 16
    window = make(2, "window").new_cache(3)
    assert isinstance(window, SlidingWindowCache) and window.window == 3 and window.num_kv_heads == 2
    assert type(make(2, "window").new_cache(3, max_length=3)) is KVCache  # the window hides nothing then
    with pytest.raises(ValueError, match="max_length must be at most context_size=16, got 17"):
        make(2, "plain").new_cache(1, max_length=17)


def test_context_size_counts_every_token_even_with_a_window():
    layer = make(2, "window", context_size=6)
    cache = layer.new_cache(1)
    with torch.no_grad():
        layer.decode(torch.randn(1, 5, 32), cache)
        with pytest.raises(ValueError, match=r"S <= 6.*S_cached=5 \+ S_new=2"):
            layer.decode(torch.randn(1, 2, 32), cache)
        with pytest.raises(ValueError, match="S <= 6 tokens, got S=7"):
            layer(torch.randn(1, 7, 32))


# ---------------------------------------------------------------------------------------------- the rolling cache


def test_sliding_window_cache_keeps_the_last_window_tokens():
    cache = SlidingWindowCache(2, 3, 4, window=4)
    all_k, all_v = torch.randn(2, 3, 11, 4), torch.randn(2, 3, 11, 4)
    storage = cache.keys.untyped_storage().nbytes()
    with torch.no_grad():
        start = 0
        for n in (3, 1, 2, 5):
            k, v = cache.append(all_k[:, :, start : start + n], all_v[:, :, start : start + n])
            past = min(start, 3)
            assert torch.equal(k, all_k[:, :, start - past : start + n]) and torch.equal(
                v, all_v[:, :, start - past : start + n]
            )
            start += n
            assert cache.seen == start and len(cache) == min(start, 4)
            assert torch.equal(cache.keys, all_k[:, :, max(0, start - 4) : start])
            assert torch.equal(cache.values, all_v[:, :, max(0, start - 4) : start])
    assert cache.keys.untyped_storage().nbytes() == storage
    assert "window=4, seen=11" in repr(cache)
    cache.reset()
    assert len(cache) == 0 and cache.seen == 0


def test_sliding_window_cache_refuses_bad_appends():
    cache = SlidingWindowCache(2, 3, 4, window=4)
    with torch.no_grad():
        with pytest.raises(ValueError, match=r"\(B, NKV, S_new, HS\) = \(2, 3, S_new, 4\)"):
            cache.append(torch.randn(2, 2, 1, 4), torch.randn(2, 2, 1, 4))
        with pytest.raises(ValueError, match="k and v must both have shape"):
            cache.append(torch.randn(2, 3, 1, 4), torch.randn(2, 3, 2, 4))
        with pytest.raises(TypeError, match="dtype"):
            cache.append(torch.randn(2, 3, 1, 4, dtype=torch.float64), torch.randn(2, 3, 1, 4, dtype=torch.float64))
        with pytest.raises(ValueError, match="^k must have the batch size of the cache"):  # append's argument is k
            cache.append(torch.randn(3, 3, 1, 4), torch.randn(3, 3, 1, 4))
    with pytest.raises(RuntimeError, match="no_grad"):
        cache.append(torch.randn(2, 3, 1, 4, requires_grad=True), torch.randn(2, 3, 1, 4))
    assert len(cache) == 0 and cache.seen == 0
    with pytest.raises(ValueError, match="window"):
        SlidingWindowCache(1, 1, 1, window=0)


@pytest.mark.parametrize("nkv,window", [(8, None), (2, None), (1, None), (2, 4), (1, 3)])
def test_kv_cache_bytes_is_what_the_cache_allocates(nkv, window):
    layer = GroupedQueryAttention(64, 8, nkv, context_size=16, window=window).eval()
    cache = layer.new_cache(2)
    with torch.no_grad():
        layer.decode(torch.randn(2, 7, 64), cache)
        layer.decode(torch.randn(2, 1, 64), cache)
    allocated = cache.keys.untyped_storage().nbytes() + cache.values.untyped_storage().nbytes()
    assert allocated == kv_cache_bytes(16, 1, nkv, 8, batch_size=2, bytes_per_value=4, window=window)
    assert cache.keys.nbytes + cache.values.nbytes == kv_cache_bytes(8, 1, nkv, 8, 2, 4, window=window)


# ---------------------------------------------------------------------------------------------- the pieces


def test_repeat_kv_gives_query_head_h_the_key_head_h_over_g():
    t = torch.randn(2, 3, 5, 4)
    r = repeat_kv(t, 4)
    assert r.shape == (2, 12, 5, 4)
    assert all(torch.equal(r[:, h], t[:, h // 4]) for h in range(12))


@pytest.mark.parametrize("theta", [10000.0, 500000.0, 7.5])
def test_rope_matches_hugging_face_llama(theta):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    cfg = LlamaConfig(hidden_size=64, num_attention_heads=4, rope_theta=theta, num_hidden_layers=1, vocab_size=10)
    positions = torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]])
    x = torch.randn(2, 4, 5, 16)
    cos, sin = LlamaRotaryEmbedding(cfg)(x, positions)
    ours_cos, ours_sin = rope_cos_sin(positions, 16, theta)
    assert torch.allclose(ours_cos, cos, atol=1e-6) and torch.allclose(ours_sin, sin, atol=1e-6)
    hf_q, _ = apply_rotary_pos_emb(x, x, cos, sin)
    assert torch.allclose(apply_rope(x, ours_cos[:, None], ours_sin[:, None]), hf_q, atol=1e-6)
    assert torch.allclose(
        apply_rope(x.double(), *[t[:, None] for t in rope_cos_sin(positions, 16, theta, torch.float64)]),
        rope64(x.double(), positions, theta),
        atol=1e-12,
    )


def test_interleaved_rope_is_a_permutation_of_the_halves_layout():
    HS, S = 8, 6
    x = torch.randn(S, HS, dtype=torch.float64)
    positions = torch.arange(S)
    freq = 100.0 ** (-torch.arange(0, HS, 2, dtype=torch.float64) / HS)
    z = torch.view_as_complex(x.reshape(S, HS // 2, 2).contiguous()) * torch.polar(
        torch.ones(S, HS // 2, dtype=torch.float64), positions[:, None] * freq
    )
    interleaved = torch.view_as_real(z).flatten(-2)  # Meta's original layout, by complex numbers
    perm = torch.cat([torch.arange(0, HS, 2), torch.arange(1, HS, 2)])
    cos, sin = rope_cos_sin(positions, HS, 100.0, torch.float64)
    assert torch.allclose(interleaved[:, perm], apply_rope(x[:, perm], cos, sin), atol=1e-12)


def test_alibi_slopes_are_the_papers_and_bloom_and_mpt_agree():
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    for n in range(1, 70):
        slopes = alibi_slopes(n)
        assert torch.allclose(slopes, torch.tensor(paper_slopes(n))), n
        bloom = build_alibi_tensor(torch.ones(1, 2, dtype=torch.long), n, torch.float32)[:, 0, 1]  # slope * position 1
        assert torch.allclose(slopes, bloom), n
        mpt = -build_mpt_alibi_tensor(n, 2)[:, 0, 0]  # slope * (1 - 2)
        assert torch.allclose(slopes, mpt), n
    assert alibi_slopes(np.int64(8)).tolist() == [2.0**-i for i in range(1, 9)]


def test_alibi_bias_is_aligned_at_the_end_of_the_keys():
    slopes = torch.tensor([0.5, 0.25])
    full = alibi_bias(slopes, 6)
    assert full.shape == (2, 6, 6)
    assert full[0, 5, 2] == -0.5 * 3 and full[1, 4, 4] == 0
    assert torch.equal(alibi_bias(slopes, 2, 6), full[:, 4:])


def test_attend_with_a_bias_matches_sdpa_with_a_float_mask_on_every_path_and_refuses_bad_arguments():
    torch.manual_seed(12)
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 8)
    bias = torch.randn(1, 3, 4, 6)
    mask = torch.rand(2, 1, 4, 6) > 0.3
    mask[0, 0, 1] = False  # a row with no key
    float_mask = bias.masked_fill(~mask, float("-inf"))
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=float_mask).nan_to_num(0.0)
    expected = expected.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    tri = torch.ones(1, 4, 6, dtype=torch.bool).tril(2)  # (1, S, S_kv): a 2-D mask would be a padding mask
    for impl in attention_lib.attention_impls():
        ctx, w = attend(q, k, v, mask=mask, bias=bias, impl=impl)
        assert torch.allclose(ctx, expected, atol=1e-6) and not ctx.isnan().any(), impl
        assert (w is None) == (impl != "explicit")
        causal, _ = attend(q, k, v, bias=bias, is_causal=True, impl=impl)
        assert torch.allclose(causal, attend(q, k, v, mask=tri, bias=bias, impl="sdpa")[0], atol=1e-6), impl
    with pytest.raises(TypeError, match="bias must be a floating-point tensor"):
        attend(q, k, v, bias=mask)
    with pytest.raises(ValueError, match=r"bias must broadcast to the scores \(2, 3, 4, 6\), got \(5, 6\)"):
        attend(q, k, v, bias=torch.zeros(5, 6))
    with pytest.raises(TypeError, match="mask must be a torch.Tensor of dtype torch.bool"):
        attend(q, k, v, mask=mask.float(), bias=bias)


def test_a_bias_in_float32_goes_with_bfloat16_queries_on_every_path():
    """ALiBi's bias is float32 while a layer may run in bfloat16: the explicit path promoted its scores to float32
    and then failed on bfloat16 values; every path now gets the bias in the queries' dtype."""
    torch.manual_seed(13)
    q, k, v = (torch.randn(1, 4, 5, 8, dtype=torch.bfloat16) for _ in range(3))  # (B, NH, S, HS) each
    bias = alibi_bias(alibi_slopes(4), 5)[None]  # (1, NH, S, S), float32
    reference, _ = attend(q.float(), k.float(), v.float(), bias=bias, is_causal=True, impl="explicit")
    for impl in attention_lib.attention_impls():
        ctx, w = attend(q, k, v, bias=bias, is_causal=True, impl=impl)
        assert ctx.dtype == torch.bfloat16 and (w is None or w.dtype == torch.bfloat16), impl
        assert torch.allclose(ctx.float(), reference, atol=3e-2), impl
    layer = GroupedQueryAttention(32, 4, 2, context_size=8, alibi=True).to(torch.bfloat16).eval()
    layer.attn_impl = "explicit"
    with torch.no_grad():
        assert layer(torch.randn(1, 5, 32, dtype=torch.bfloat16)).dtype == torch.bfloat16


def test_sliding_window_mask():
    i, j = torch.arange(7)[:, None], torch.arange(7)[None, :]
    for W in (1, 3, 7, 20):
        assert torch.equal(sliding_window_mask(7, window=W)[0], (j <= i) & (i - j < W))
        assert torch.equal(sliding_window_mask(2, 7, window=W)[0], ((j <= i) & (i - j < W))[-2:])
    with pytest.raises(ValueError, match="window must be an int >= 1"):
        sliding_window_mask(3, window=0)


def test_sliding_window_mask_matches_hugging_face_mistral():
    from transformers import MistralConfig

    cfg = MistralConfig(hidden_size=16, num_attention_heads=2, sliding_window=3, num_hidden_layers=1, vocab_size=10)
    cfg._attn_implementation = "sdpa"
    hf = create_sliding_window_causal_mask(
        config=cfg,
        inputs_embeds=torch.randn(1, 8, 16),
        attention_mask=torch.ones(1, 8, dtype=torch.bool),
        cache=None,
        allow_is_causal_skip=False,
    )
    assert torch.equal(hf[0, 0], sliding_window_mask(8, window=3)[0])


def test_grouped_rows():
    assert grouped_rows(2, 1, 1).tolist() == [0, 3, 1, 4, 2, 5]
    assert grouped_rows(2, 2, 1).tolist() == [0, 1, 4, 5, 2, 6, 3, 7]
    assert sorted(grouped_rows(3, 4, 5).tolist()) == list(range(3 * 6 * 5))


# ---------------------------------------------------------------------------------------------- Hugging Face parity


def randomize(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.3)
    return module.eval()


def batch(padding: str | None, S: int = 7, C: int = 48):
    torch.manual_seed(len(padding or ""))
    x = torch.randn(3, S, C)
    if padding is None:
        return x, torch.ones(3, S, dtype=torch.bool)
    return x, pad_mask([S, 5, 2], S, left=padding == "left")


def assert_parity(ours: GroupedQueryAttention, hf_out: torch.Tensor, x, pad, positions=None, mask_arg=True):
    assert hf_out.abs().max() > 1.0  # outputs of order 1: the tolerance means something
    for impl in ("sdpa", "explicit"):
        ours.attn_impl = impl
        with torch.no_grad():
            out = ours(x, pad if mask_arg else None, positions=positions)
        assert torch.allclose(out[pad], hf_out[pad], atol=1e-5), impl
    ours.attn_impl = "sdpa"
    if pad.all() or pad[:, -1].all():  # cached decoding of the loaded layer: the prompt, then one token at a time
        with torch.no_grad():
            cached, _ = decode_in_chunks(ours, x, pad if mask_arg else None, positions, [3] + [1] * (x.shape[1] - 3))
        assert torch.allclose(cached[pad], hf_out[pad], atol=1e-5)


def llama_like(kind: str, impl: str, nkv: int, **extra):
    if kind == "llama":
        from transformers import LlamaConfig as Config
        from transformers.models.llama.modeling_llama import LlamaAttention as Attention
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding as Rotary
    else:
        from transformers import MistralConfig as Config
        from transformers.models.mistral.modeling_mistral import MistralAttention as Attention
        from transformers.models.mistral.modeling_mistral import MistralRotaryEmbedding as Rotary
    cfg = Config(
        hidden_size=48,
        num_attention_heads=6,
        num_key_value_heads=nkv,
        max_position_embeddings=16,
        intermediate_size=64,
        num_hidden_layers=1,
        vocab_size=10,
        **extra,
    )
    cfg._attn_implementation = impl
    return cfg, randomize(Attention(cfg, layer_idx=0)), Rotary(cfg)


@pytest.mark.parametrize("padding", [None, "right", "left"])
@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("nkv,bias", [(6, False), (2, True), (1, False)])
def test_matches_llama_attention(padding, impl, nkv, bias):
    cfg, llama, rotary = llama_like("llama", impl, nkv, rope_theta=500.0, attention_bias=bias)
    x, pad = batch(padding)
    positions = padding_positions(pad)
    with torch.no_grad():
        mask4d = create_causal_mask(config=cfg, inputs_embeds=x, attention_mask=pad, cache=None, position_ids=positions)
        hf_out, _ = llama(x, position_embeddings=rotary(x, positions), attention_mask=mask4d)
    ours = GroupedQueryAttention.from_hf(llama)
    assert (ours.num_kv_heads, ours.rope_theta, ours.Wqkv.bias is not None, ours.context_size) == (nkv, 500.0, bias, 16)
    assert_parity(ours, hf_out, x, pad, positions)


@pytest.mark.parametrize("padding", [None, "right", "left"])
@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("window", [1, 3, 5])
def test_matches_mistral_attention(padding, impl, window):
    cfg, mistral, rotary = llama_like("mistral", impl, 3, rope_theta=1000.0, sliding_window=window)
    x, pad = batch(padding)
    positions = padding_positions(pad)
    with torch.no_grad():
        mask4d = create_sliding_window_causal_mask(
            config=cfg, inputs_embeds=x, attention_mask=pad, cache=None, position_ids=positions
        )
        hf_out, _ = mistral(x, position_embeddings=rotary(x, positions), attention_mask=mask4d)
    ours = GroupedQueryAttention.from_hf(mistral)
    assert ours.window == window
    assert_parity(ours, hf_out, x, pad, positions)


@pytest.mark.parametrize("layout", ["multi_query", "new_decoder_architecture", "multi_head"])
@pytest.mark.parametrize("padding", [None, "left"])
@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_matches_falcon_attention(layout, padding, impl):
    from transformers import FalconConfig
    from transformers.models.falcon.modeling_falcon import FalconAttention, FalconRotaryEmbedding

    arch = {
        "multi_query": dict(multi_query=True, new_decoder_architecture=False),
        "new_decoder_architecture": dict(new_decoder_architecture=True, num_kv_heads=2),
        "multi_head": dict(multi_query=False, new_decoder_architecture=False),
    }[layout]
    cfg = FalconConfig(
        hidden_size=48,
        num_attention_heads=6,
        alibi=False,
        bias=layout == "multi_head",
        rope_theta=100.0,
        max_position_embeddings=16,
        num_hidden_layers=1,
        vocab_size=10,
        bos_token_id=0,
        eos_token_id=0,
        **arch,
    )
    cfg._attn_implementation = impl
    falcon = randomize(FalconAttention(cfg, layer_idx=0))
    x, pad = batch(padding)
    positions = padding_positions(pad)
    with torch.no_grad():
        mask4d = create_causal_mask(config=cfg, inputs_embeds=x, attention_mask=pad, cache=None, position_ids=positions)
        hf_out, _ = falcon(
            x,
            alibi=None,
            attention_mask=mask4d,
            position_ids=positions,
            position_embeddings=FalconRotaryEmbedding(cfg)(x, positions),
        )
    ours = GroupedQueryAttention.from_hf(falcon)
    assert ours.num_kv_heads == {"multi_query": 1, "new_decoder_architecture": 2, "multi_head": 6}[layout]
    assert_parity(ours, hf_out, x, pad, positions)


@pytest.mark.parametrize("num_heads", [4, 6, 3])
@pytest.mark.parametrize("padding", [None, "right", "left"])
def test_matches_bloom_attention(num_heads, padding):
    from transformers import BloomConfig
    from transformers.models.bloom.modeling_bloom import BloomAttention, build_alibi_tensor

    cfg = BloomConfig(hidden_size=48, n_head=num_heads, n_layer=1, vocab_size=10)
    cfg._attn_implementation = "eager"
    bloom = randomize(BloomAttention(cfg, layer_idx=0))
    x, pad = batch(padding)
    with torch.no_grad():
        mask4d = create_causal_mask(config=cfg, inputs_embeds=x, attention_mask=pad, cache=None)
        alibi = build_alibi_tensor(pad.long(), num_heads, torch.float32)
        hf_out, _ = bloom(x, residual=torch.zeros_like(x), alibi=alibi, attention_mask=mask4d)
    ours = GroupedQueryAttention.from_hf(bloom, context_size=16)
    assert ours.alibi and ours.Wqkv.bias is not None
    assert_parity(ours, hf_out, x, pad)


def test_from_hf_copies_the_dropout_each_module_applies():
    """Falcon with RoPE applies no dropout in its attention module whatever its attention_dropout (Hugging Face's
    comment: 'It is unclear why dropout is not applied here'); BLOOM drops its output with hidden_dropout."""
    from transformers import BloomConfig, FalconConfig
    from transformers.models.bloom.modeling_bloom import BloomAttention
    from transformers.models.falcon.modeling_falcon import FalconAttention, FalconRotaryEmbedding

    cfg = FalconConfig(hidden_size=48, num_attention_heads=6, multi_query=True, new_decoder_architecture=False,
                       alibi=False, bias=False, rope_theta=100.0, max_position_embeddings=16, num_hidden_layers=1,
                       vocab_size=10, bos_token_id=0, eos_token_id=0, attention_dropout=0.5)
    cfg._attn_implementation = "eager"
    falcon = randomize(FalconAttention(cfg, layer_idx=0)).train()
    ours = GroupedQueryAttention.from_hf(falcon)
    assert ours.training and ours.attn_drop == 0.0 and ours.out_drop == 0.0
    x, pad = batch(None)
    positions = padding_positions(pad)
    with torch.no_grad():  # in training mode both are still deterministic, and equal
        mask4d = create_causal_mask(config=cfg, inputs_embeds=x, attention_mask=pad, cache=None, position_ids=positions)
        hf_out, _ = falcon(x, alibi=None, attention_mask=mask4d, position_ids=positions,
                           position_embeddings=FalconRotaryEmbedding(cfg)(x, positions))
        assert torch.allclose(ours(x, pad, positions=positions), hf_out, atol=1e-5)
    bloom_cfg = BloomConfig(hidden_size=48, n_head=6, n_layer=1, vocab_size=10, attention_dropout=0.2,
                            hidden_dropout=0.3)
    bloom = GroupedQueryAttention.from_hf(BloomAttention(bloom_cfg, layer_idx=0), context_size=8)
    assert bloom.attn_drop == 0.2 and bloom.out_drop == 0.3


def test_from_hf_keeps_dtype_mode_and_dropout():
    cfg, llama, _ = llama_like("llama", "eager", 2, attention_dropout=0.25)
    llama = llama.double().train()
    ours = GroupedQueryAttention.from_hf(llama, context_size=8, out_drop=0.1)
    assert ours.training and ours.Wqkv.weight.dtype == torch.float64
    assert ours.attn_drop == 0.25 and ours.out_drop == 0.1 and ours.context_size == 8
    assert hf_attention_kwargs(llama)["num_kv_heads"] == 2


def test_hf_loaders_refuse_what_they_cannot_reproduce():
    from transformers import BloomConfig, FalconConfig, LlamaConfig
    from transformers.models.bloom.modeling_bloom import BloomAttention
    from transformers.models.falcon.modeling_falcon import FalconAttention
    from transformers.models.gpt2.modeling_gpt2 import GPT2Attention
    from transformers.models.llama.modeling_llama import LlamaAttention

    with pytest.raises(TypeError, match="LlamaAttention.*got GPT2Attention"):
        GroupedQueryAttention.from_hf(GPT2Attention(transformers.GPT2Config(n_embd=16, n_head=2), layer_idx=0))
    with pytest.raises(TypeError, match="got Linear"):
        hf_attention_kwargs(torch.nn.Linear(2, 2))
    falcon = FalconAttention(
        FalconConfig(
            hidden_size=16,
            num_attention_heads=2,
            alibi=True,
            num_hidden_layers=1,
            vocab_size=10,
            bos_token_id=0,
            eos_token_id=0,
        ),
        layer_idx=0,
    )
    with pytest.raises(ValueError, match="alibi=True"):
        GroupedQueryAttention.from_hf(falcon)
    scaled = LlamaConfig(
        hidden_size=16,
        num_attention_heads=2,
        num_hidden_layers=1,
        vocab_size=10,
        rope_scaling={"rope_type": "linear", "factor": 2.0},
    )
    with pytest.raises(ValueError, match="only plain rotary embeddings.*linear"):
        GroupedQueryAttention.from_hf(LlamaAttention(scaled, layer_idx=0))
    wide = LlamaConfig(hidden_size=16, num_attention_heads=2, head_dim=16, num_hidden_layers=1, vocab_size=10)
    with pytest.raises(ValueError, match="head_dim"):
        GroupedQueryAttention.from_hf(LlamaAttention(wide, layer_idx=0))
    bloom = BloomAttention(BloomConfig(hidden_size=16, n_head=2, n_layer=1, vocab_size=10), layer_idx=0)
    with pytest.raises(ValueError, match="pass context_size"):
        GroupedQueryAttention.from_hf(bloom)
    with pytest.raises(ValueError, match="build the layer with hf_attention_kwargs"):
        load_hf_attention(GroupedQueryAttention(16, 2, 1, 8, bias=True), bloom)
    with pytest.raises(ValueError, match="bias"):
        load_hf_attention(GroupedQueryAttention(16, 2, 2, 8, bias=False), bloom)
    exact = BloomConfig(hidden_size=16, n_head=2, n_layer=1, vocab_size=10, pretraining_tp=2, slow_but_exact=True)
    with pytest.raises(ValueError, match="slow_but_exact=True leaves dense.bias out"):  # HF's slow path drops it
        GroupedQueryAttention.from_hf(BloomAttention(exact, layer_idx=0), context_size=8)
    fast = BloomConfig(hidden_size=16, n_head=2, n_layer=1, vocab_size=10, pretraining_tp=2, slow_but_exact=False)
    assert GroupedQueryAttention.from_hf(BloomAttention(fast, layer_idx=0), context_size=8).alibi


# ---------------------------------------------------------------------------------------------- the explorer


def test_the_explorer_runs_the_layer():
    pytest.importorskip("ipywidgets")
    from attention_lib.viz import attention_view, explore_attention

    torch.manual_seed(13)
    layer = GroupedQueryAttention(32, 4, 2, context_size=12, rope_theta=100.0, alibi=True, window=3).eval()
    view = attention_view(layer, "causal", "the cat sat on the mat", pad=1, pad_side="left", head=3)  # S = 7
    i, j = torch.arange(7)[:, None], torch.arange(7)[None, :]
    assert view.weights.shape == (4, 7, 7)
    assert torch.equal(view.mask, (j <= i) & (i - j < 3) & (j >= 1))  # causal, the window, the padding: all drawn
    assert torch.all(view.weights[:, ~view.mask] == 0)
    explorer = explore_attention(layer=layer, kinds=("causal", "sliding window"), max_len=8, tokens="a b c d e")
    try:
        assert explorer.compute().weights.shape == (4, 5, 5)
        assert torch.equal(explorer.compute(kind="sliding window").weights, explorer.compute().weights)
    finally:
        explorer.close()


# ---------------------------------------------------------------------------------------------- bad arguments


def raised_by_package(err: BaseException) -> bool:
    frames = traceback.extract_tb(err.__traceback__)
    return bool(frames) and Path(frames[-1].filename).resolve().parent == PACKAGE


def test_alibi_runs_on_every_registered_path_a_users_too(monkeypatch):
    monkeypatch.setitem(attention_lib.functional._ATTENTION_IMPLS, "test-user", attention_lib.functional._explicit)
    x = torch.randn(1, 3, 32)
    for options in ("alibi", "rope"):
        layer = make(2, options)
        with torch.no_grad():
            layer.attn_impl = "explicit"
            expected = layer(x)
            for impl in (*attention_lib.attention_impls(), "test-user"):
                layer.attn_impl = impl
                assert torch.allclose(layer(x), expected, atol=1e-6), (options, impl)


def test_public_names():
    for name in [
        "GroupedQueryAttention",
        "SlidingWindowCache",
        "alibi_slopes",
        "alibi_bias",
        "rope_cos_sin",
        "apply_rope",
        "repeat_kv",
        "sliding_window_mask",
        "kv_cache_bytes",
        "padding_positions",
    ]:
        assert name in attention_lib.__all__ and hasattr(attention_lib, name), name
    assert GroupedQueryAttention.forward is CausalAttention.forward  # one implementation, extended by hooks
