"""Tests of CrossAttention (notebook 05): references, context padding, the context cache, bad inputs."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import layer64
from torch import nn

from attention_lib import ContextKV, CrossAttention
from attention_lib.masks import padding_mask


def reference(layer: CrossAttention, x, context, mask=None):
    """The shared float64 reference; mask: None or (B, S_kv) bool. (out (B, S, C), weights (B, NH, S, S_kv))."""
    return layer64(layer, x, None if mask is None else mask[:, None, :], context=context)


# (B, S, S_kv, C, C_kv, NH): S != S_kv and C_kv != C in most rows, one square self-like case.
SHAPES = [
    (2, 3, 5, 8, 12, 2),
    (3, 7, 4, 16, 6, 4),
    (1, 1, 9, 12, 12, 3),
    (2, 6, 6, 8, 8, 1),
    (4, 2, 11, 32, 20, 8),
]


def make(B, S, S_kv, C, C_kv, NH, bias=True, seed=0, dtype=torch.float32):
    """A layer in eval mode and random inputs."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    layer = CrossAttention(C, NH, kv_hidden_size=C_kv, bias=bias).to(dtype).eval()
    x = torch.randn(B, S, C, generator=g, dtype=dtype)  # (B, S, C)
    context = torch.randn(B, S_kv, C_kv, generator=g, dtype=dtype)  # (B, S_kv, C_kv)
    return layer, x, context


def lengths_for(B, S_kv):
    """Context lengths between 1 and S_kv, the first full, so there is real padding but never an empty row."""
    return [S_kv] + [max(1, S_kv - 1 - i % S_kv) for i in range(B - 1)]


# ---------------------------------------------------------------------------------------------------------------
# Construction and shapes


def test_weights_and_sizes():
    layer = CrossAttention(8, 2, kv_hidden_size=12)
    assert tuple(layer.Wq.weight.shape) == (8, 8)
    assert tuple(layer.Wkv.weight.shape) == (16, 12)
    assert tuple(layer.Wo.weight.shape) == (8, 8)
    assert layer.kv_hidden_size == 12 and layer.head_size == 4 and layer.attn_impl == "sdpa"
    default = CrossAttention(8, 2)
    assert default.kv_hidden_size == 8 and tuple(default.Wkv.weight.shape) == (16, 8)
    nobias = CrossAttention(8, 2, kv_hidden_size=4, bias=False)
    assert nobias.Wq.bias is None and nobias.Wkv.bias is None and nobias.Wo.bias is None


def test_hidden_size_not_divisible_by_heads():
    with pytest.raises(ValueError, match=r"hidden_size.*divisible.*num_heads.*hidden_size=10.*num_heads=3"):
        CrossAttention(10, 3, kv_hidden_size=6)


@pytest.mark.parametrize("shape", SHAPES)
def test_output_and_weight_shapes(shape):
    B, S, S_kv, C, C_kv, NH = shape
    layer, x, context = make(*shape)
    out = layer(x, context)
    assert out.shape == (B, S, C)
    out2, w = layer(x, context, return_weights=True)
    assert w.shape == (B, NH, S, S_kv)
    torch.testing.assert_close(w.sum(-1), torch.ones(B, NH, S))


# ---------------------------------------------------------------------------------------------------------------
# Independent references


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
def test_matches_float64_reference(shape, bias, padded, impl):
    B, S, S_kv, C, C_kv, NH = shape
    layer, x, context = make(*shape, bias=bias)
    layer.attn_impl = impl
    mask = padding_mask(lengths_for(B, S_kv), S_kv) if padded else None
    ref_out, ref_w = reference(layer, x, context, mask)
    torch.testing.assert_close(layer(x, context, mask=mask).double(), ref_out, atol=1e-5, rtol=1e-5)
    _, w = layer(x, context, mask=mask, return_weights=True)
    torch.testing.assert_close(w.double(), ref_w, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("padded", [False, True])
def test_matches_sdpa_on_separate_projections(shape, padded):
    """Separate Wq, Wk, Wv built from the weights, heads split by hand, F.scaled_dot_product_attention."""
    B, S, S_kv, C, C_kv, NH = shape
    HS = C // NH
    layer, x, context = make(*shape)
    mask = padding_mask(lengths_for(B, S_kv), S_kv) if padded else None
    q = F.linear(x, layer.Wq.weight, layer.Wq.bias)  # (B, S, C)
    k = F.linear(context, layer.Wkv.weight[:C], layer.Wkv.bias[:C])  # (B, S_kv, C)
    v = F.linear(context, layer.Wkv.weight[C:], layer.Wkv.bias[C:])  # (B, S_kv, C)
    q, k, v = (t.reshape(B, -1, NH, HS).transpose(1, 2) for t in (q, k, v))  # (B, NH, S|S_kv, HS)
    attn_mask = None if mask is None else mask[:, None, None, :]  # (B, 1, 1, S_kv)
    ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)  # (B, NH, S, HS)
    expected = F.linear(ctx.transpose(1, 2).reshape(B, S, C), layer.Wo.weight, layer.Wo.bias)  # (B, S, C)
    torch.testing.assert_close(layer(x, context, mask=mask), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("padded", [False, True])
def test_matches_torch_multihead_attention(shape, bias, padded):
    B, S, S_kv, C, C_kv, NH = shape
    torch.manual_seed(1)
    mha = nn.MultiheadAttention(C, NH, bias=bias, kdim=C_kv, vdim=C_kv, batch_first=True).eval()
    layer = CrossAttention.from_torch(mha)
    assert not layer.training and layer.kv_hidden_size == C_kv
    _, x, context = make(*shape)
    mask = padding_mask(lengths_for(B, S_kv), S_kv) if padded else None
    kpm = None if mask is None else ~mask  # nn.MultiheadAttention: True = ignore
    expected, _ = mha(x, context, context, key_padding_mask=kpm, need_weights=False)
    for impl in ("sdpa", "explicit"):
        layer.attn_impl = impl
        torch.testing.assert_close(layer(x, context, mask=mask), expected, atol=1e-5, rtol=1e-5)
    _, w_mha = mha(x, context, context, key_padding_mask=kpm, need_weights=True, average_attn_weights=False)
    _, w = layer(x, context, mask=mask, return_weights=True)
    torch.testing.assert_close(w, w_mha, atol=1e-5, rtol=1e-5)


def test_load_from_torch_in_place_and_from_torch_options():
    torch.manual_seed(2)
    mha = nn.MultiheadAttention(8, 2, dropout=0.25, kdim=6, vdim=6, batch_first=True)  # training mode
    layer = CrossAttention(8, 2, kv_hidden_size=6)
    assert layer.load_from_torch(mha) is layer
    torch.testing.assert_close(layer.Wq.weight, mha.q_proj_weight)
    torch.testing.assert_close(layer.Wkv.weight, torch.cat([mha.k_proj_weight, mha.v_proj_weight]))
    torch.testing.assert_close(layer.Wkv.bias, mha.in_proj_bias[8:])
    built = CrossAttention.from_torch(mha, out_drop=0.5)
    assert built.training and built.attn_drop == 0.25 and built.out_drop == 0.5
    assert CrossAttention.from_torch(mha, attn_drop=0.0).attn_drop == 0.0
    # kdim == embed_dim: PyTorch keeps one in_proj_weight; the copy must handle it.
    same = nn.MultiheadAttention(8, 2, kdim=8, vdim=8, batch_first=True).eval()
    assert same._qkv_same_embed_dim
    x, context = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    torch.testing.assert_close(CrossAttention.from_torch(same)(x, context), same(x, context, context)[0])
    # dtype follows the module
    double = CrossAttention.from_torch(nn.MultiheadAttention(8, 2, kdim=6, vdim=6, batch_first=True).double())
    assert double.Wq.weight.dtype == torch.float64


@pytest.mark.parametrize(
    "mha, error, pattern",
    [
        (nn.Linear(4, 4), TypeError, r"mha must be a torch\.nn\.MultiheadAttention, got Linear"),
        (nn.MultiheadAttention(8, 2, kdim=6, vdim=6), ValueError, r"batch_first=True"),
        (nn.MultiheadAttention(8, 2, kdim=6, vdim=4, batch_first=True), ValueError, r"kdim == vdim.*kdim=6, vdim=4"),
        (nn.MultiheadAttention(8, 2, kdim=6, vdim=6, add_bias_kv=True, batch_first=True), ValueError, "add_bias_kv"),
        (nn.MultiheadAttention(8, 2, kdim=6, vdim=6, add_zero_attn=True, batch_first=True), ValueError, "add_zero"),
    ],
)
def test_from_torch_refuses_what_it_cannot_reproduce(mha, error, pattern):
    with pytest.raises(error, match=pattern):
        CrossAttention.from_torch(mha)
    with pytest.raises(error, match=pattern):
        CrossAttention(8, 2, kv_hidden_size=6).load_from_torch(mha)


def test_load_from_torch_size_and_bias_mismatch():
    mha = nn.MultiheadAttention(8, 2, kdim=6, vdim=6, batch_first=True)
    with pytest.raises(ValueError, match=re.escape("= (8, 2, 12), got (8, 2, 6)")):
        CrossAttention(8, 2, kv_hidden_size=12).load_from_torch(mha)
    with pytest.raises(ValueError, match=re.escape("= (8, 4, 6), got (8, 2, 6)")):
        CrossAttention(8, 4, kv_hidden_size=6).load_from_torch(mha)
    with pytest.raises(ValueError, match=r"bias=False like this layer, got bias=True"):
        CrossAttention(8, 2, kv_hidden_size=6, bias=False).load_from_torch(mha)


# ---------------------------------------------------------------------------------------------------------------
# A real encoder-decoder: BART's decoder cross attention


@pytest.fixture(scope="module")
def bart():
    transformers = pytest.importorskip("transformers", reason="transformers is a test extra (make install)")
    return transformers


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize(
    "B, S, S_kv, d_model, heads, lengths",
    [(2, 5, 7, 16, 4, [7, 4]), (3, 1, 6, 24, 3, [6, 6, 6]), (3, 8, 3, 32, 8, [3, 1, 2]), (1, 4, 4, 8, 2, None)],
)
def test_matches_bart_decoder_encoder_attn(bart, impl, B, S, S_kv, d_model, heads, lengths):
    """Run a small random BART on a padded source, record its first decoder layer's encoder_attn, reproduce it."""
    torch.manual_seed(3)
    cfg = bart.BartConfig(
        vocab_size=40, d_model=d_model, encoder_layers=1, decoder_layers=1, encoder_attention_heads=heads,
        decoder_attention_heads=heads, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32,
        attn_implementation=impl,
    )
    model = bart.BartModel(cfg).eval()
    src_ids = torch.randint(4, 40, (B, S_kv))  # (B, S_kv)
    tgt_ids = torch.randint(4, 40, (B, S))  # (B, S)
    src_mask = None if lengths is None else padding_mask(lengths, S_kv)  # (B, S_kv)
    seen = {}

    def record(module, args, kwargs, out):
        seen["x"] = args[0] if args else kwargs["hidden_states"]
        seen["context"] = kwargs["key_value_states"]
        seen["out"] = out[0]

    attn = model.decoder.layers[0].encoder_attn
    hook = attn.register_forward_hook(record, with_kwargs=True)
    with torch.no_grad():
        res = model(
            input_ids=src_ids,
            attention_mask=None if src_mask is None else src_mask.long(),
            decoder_input_ids=tgt_ids,
        )
    hook.remove()
    assert torch.equal(seen["context"], res.encoder_last_hidden_state)
    layer = CrossAttention(d_model, heads).eval()
    with torch.no_grad():
        layer.Wq.load_state_dict(attn.q_proj.state_dict())
        layer.Wkv.weight.copy_(torch.cat([attn.k_proj.weight, attn.v_proj.weight]))
        layer.Wkv.bias.copy_(torch.cat([attn.k_proj.bias, attn.v_proj.bias]))
        layer.Wo.load_state_dict(attn.out_proj.state_dict())
        for impl in ("sdpa", "explicit"):
            layer.attn_impl = impl
            got = layer(seen["x"], seen["context"], mask=src_mask)
            torch.testing.assert_close(got, seen["out"], atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------------------------------
# Masks: padding invariance, fully masked rows, the two paths


@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
def test_appending_masked_context_tokens_changes_nothing(impl):
    B, S, S_kv, C, C_kv, NH = 3, 4, 5, 16, 10, 4
    layer, x, context = make(B, S, S_kv, C, C_kv, NH)
    layer.attn_impl = impl
    mask = padding_mask([5, 3, 1], S_kv)  # (B, S_kv)
    base = layer(x, context, mask=mask)
    for extra in (1, 6):
        garbage = 100 * torch.randn(B, extra, C_kv)  # large values: any leak would show
        longer = torch.cat([context, garbage], dim=1)  # (B, S_kv + extra, C_kv)
        longer_mask = torch.cat([mask, torch.zeros(B, extra, dtype=torch.bool)], dim=1)  # (B, S_kv + extra)
        torch.testing.assert_close(layer(x, longer, mask=longer_mask), base, atol=1e-5, rtol=1e-5)
    # and the padded positions' content never matters
    scrambled = context.clone()
    scrambled[~mask] = 1e4 * torch.randn(int((~mask).sum()), C_kv)
    torch.testing.assert_close(layer(x, scrambled, mask=mask), base, atol=1e-5, rtol=1e-5)


def test_output_does_not_depend_on_other_queries():
    """Queries are independent: each output row depends only on its own query (no causal or mixing effect)."""
    layer, x, context = make(2, 6, 4, 8, 8, 2)
    full = layer(x, context)
    for t in range(6):
        torch.testing.assert_close(layer(x[:, t : t + 1], context), full[:, t : t + 1], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
def test_fully_masked_context_gives_zero_weights_and_bias_output(impl):
    B, S, S_kv, C, C_kv, NH = 3, 4, 5, 8, 6, 2
    layer, x, context = make(B, S, S_kv, C, C_kv, NH)
    layer.attn_impl = impl
    x.requires_grad_(True)
    mask = padding_mask([5, 0, 2], S_kv)  # (B, S_kv): the second context is all padding
    out = layer(x, context, mask=mask)
    assert not out.isnan().any()
    torch.testing.assert_close(out[1], layer.Wo.bias.expand(S, C))
    out.sum().backward()
    assert not x.grad.isnan().any()
    assert all(not p.grad.isnan().any() for p in layer.parameters() if p.grad is not None)
    _, w = layer(x, context, mask=mask, return_weights=True)
    assert torch.equal(w[1], torch.zeros(NH, S, S_kv))
    # a 4-D mask hiding every context token from one query only
    per_query = torch.ones(B, 1, S, S_kv, dtype=torch.bool)
    per_query[0, 0, 2] = False
    out_q = layer(x, context, mask=per_query)
    assert not out_q.isnan().any()
    torch.testing.assert_close(out_q[0, 2], layer.Wo.bias)


@pytest.mark.parametrize(
    "mask_shape",
    [(2, 5), (1, 5), (2, 1, 1, 5), (2, 2, 3, 5), (1, 1, 3, 5), (1, 3, 5), (5,), (2, 1, 3, 5)],
)
def test_both_paths_agree(mask_shape):
    B, S, S_kv, C, C_kv, NH = 2, 3, 5, 8, 12, 2
    layer, x, context = make(B, S, S_kv, C, C_kv, NH)
    mask = torch.rand(mask_shape, generator=torch.Generator().manual_seed(4)) > 0.3
    fused = layer(x, context, mask=mask)
    layer.attn_impl = "explicit"
    explicit = layer(x, context, mask=mask)
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(layer(x, context, mask=mask, return_weights=True)[0], fused, atol=1e-5, rtol=1e-5)


@settings(max_examples=20, deadline=None)
@given(
    B=st.integers(1, 3),
    S=st.integers(1, 6),
    S_kv=st.integers(1, 7),
    NH=st.sampled_from([1, 2, 4]),
    HS=st.integers(1, 4),
    C_kv=st.integers(1, 9),
    seed=st.integers(0, 2**16),
)
def test_property_random_shapes_and_padding(B, S, S_kv, NH, HS, C_kv, seed):
    C = NH * HS
    layer, x, context = make(B, S, S_kv, C, C_kv, NH, seed=seed)
    lengths = torch.randint(0, S_kv + 1, (B,), generator=torch.Generator().manual_seed(seed))
    mask = padding_mask(lengths, S_kv)  # (B, S_kv), rows may be empty
    ref_out, ref_w = reference(layer, x, context, mask)
    for impl in ("sdpa", "explicit"):
        layer.attn_impl = impl
        torch.testing.assert_close(layer(x, context, mask=mask).double(), ref_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(layer(x, context, mask=mask, return_weights=True)[1].double(), ref_w, atol=1e-6, rtol=0)


def test_gradcheck_float64_both_paths():
    layer, x, context = make(2, 2, 3, 4, 3, 2, dtype=torch.float64)
    mask = padding_mask([3, 2], 3)
    x.requires_grad_(True)
    context.requires_grad_(True)
    for impl in ("sdpa", "explicit"):
        layer.attn_impl = impl
        assert torch.autograd.gradcheck(lambda a, b: layer(a, b, mask=mask), (x, context), fast_mode=True)


def test_gradients_reach_every_parameter():
    layer, x, context = make(2, 3, 4, 8, 6, 2)
    layer(x, context, mask=padding_mask([4, 2], 4)).square().sum().backward()
    for name, p in layer.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_dropout_only_in_training():
    layer, x, context = make(2, 3, 4, 8, 6, 2)
    layer.attn_drop, layer.out_drop = 0.5, 0.5
    torch.testing.assert_close(layer(x, context), layer(x, context))  # eval: deterministic
    layer.train()
    torch.manual_seed(5)
    a = layer(x, context)
    torch.manual_seed(6)
    b = layer(x, context)
    assert not torch.allclose(a, b)


# ---------------------------------------------------------------------------------------------------------------
# The context cache


@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
def test_project_context_then_forward_equals_forward(impl):
    B, S, S_kv, C, C_kv, NH = 2, 5, 7, 12, 9, 3
    layer, x, context = make(B, S, S_kv, C, C_kv, NH)
    layer.attn_impl = impl
    mask = padding_mask([7, 3], S_kv)
    kv = layer.project_context(context)
    assert isinstance(kv, ContextKV) and kv._fields == ("k", "v")
    assert kv.k.shape == kv.v.shape == (B, NH, S_kv, C // NH)
    full = layer(x, context, mask=mask)
    torch.testing.assert_close(layer(x, kv, mask=mask), full, atol=0, rtol=0)
    steps = torch.cat([layer(x[:, t : t + 1], kv, mask=mask) for t in range(S)], dim=1)  # (B, S, C)
    torch.testing.assert_close(steps, full, atol=1e-6, rtol=1e-5)
    out_c, w_c = layer(x, kv, mask=mask, return_weights=True)
    out_f, w_f = layer(x, context, mask=mask, return_weights=True)
    torch.testing.assert_close(w_c, w_f, atol=0, rtol=0)
    # the cached keys are the context's keys, laid out as the notebook says: Wkv rows [k | v], heads in order
    k_ref = F.linear(context, layer.Wkv.weight[:C], layer.Wkv.bias[:C]).reshape(B, S_kv, NH, C // NH).transpose(1, 2)
    torch.testing.assert_close(kv.k, k_ref, atol=1e-6, rtol=1e-5)


def test_projection_runs_once_with_the_cache():
    layer, x, context = make(2, 4, 6, 8, 10, 2)
    calls = []
    hook = layer.Wkv.register_forward_hook(lambda mod, args, out: calls.append(args[0].shape))
    kv = layer.project_context(context)
    for t in range(4):
        layer(x[:, t : t + 1], kv)
    assert len(calls) == 1 and calls[0] == context.shape
    calls.clear()
    for t in range(4):
        layer(x[:, t : t + 1], context)
    assert len(calls) == 4
    hook.remove()


def test_gradients_flow_through_the_cache():
    layer, x, context = make(2, 3, 4, 8, 6, 2)
    context.requires_grad_(True)
    layer(x, layer.project_context(context)).sum().backward()
    assert context.grad is not None and context.grad.abs().sum() > 0
    assert layer.Wkv.weight.grad is not None


# ---------------------------------------------------------------------------------------------------------------
# Bad inputs: type, and a message that names the argument and shows expected and received shapes


def bad_case_layer():
    return make(2, 3, 5, 8, 12, 2)


@pytest.mark.parametrize(
    "make_kv, error, pattern",
    [
        (lambda kv: ContextKV(kv.k[:1], kv.v[:1]), ValueError,
         r"context\.k must have the batch size of x \(2\), got 1"),
        (lambda kv: ContextKV(kv.k.reshape(2, 4, 5, 2), kv.v.reshape(2, 4, 5, 2)), ValueError,
         r"context\.k must have shape \(B, NH, S_kv, HS\) = \(B, 2, S_kv, 4\), got \(2, 4, 5, 2\)"),
        (lambda kv: ContextKV(kv.k, kv.v[:, :, :3]), ValueError,
         r"context\.k and context\.v must have the same shape, got \(2, 2, 5, 4\) and \(2, 2, 3, 4\)"),
        (lambda kv: ContextKV(kv.k, None), TypeError, r"context\.v must be a torch\.Tensor .*got NoneType"),
        (lambda kv: ContextKV(kv.k[0], kv.v[0]), ValueError, r"context\.k must have shape .*got \(2, 5, 4\)"),
    ],
)
def test_bad_cached_context(make_kv, error, pattern):
    layer, x, context = bad_case_layer()
    kv = layer.project_context(context)
    with pytest.raises(error, match=pattern):
        layer(x, make_kv(kv))


def test_plain_tuple_is_not_a_cached_context():
    layer, x, context = bad_case_layer()
    kv = layer.project_context(context)
    with pytest.raises(TypeError, match=r"context must be a tensor \(B, S_kv, 12\) or the ContextKV .*got a tuple"):
        layer(x, tuple(kv))


def test_bad_mask_with_cached_context_uses_cached_length():
    layer, x, context = bad_case_layer()
    kv = layer.project_context(context)
    with pytest.raises(ValueError, match=r"\(B, S_kv\) = \(2, 5\), got \(2, 4\)"):
        layer(x, kv, mask=torch.ones(2, 4, dtype=torch.bool))


def test_project_context_checks_its_input():
    layer, _, _ = bad_case_layer()
    with pytest.raises(ValueError, match=r"context must have shape \(B, S_kv, kv_hidden_size\) = \(B, S_kv, 12\)"):
        layer.project_context(torch.randn(2, 5, 8))


def test_project_context_refuses_a_projected_context_and_says_so():
    layer, _, context = bad_case_layer()
    kv = layer.project_context(context)
    with pytest.raises(TypeError, match=r"project_context takes the context tensor \(B, S_kv, 12\), got a ContextKV: "
                                        r"it is projected already"):
        layer.project_context(kv)
    with pytest.raises(TypeError, match=r"^context must be a tensor \(B, S_kv, 12\), got a tuple$"):
        layer.project_context(tuple(kv))
