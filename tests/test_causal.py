"""CausalAttention and its KV cache: parity with SDPA, nn.MultiheadAttention and GPT-2, no future leaks,
cached decoding equal to the full forward, the stored causal mask never modified, and clear errors."""


import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import causal, layer64
from reference import padding as _padding
from torch import nn

import attention_lib.functional as functional
from attention_lib import BidirectionalAttention, CausalAttention, KVCache

SHAPES = [(1, 1, 8, 1), (2, 5, 8, 2), (3, 7, 16, 4), (2, 12, 32, 8)]  # (B, S, C, NH)


def lower_triangle(S: int) -> torch.Tensor:
    return causal(S)  # (S, S): True where key j <= query i


def pad_mask(lengths: list[int], S: int, left: bool) -> torch.Tensor:
    return _padding(lengths, S, left)  # (B, S)


def reference(layer: CausalAttention, x: torch.Tensor, pad: torch.Tensor | None = None):
    """The shared float64 reference with the causal rule and the padding written out; (out, weights)."""
    S = x.shape[1]
    return layer64(layer, x, causal(S)[None] if pad is None else causal(S)[None] & pad[:, None, :])


def lengths_for(B: int, S: int) -> list[int]:
    return [max(1, S - 3 * b) for b in range(B)]  # the first sequence is full, later ones shorter


# ---------------------------------------------------------------------------------------------- parity


@pytest.mark.parametrize("B,S,C,NH", SHAPES)
@pytest.mark.parametrize("padding", [None, "right", "left"])
@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
@pytest.mark.parametrize("bias", [True, False])
def test_matches_float64_reference(B, S, C, NH, padding, impl, bias):
    torch.manual_seed(S * 10 + NH)
    layer = CausalAttention(C, NH, context_size=16, bias=bias).eval()
    layer.attn_impl = impl
    x = torch.randn(B, S, C)
    pad = None if padding is None else pad_mask(lengths_for(B, S), S, left=padding == "left")
    ref, ref_w = reference(layer, x, pad)
    with torch.no_grad():
        assert torch.allclose(layer(x, pad).double(), ref, atol=1e-5)
        out, w = layer(x, pad, return_weights=True)
    assert torch.allclose(out.double(), ref, atol=1e-5)
    assert w.shape == (B, NH, S, S) and torch.allclose(w.double(), ref_w, atol=1e-6)


@pytest.mark.parametrize("B,S,C,NH", SHAPES)
@pytest.mark.parametrize("padding", [None, "right", "left"])
@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
def test_matches_sdpa(B, S, C, NH, padding, impl):
    torch.manual_seed(S + NH)
    layer = CausalAttention(C, NH, context_size=S).eval()
    layer.attn_impl = impl
    x = torch.randn(B, S, C)
    HS = C // NH
    with torch.no_grad():
        q, k, v = (t.reshape(B, S, NH, HS).transpose(1, 2) for t in layer.Wqkv(x).chunk(3, dim=-1))
        if padding is None:
            ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            pad = None
        else:
            pad = pad_mask(lengths_for(B, S), S, left=padding == "left")
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=pad[:, None, None, :] & lower_triangle(S))
        ref = layer.Wo(ctx.transpose(1, 2).reshape(B, S, C))
        assert torch.allclose(layer(x, pad), ref, atol=1e-5)


def copy_from_mha(layer: CausalAttention, mha: nn.MultiheadAttention) -> None:
    with torch.no_grad():
        layer.Wqkv.weight.copy_(mha.in_proj_weight)
        layer.Wo.weight.copy_(mha.out_proj.weight)
        if mha.in_proj_bias is not None:
            layer.Wqkv.bias.copy_(mha.in_proj_bias)
            layer.Wo.bias.copy_(mha.out_proj.bias)


@pytest.mark.parametrize("B,S,C,NH", SHAPES)
@pytest.mark.parametrize("padding", [None, "right", "left"])
@pytest.mark.parametrize("bias", [True, False])
def test_matches_multihead_attention(B, S, C, NH, padding, bias):
    torch.manual_seed(B + S + C)
    mha = nn.MultiheadAttention(C, NH, bias=bias, batch_first=True).eval()
    layer = CausalAttention(C, NH, context_size=16, bias=bias).eval()
    copy_from_mha(layer, mha)
    x = torch.randn(B, S, C)
    pad = None if padding is None else pad_mask(lengths_for(B, S), S, left=padding == "left")
    with torch.no_grad():
        # nn.MultiheadAttention's boolean masks mean the opposite: True = do not attend.
        ref, _ = mha(x, x, x, attn_mask=~lower_triangle(S), key_padding_mask=None if pad is None else ~pad,
                     need_weights=False)
        real = torch.ones(B, S, dtype=torch.bool) if pad is None else pad  # it gives NaN on rows with no key
        for impl in ("sdpa", "explicit"):
            layer.attn_impl = impl
            out = layer(x, pad)
            assert not out.isnan().any()
            assert torch.allclose(out[real], ref[real], atol=1e-5)


def test_from_torch_builds_a_causal_layer_with_the_same_weights():
    torch.manual_seed(3)
    mha = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    layer = CausalAttention.from_torch(mha, context_size=8)
    assert isinstance(layer, CausalAttention) and layer.context_size == 8 and not layer.training
    assert not list(layer.buffers())
    x = torch.randn(2, 6, 16)
    with torch.no_grad():
        ref, _ = mha(x, x, x, attn_mask=~lower_triangle(6), need_weights=False)
        assert torch.allclose(layer(x), ref, atol=1e-5)


def gpt2_attention(C: int, NH: int, S: int, impl: str):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(
        vocab_size=40, n_positions=S, n_embd=C, n_layer=1, n_head=NH, initializer_range=0.3, attn_pdrop=0.0,
        resid_pdrop=0.0, embd_pdrop=0.0, bos_token_id=0, eos_token_id=0, attn_implementation=impl,
    )
    return transformers.GPT2Model(cfg).eval()


@pytest.mark.parametrize("B,S,C,NH", [(2, 5, 8, 2), (3, 7, 16, 4), (2, 12, 32, 8)])
@pytest.mark.parametrize("padding", [None, "right", "left"])
@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_matches_gpt2_attention_block(B, S, C, NH, padding, impl):
    torch.manual_seed(S * NH)
    model = gpt2_attention(C, NH, S, impl)
    attn = model.h[0].attn
    seen = {}

    def grab(module, args, kwargs, output):
        seen["x"] = args[0] if args else kwargs["hidden_states"]
        seen["out"] = output[0]

    attn.register_forward_hook(grab, with_kwargs=True)
    layer = CausalAttention(C, NH, context_size=S).eval()
    with torch.no_grad():  # GPT-2's Conv1D stores (in, out): the transpose of nn.Linear's weight
        layer.Wqkv.weight.copy_(attn.c_attn.weight.T)
        layer.Wqkv.bias.copy_(attn.c_attn.bias)
        layer.Wo.weight.copy_(attn.c_proj.weight.T)
        layer.Wo.bias.copy_(attn.c_proj.bias)
    ids = torch.randint(0, 40, (B, S))
    pad = None if padding is None else pad_mask(lengths_for(B, S), S, left=padding == "left")
    with torch.no_grad():
        model(input_ids=ids, attention_mask=None if pad is None else pad.long())
        real = torch.ones(B, S, dtype=torch.bool) if pad is None else pad  # rows with no key differ by design
        assert seen["out"].abs().max() > 0.5  # outputs of order 1: the tolerance below means something
        for impl in ("sdpa", "explicit"):
            layer.attn_impl = impl
            assert torch.allclose(layer(seen["x"], pad)[real], seen["out"][real], atol=1e-5)


# ---------------------------------------------------------------------------------------------- no future leaks


@settings(max_examples=40, deadline=None)
@given(
    B=st.integers(1, 3),
    S=st.integers(2, 10),
    NH=st.sampled_from([1, 2, 4]),
    data=st.data(),
    impl=st.sampled_from(["sdpa", "explicit"]),
    padding=st.sampled_from([None, "right", "left"]),
)
def test_future_tokens_never_change_earlier_outputs(B, S, NH, data, impl, padding):
    position = data.draw(st.integers(1, S - 1), label="first changed position")
    seed = data.draw(st.integers(0, 2**16), label="seed")
    g = torch.Generator().manual_seed(seed)
    C = 8
    layer = CausalAttention(C, NH, context_size=10).eval()
    layer.attn_impl = impl
    x = torch.randn(B, S, C, generator=g)
    x_changed = x.clone()
    x_changed[:, position:] = torch.randn(B, S - position, C, generator=g) * 3  # every token from `position` on
    pad = None
    if padding is not None:
        lengths = [data.draw(st.integers(1, S), label="length") for _ in range(B)]
        pad = pad_mask(lengths, S, left=padding == "left")
    with torch.no_grad():
        before, after = layer(x, pad), layer(x_changed, pad)
    assert torch.allclose(before[:, :position], after[:, :position], atol=1e-6, rtol=0)
    if pad is None:  # the test can see a change (with padding the changed tokens may all be hidden)
        assert not torch.allclose(before[:, position:], after[:, position:])


def test_jacobian_is_block_lower_triangular():
    torch.manual_seed(0)
    S, C = 5, 8
    layer = CausalAttention(C, 2, context_size=8).double()
    x = torch.randn(S, C, dtype=torch.float64)
    jac = torch.autograd.functional.jacobian(lambda t: layer(t[None])[0], x)  # (S, C, S, C)
    blocks = jac.permute(0, 2, 1, 3).flatten(2).norm(dim=-1)  # (S, S)
    assert torch.all(blocks[~lower_triangle(S)] == 0)
    assert torch.all(blocks[lower_triangle(S)] > 0)


def test_gradcheck():
    torch.manual_seed(0)
    layer = CausalAttention(8, 2, context_size=4).double()
    x = torch.randn(2, 4, 8, dtype=torch.float64, requires_grad=True)
    pad = pad_mask([4, 2], 4, left=True)
    assert torch.autograd.gradcheck(lambda t: layer(t, pad), (x,))
    layer.attn_impl = "explicit"
    assert torch.autograd.gradcheck(lambda t: layer(t, pad), (x,))


# ---------------------------------------------------------------------------------------------- the causal buffer


def test_the_layer_stores_no_mask_and_has_the_bidirectional_state_dict():
    layer = CausalAttention(8, 2, context_size=6)
    assert not list(layer.buffers())
    assert set(layer.state_dict()) == set(BidirectionalAttention(8, 2).state_dict())
    assert isinstance(layer, BidirectionalAttention)


def test_padded_calls_leave_no_trace():
    """Padded calls, on both paths and through decode, change nothing the next unpadded call sees."""
    torch.manual_seed(0)
    layer = CausalAttention(8, 2, context_size=6).eval()
    x = torch.randn(2, 5, 8)
    masks = [
        pad_mask([5, 2], 5, left=False),
        pad_mask([3, 1], 5, left=True),
        torch.rand(2, 2, 5, 5) > 0.5,  # a full (B, NH, S, S) mask
        torch.zeros(1, 5, dtype=torch.bool),  # nothing visible at all, broadcast over the batch
    ]
    with torch.no_grad():
        clean = layer(x)
        for impl in ("sdpa", "explicit"):
            layer.attn_impl = impl
            for m in masks:
                layer(x, m)
                layer(x, m, return_weights=True)
        cache = layer.new_cache(2)
        layer.decode(x[:, :3], cache, pad_mask([3, 1], 3, left=True))
        layer.decode(x[:, 3:4], cache, pad_mask([4, 2], 4, left=True))
        layer.attn_impl = "sdpa"
        assert torch.equal(layer(x), clean)


@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
def test_fully_masked_rows_give_zeros_not_nan(impl):
    torch.manual_seed(0)
    layer = CausalAttention(8, 2, context_size=6).eval()
    layer.attn_impl = impl
    x = torch.randn(2, 6, 8)
    pad = pad_mask([6, 2], 6, left=True)  # sequence 1: queries 0..3 see no real key
    with torch.no_grad():
        out = layer(x, pad)
        out_w, w = layer(x, pad, return_weights=True)
    assert not out.isnan().any() and not w.isnan().any()
    blind = torch.tensor([[False] * 6, [True] * 4 + [False] * 2])
    assert torch.allclose(out[blind], layer.Wo.bias.detach().expand(4, 8), atol=1e-6)
    assert torch.all(w[1, :, :4] == 0)
    assert torch.allclose(w[1, :, 4:].sum(-1), torch.ones(2, 2))
    assert torch.allclose(out, out_w, atol=1e-5)


def test_default_path_uses_sdpa_is_causal_without_a_mask(monkeypatch):
    calls = []
    real_sdpa = F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, **kw):
        calls.append((attn_mask is None, is_causal))
        return real_sdpa(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, **kw)

    monkeypatch.setattr(functional.F, "scaled_dot_product_attention", spy)
    layer = CausalAttention(8, 2, context_size=6).eval()
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        layer(x)
        layer(x, pad_mask([5, 3], 5, left=False))
    assert calls == [(True, True), (False, False)]  # fast path, then one combined mask


# ---------------------------------------------------------------------------------------------- KV cache


def decode_in_chunks(layer, x, pad, chunks):
    """Decode x (B, S, C) in chunks of the given sizes; the mask of each call covers all tokens so far."""
    cache = layer.new_cache(x.shape[0])
    outs, start, lengths = [], 0, []
    for n in chunks:
        end = start + n
        outs.append(layer.decode(x[:, start:end], cache, None if pad is None else pad[:, :end]))
        lengths.append(len(cache))
        assert cache.keys.shape == (x.shape[0], layer.num_heads, end, layer.head_size)
        assert cache.values.shape == cache.keys.shape
        start = end
    return torch.cat(outs, dim=1), lengths


@pytest.mark.parametrize("B,S,C,NH", [(1, 6, 8, 2), (3, 9, 16, 4), (2, 12, 32, 8)])
@pytest.mark.parametrize("padding", [None, "left"])
@pytest.mark.parametrize("prompt", [1, 4])
@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
def test_cached_decoding_equals_full_forward(B, S, C, NH, padding, prompt, impl):
    torch.manual_seed(S + prompt)
    layer = CausalAttention(C, NH, context_size=12).eval()
    layer.attn_impl = impl
    x = torch.randn(B, S, C)
    pad = None
    if padding == "left":  # prompts of different lengths, left-padded; generated tokens are all real
        pad = pad_mask([S - min(b, prompt - 1) if prompt > 1 else S for b in range(B)], S, left=True)
    chunks = [prompt] + [1] * (S - prompt)
    with torch.no_grad():
        full = layer(x, pad)
        cached, lengths = decode_in_chunks(layer, x, pad, chunks)
    assert lengths == list(range(prompt, S + 1))
    assert not cached.isnan().any()
    assert torch.allclose(cached, full, atol=1e-5)


def test_decode_returns_the_weights_of_the_full_forward():
    torch.manual_seed(0)
    layer = CausalAttention(8, 2, context_size=8).eval()
    x = torch.randn(2, 7, 8)
    pad = pad_mask([7, 4], 7, left=True)
    with torch.no_grad():
        _, w_full = layer(x, pad, return_weights=True)
        cache = layer.new_cache(2)
        layer.decode(x[:, :3], cache, pad[:, :3])
        out, w = layer.decode(x[:, 3:5], cache, pad[:, :5], return_weights=True)
    assert w.shape == (2, 2, 2, 5)
    assert torch.allclose(w, w_full[:, :, 3:5, :5], atol=1e-6)


def test_decode_chunk_sizes_do_not_matter():
    torch.manual_seed(1)
    layer = CausalAttention(16, 4, context_size=10).eval()
    x = torch.randn(3, 10, 16)
    pad = pad_mask([10, 7, 5], 10, left=True)
    with torch.no_grad():
        full = layer(x, pad)
        for chunks in ([10], [5, 5], [3, 1, 4, 2], [1] * 10):
            cached, _ = decode_in_chunks(layer, x, pad, chunks)
            assert torch.allclose(cached, full, atol=1e-5)


def test_cache_grows_as_documented_and_resets():
    layer = CausalAttention(16, 4, context_size=8)
    cache = layer.new_cache(3, max_length=6)
    assert isinstance(cache, KVCache) and len(cache) == 0 and cache.max_length == 6
    assert cache.keys.shape == (3, 4, 0, 4)
    with torch.no_grad():
        k, v = torch.randn(3, 4, 2, 4), torch.randn(3, 4, 2, 4)
        keys, values = cache.append(k, v)
        assert keys.shape == values.shape == (3, 4, 2, 4) and len(cache) == 2
        assert torch.equal(keys, k) and torch.equal(values, v)
        k2, v2 = torch.randn(3, 4, 1, 4), torch.randn(3, 4, 1, 4)
        keys, values = cache.append(k2, v2)
        assert keys.shape == (3, 4, 3, 4) and torch.equal(keys[:, :, :2], k) and torch.equal(values[:, :, 2:], v2)
        layer.decode(torch.randn(3, 2, 16), cache)
        assert len(cache) == 5 and cache.keys.shape == (3, 4, 5, 4)
    cache.reset()
    assert len(cache) == 0 and cache.values.shape == (3, 4, 0, 4)
    assert "length=0" in repr(cache)


def test_new_cache_matches_the_layer_dtype():
    layer = CausalAttention(8, 2, context_size=5).double().eval()
    cache = layer.new_cache(2)
    assert cache.keys.dtype == torch.float64 and cache.max_length == 5
    with torch.no_grad():
        out = layer.decode(torch.randn(2, 3, 8, dtype=torch.float64), cache)
    assert out.dtype == torch.float64


def test_decoding_under_inference_mode():
    torch.manual_seed(0)
    layer = CausalAttention(8, 2, context_size=6).eval()
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        full = layer(x)
    with torch.inference_mode():
        cache = layer.new_cache(2)
        parts = [layer.decode(x[:, :2], cache), layer.decode(x[:, 2:3], cache), layer.decode(x[:, 3:], cache)]
        out = torch.cat(parts, dim=1)
    assert torch.allclose(out, full, atol=1e-5) and len(cache) == 5


def test_cache_misuse_raises_clear_errors_and_leaves_the_cache_alone():
    layer = CausalAttention(8, 2, context_size=6).eval()
    cache = layer.new_cache(2)
    with torch.no_grad():
        layer.decode(torch.randn(2, 4, 8), cache)
        before = cache.keys.clone()
        with pytest.raises(ValueError, match=r"^x must have the batch size of the cache, B=2, got B=3"):
            layer.decode(torch.randn(3, 1, 8), cache)
        with pytest.raises(ValueError, match=r"context_size.*6.*S=7.*S_cached=4 \+ S_new=3"):
            layer.decode(torch.randn(2, 3, 8), cache)
        with pytest.raises(ValueError, match=r"\(B, S_kv\) = \(2, 5\), got \(2, 4\)"):
            layer.decode(torch.randn(2, 1, 8), cache, torch.ones(2, 4, dtype=torch.bool))
        with pytest.raises(TypeError, match="torch.bool"):
            layer.decode(torch.randn(2, 1, 8), cache, torch.ones(2, 5))
        with pytest.raises(ValueError, match=r"\(B, S, 8\).*got \(2, 1, 9\)"):
            layer.decode(torch.randn(2, 1, 9), cache)
        with pytest.raises(TypeError, match="cache must be a Cache"):
            layer.decode(torch.randn(2, 1, 8), {"keys": None})
        other = CausalAttention(8, 4, context_size=6).new_cache(2)
        with pytest.raises(ValueError, match=r"\(NKV, HS\) = \(2, 4\).*got \(4, 2\)"):
            layer.decode(torch.randn(2, 1, 8), other)
        assert len(cache) == 4 and torch.equal(cache.keys, before)
        small = layer.new_cache(2, max_length=3)
        with pytest.raises(ValueError, match=r"max_length=3.*S_cached=0.*S_new=4"):
            layer.decode(torch.randn(2, 4, 8), small)
        with pytest.raises(ValueError, match=r"must both have shape \(B, NKV, S_new, HS\)"):
            cache.append(torch.randn(2, 2, 1, 5), torch.randn(2, 2, 1, 5))
        with pytest.raises(TypeError, match="dtype"):
            cache.append(torch.randn(2, 2, 1, 4, dtype=torch.float64), torch.randn(2, 2, 1, 4, dtype=torch.float64))
        with pytest.raises(ValueError, match=r"^k must have the batch size of the cache, B=2, got B=3"):
            cache.append(torch.randn(3, 2, 1, 4), torch.randn(3, 2, 1, 4))  # append names its own argument
    with pytest.raises(ValueError, match="max_length must be at most context_size=6, got 7"):
        layer.new_cache(2, max_length=7)
    with pytest.raises(RuntimeError, match="torch.no_grad"):
        layer.decode(torch.randn(2, 1, 8), cache)  # gradients are on: the in-place cache refuses
    with pytest.raises(ValueError, match="batch_size must be an int >= 1"):
        KVCache(0, 2, 4, 6)
    assert len(cache) == 4


# ---------------------------------------------------------------------------------------------- bad input


def test_longer_than_context_size_raises():
    layer = CausalAttention(8, 2, context_size=4)
    with pytest.raises(ValueError, match=r"context_size.*S <= 4.*got S=5"):
        layer(torch.randn(1, 5, 8))
    assert layer(torch.randn(1, 4, 8)).shape == (1, 4, 8)


