"""BidirectionalAttention: parity with nn.MultiheadAttention and a float64 reference, padding invariance,
permutation equivariance, fully masked rows, both paths, dropout, gradients, the weight copy and bad inputs."""


import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import layer64
from reference import padding as _padding
from torch import nn

from attention_lib import BidirectionalAttention


def pad_mask(lengths: list[int], S: int) -> torch.Tensor:
    return _padding(lengths, S)  # (B, S): True on the first lengths[b] tokens


def reference(layer: BidirectionalAttention, x: torch.Tensor, mask: torch.Tensor | None = None):
    """The shared float64 reference; mask: None or bool broadcasting to (B, NH, S, S). (out, weights)."""
    return layer64(layer, x, mask)


# ---------------------------------------------------------------- parity with nn.MultiheadAttention


@pytest.mark.parametrize("B,S,C,NH", [(1, 1, 4, 1), (2, 5, 8, 2), (3, 7, 32, 4), (2, 16, 64, 8), (2, 9, 48, 12)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
def test_equals_nn_multihead_attention(B, S, C, NH, bias, padded, impl):
    torch.manual_seed(B * 1000 + S * 10 + NH)
    mha = nn.MultiheadAttention(C, NH, bias=bias, batch_first=True).eval()
    layer = BidirectionalAttention.from_torch(mha)
    layer.attn_impl = impl
    x = torch.randn(B, S, C)
    lengths = [max(1, S - 3 * i) for i in range(B)]  # the first sequence full, the others shorter
    mask = pad_mask(lengths, S) if padded else None
    kpm = ~mask if padded else None  # nn.MultiheadAttention: True = ignore this key
    with torch.no_grad():
        ref, ref_w = mha(x, x, x, key_padding_mask=kpm, need_weights=True, average_attn_weights=False)
        ref_fast, _ = mha(x, x, x, key_padding_mask=kpm, need_weights=False)
        out = layer(x, mask)
        out_w, w = layer(x, mask, return_weights=True)
    assert out.shape == (B, S, C) and w.shape == (B, NH, S, S)
    assert torch.allclose(out, ref, atol=1e-5) and torch.allclose(out, ref_fast, atol=1e-5)
    assert torch.allclose(out_w, ref, atol=1e-5)
    assert torch.allclose(w, ref_w, atol=1e-5)


def test_gradients_equal_nn_multihead_attention():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 4, batch_first=True)
    layer = BidirectionalAttention.from_torch(mha)
    mask = pad_mask([6, 4], 6)
    x = torch.randn(2, 6, 16, requires_grad=True)
    y = torch.randn(2, 6, 16)
    (mha(x, x, x, key_padding_mask=~mask, need_weights=False)[0] * y).sum().backward()
    gx_ref, x.grad = x.grad, None
    (layer(x, mask) * y).sum().backward()
    assert torch.allclose(x.grad, gx_ref, atol=1e-5)
    assert torch.allclose(layer.Wqkv.weight.grad, mha.in_proj_weight.grad, atol=1e-5)
    assert torch.allclose(layer.Wqkv.bias.grad, mha.in_proj_bias.grad, atol=1e-5)
    assert torch.allclose(layer.Wo.weight.grad, mha.out_proj.weight.grad, atol=1e-5)
    assert torch.allclose(layer.Wo.bias.grad, mha.out_proj.bias.grad, atol=1e-5)


# ---------------------------------------------------------------- from_torch / load_from_torch


def test_from_torch_takes_sizes_bias_dropout_mode_dtype():
    mha = nn.MultiheadAttention(24, 6, dropout=0.25, bias=False, batch_first=True).double().eval()
    layer = BidirectionalAttention.from_torch(mha, out_drop=0.5)
    assert type(layer) is BidirectionalAttention
    assert (layer.hidden_size, layer.num_heads, layer.head_size) == (24, 6, 4)
    assert layer.Wqkv.bias is None and layer.Wo.bias is None
    assert layer.attn_drop == 0.25 and layer.out_drop == 0.5
    assert not layer.training
    assert layer.Wqkv.weight.dtype == torch.float64
    assert torch.equal(layer.Wqkv.weight, mha.in_proj_weight) and torch.equal(layer.Wo.weight, mha.out_proj.weight)
    # the copy is a copy: changing one layer leaves the other alone
    with torch.no_grad():
        layer.Wo.weight.zero_()
    assert mha.out_proj.weight.abs().sum() > 0
    assert BidirectionalAttention.from_torch(mha, attn_drop=0.0).attn_drop == 0.0
    assert BidirectionalAttention.from_torch(mha.train()).training


def test_from_torch_builds_subclasses_with_their_arguments():
    class Tagged(BidirectionalAttention):
        def __init__(self, hidden_size, num_heads, tag, **kwargs):
            super().__init__(hidden_size, num_heads, **kwargs)
            self.tag = tag

    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    layer = Tagged.from_torch(mha, tag="x")
    assert isinstance(layer, Tagged) and layer.tag == "x"
    assert torch.equal(layer.Wqkv.bias, mha.in_proj_bias)


def test_load_from_torch_copies_into_existing_layer():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    layer = BidirectionalAttention(16, 4)
    x = torch.randn(2, 5, 16)
    before = layer(x)
    assert layer.load_from_torch(mha) is layer
    assert not torch.allclose(before, layer(x), atol=1e-3)
    assert torch.allclose(layer(x), mha(x, x, x, need_weights=False)[0], atol=1e-5)
    assert not layer.Wqkv.weight.grad_fn and layer.Wqkv.weight.requires_grad  # still a leaf parameter


@pytest.mark.parametrize(
    "make_mha,words",
    [
        (lambda: nn.MultiheadAttention(16, 4), ["batch_first=True", "(B, S, C)", "(S, B, C)"]),
        (lambda: nn.MultiheadAttention(16, 4, batch_first=True, kdim=8, vdim=8), ["kdim", "vdim", "embed_dim=16"]),
        (lambda: nn.MultiheadAttention(16, 4, batch_first=True, kdim=8), ["kdim=8", "vdim=16"]),
        (lambda: nn.MultiheadAttention(16, 4, batch_first=True, add_bias_kv=True), ["add_bias_kv"]),
        (lambda: nn.MultiheadAttention(16, 4, batch_first=True, add_zero_attn=True), ["add_zero_attn"]),
    ],
)
def test_from_torch_rejects_incompatible_modules(make_mha, words):
    mha = make_mha()
    for copy in (BidirectionalAttention.from_torch, BidirectionalAttention(16, 4).load_from_torch):
        with pytest.raises(ValueError) as e:
            copy(mha)
        assert str(e.value).startswith("mha must")
        for w in words:
            assert w in str(e.value)


def test_load_from_torch_rejects_other_sizes_and_bias():
    layer = BidirectionalAttention(16, 4)
    with pytest.raises(ValueError, match=r"embed_dim = hidden_size = 16.*got embed_dim=32, num_heads=4"):
        layer.load_from_torch(nn.MultiheadAttention(32, 4, batch_first=True))
    with pytest.raises(ValueError, match=r"num_heads = 4.*got embed_dim=16, num_heads=2"):
        layer.load_from_torch(nn.MultiheadAttention(16, 2, batch_first=True))
    with pytest.raises(ValueError, match=r"bias=True like this layer, got bias=False"):
        layer.load_from_torch(nn.MultiheadAttention(16, 4, bias=False, batch_first=True))
    with pytest.raises(ValueError, match=r"bias=False like this layer, got bias=True"):
        BidirectionalAttention(16, 4, bias=False).load_from_torch(nn.MultiheadAttention(16, 4, batch_first=True))
    with pytest.raises(TypeError, match=r"mha must be a torch.nn.MultiheadAttention, got Linear"):
        BidirectionalAttention.from_torch(nn.Linear(16, 48))
    with pytest.raises(TypeError, match=r"got Linear"):
        layer.load_from_torch(nn.Linear(16, 48))


# ---------------------------------------------------------------- reference, paths, properties


@pytest.mark.parametrize("B,S,C,NH", [(1, 3, 4, 2), (2, 6, 12, 3), (3, 10, 32, 8)])
@pytest.mark.parametrize("bias", [True, False])
def test_matches_float64_reference_both_paths(B, S, C, NH, bias):
    torch.manual_seed(S)
    layer = BidirectionalAttention(C, NH, bias=bias)
    x = torch.randn(B, S, C)
    mask = torch.rand(B, 1, S, S) > 0.3  # (B, 1, S, S): per-query masks, some rows may be empty
    ref, ref_w = reference(layer, x, mask)
    for impl in ("sdpa", "explicit"):
        layer.attn_impl = impl
        assert torch.allclose(layer(x, mask).double(), ref, atol=1e-5)
    out, w = layer(x, mask, return_weights=True)
    assert torch.allclose(out.double(), ref, atol=1e-5) and torch.allclose(w.double(), ref_w, atol=1e-6)


def test_sdpa_is_default_and_weights_come_from_the_explicit_path(monkeypatch):
    from attention_lib import functional

    layer = BidirectionalAttention(8, 2)
    assert layer.attn_impl == "sdpa"
    calls = []
    for name in ("sdpa", "explicit"):  # spies in the registry of paths, which every layer reads
        real = functional._ATTENTION_IMPLS[name]
        spy = lambda *args, real=real, name=name, **kwargs: (calls.append(name), real(*args, **kwargs))[1]  # noqa: E731
        monkeypatch.setitem(functional._ATTENTION_IMPLS, name, spy)
    x = torch.randn(2, 3, 8)
    assert isinstance(layer(x), torch.Tensor)
    out, w = layer(x, return_weights=True)
    layer.attn_impl = "explicit"
    layer(x)
    assert calls == ["sdpa", "explicit", "explicit"]
    assert w.shape == (2, 2, 3, 3)


def test_weights_sum_to_one_over_visible_keys_and_zero_on_padding():
    torch.manual_seed(0)
    layer = BidirectionalAttention(16, 4)
    mask = pad_mask([5, 2, 4], 5)
    _, w = layer(torch.randn(3, 5, 16), mask, return_weights=True)  # (B, NH, S, S)
    assert torch.allclose(w.sum(-1), torch.ones(3, 4, 5), atol=1e-6)
    assert (w.masked_select(~mask[:, None, None, :].expand_as(w)) == 0).all()
    assert (w.masked_select(mask[:, None, None, :].expand_as(w)) > 0).all()


@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
def test_padding_does_not_change_real_tokens(impl):
    torch.manual_seed(0)
    layer = BidirectionalAttention(32, 4).eval()
    layer.attn_impl = impl
    x = torch.randn(2, 6, 32)  # (B, S, C)
    out = layer(x)
    for extra in (1, 5):
        padded = torch.cat([x, 100 * torch.randn(2, extra, 32)], dim=1)  # (B, S + extra, C): loud garbage
        mask = pad_mask([6, 6], 6 + extra)
        assert torch.allclose(layer(padded, mask)[:, :6], out, atol=1e-5)
        assert not torch.allclose(layer(padded)[:, :6], out, atol=1e-3)  # unmasked padding does change them


def test_each_sequence_of_a_padded_batch_equals_it_alone():
    torch.manual_seed(1)
    layer = BidirectionalAttention(16, 2).eval()
    lengths = [7, 3, 5]
    x = torch.randn(3, 7, 16)
    out = layer(x, pad_mask(lengths, 7))
    for i, n in enumerate(lengths):
        assert torch.allclose(out[i, :n], layer(x[i : i + 1, :n])[0], atol=1e-5)


@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
def test_permutation_equivariance_without_mask(impl):
    torch.manual_seed(0)
    layer = BidirectionalAttention(24, 3)
    layer.attn_impl = impl
    x = torch.randn(2, 9, 24)
    perm = torch.randperm(9)
    assert not torch.equal(perm, torch.arange(9))
    assert torch.allclose(layer(x[:, perm]), layer(x)[:, perm], atol=1e-5)


@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
def test_fully_masked_rows_give_zeros_not_nan(impl):
    torch.manual_seed(0)
    layer = BidirectionalAttention(16, 4)
    layer.attn_impl = impl
    x = torch.randn(2, 4, 16, requires_grad=True)
    # sequence 1 is all padding; in sequence 0, query 2 of head 1 sees nothing through a per-head mask
    mask = pad_mask([4, 0], 4)[:, None, None, :].expand(2, 4, 4, 4).clone()  # (B, NH, S, S)
    mask[0, 1, 2] = False
    out = layer(x, mask)
    assert not out.isnan().any()
    assert torch.allclose(out[1], layer.Wo.bias.expand(4, 16), atol=1e-6)  # zero context: just Wo's bias
    ref, _ = reference(layer, x.detach(), mask)
    assert torch.allclose(out.double(), ref, atol=1e-5)
    _, w = layer(x, mask, return_weights=True)
    assert (w[1] == 0).all() and (w[0, 1, 2] == 0).all() and not w.isnan().any()
    out.sum().backward()
    assert not x.grad.isnan().any() and not layer.Wqkv.weight.grad.isnan().any()


@settings(max_examples=40, deadline=None)
@given(
    B=st.integers(1, 3),
    S=st.integers(1, 8),
    NH=st.integers(1, 4),
    HS=st.integers(1, 6),
    kind=st.sampled_from(["none", "padding", "per_query", "per_head", "shared"]),
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_property_random_shapes_and_masks(B, S, NH, HS, kind, bias, seed):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    C = NH * HS
    layer = BidirectionalAttention(C, NH, bias=bias)
    x = torch.randn(B, S, C, generator=g)
    mask = {
        "none": None,
        "padding": pad_mask(torch.randint(0, S + 1, (B,), generator=g).tolist(), S),  # (B, S): may be empty
        "per_query": torch.rand(B, 1, S, S, generator=g) > 0.5,
        "per_head": torch.rand(B, NH, S, S, generator=g) > 0.5,
        "shared": torch.rand(1, S, S, generator=g) > 0.5,  # 3-D: broadcasts over batch and heads
    }[kind]
    ref_mask = None if mask is None else (mask[:, None, None, :] if kind == "padding" else mask)
    ref, ref_w = reference(layer, x, ref_mask)
    for impl in ("sdpa", "explicit"):
        layer.attn_impl = impl
        out = layer(x, mask)
        assert out.shape == (B, S, C) and not out.isnan().any()
        assert torch.allclose(out.double(), ref, atol=1e-5)
    _, w = layer(x, mask, return_weights=True)
    assert torch.allclose(w.double(), ref_w, atol=1e-6)


@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
def test_gradcheck_float64(impl):
    torch.manual_seed(0)
    layer = BidirectionalAttention(8, 2).double()
    layer.attn_impl = impl
    mask = pad_mask([3, 2], 3)
    x = torch.randn(2, 3, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: layer(t, mask), (x,))
    params = tuple(layer.parameters())

    def through_weights(*ps):
        names = [name for name, _ in layer.named_parameters()]
        return torch.func.functional_call(layer, dict(zip(names, ps, strict=True)), (x.detach(), mask))

    assert torch.autograd.gradcheck(through_weights, tuple(p.detach().requires_grad_() for p in params))


# ---------------------------------------------------------------- dropout


def test_dropout_only_in_training():
    torch.manual_seed(0)
    layer = BidirectionalAttention(16, 4, attn_drop=0.5, out_drop=0.5)
    plain = BidirectionalAttention(16, 4)
    plain.load_state_dict(layer.state_dict())
    x = torch.randn(2, 6, 16)
    layer.train()
    for impl in ("sdpa", "explicit"):
        layer.attn_impl = impl
        assert not torch.equal(layer(x), layer(x))
    layer.eval()
    for impl in ("sdpa", "explicit"):
        layer.attn_impl = impl
        assert torch.equal(layer(x), layer(x))
        assert torch.allclose(layer(x), plain(x), atol=1e-6)


def test_dropout_rates_act_where_documented():
    torch.manual_seed(0)
    x = torch.randn(2, 5, 16)
    out_only = BidirectionalAttention(16, 4, out_drop=1.0).train()
    assert (out_only(x) == 0).all()  # everything after Wo dropped
    attn_only = BidirectionalAttention(16, 4, attn_drop=1.0).train()
    for impl in ("sdpa", "explicit"):
        attn_only.attn_impl = impl
        assert torch.allclose(attn_only(x), attn_only.Wo.bias.expand(2, 5, 16))  # every probability dropped
    _, w = attn_only(x, return_weights=True)
    assert torch.allclose(w.sum(-1), torch.ones(2, 4, 5))  # weights are returned before dropout


def test_qkv_splits_wqkv_into_heads_as_views():
    """q, k, v of head h are the h-th HS columns of each third of Wqkv(x), and views of it (no copy)."""
    layer = BidirectionalAttention(12, 3)
    x = torch.randn(2, 5, 12)
    with torch.no_grad():
        qkv = layer.Wqkv(x)  # (B, S, 3C)
        q, k, v = layer._qkv(x)  # each (B, NH, S, HS)
    for part, t in enumerate((q, k, v)):
        assert t.shape == (2, 3, 5, 4)
        for h in range(3):
            assert torch.equal(t[:, h], qkv[..., part * 12 + h * 4 : part * 12 + (h + 1) * 4])
    assert q._base is not None and q._base.data_ptr() == k._base.data_ptr() == v._base.data_ptr()


# ---------------------------------------------------------------- dtypes and bad inputs


def test_float64_and_shapes():
    layer = BidirectionalAttention(12, 3).double()
    out, w = layer(torch.randn(2, 4, 12, dtype=torch.float64), return_weights=True)
    assert out.dtype == torch.float64 and out.shape == (2, 4, 12) and w.shape == (2, 3, 4, 4)
    assert sum(p.numel() for p in layer.parameters()) == 4 * 12 * 12 + 4 * 12
    assert layer.Wqkv.weight.shape == (36, 12) and layer.Wo.weight.shape == (12, 12)


