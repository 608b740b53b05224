"""SingleHeadAttention against an independent reference, its two paths, masks, gradients and bad inputs."""


import pytest
import torch
from reference import layer64

from attention_lib import SingleHeadAttention


def reference(layer: SingleHeadAttention, x: torch.Tensor, mask: torch.Tensor | None = None):
    """The shared float64 reference; mask: None or bool (B, S, S_kv). (out (B, S, C), weights (B, S, S_kv))."""
    return layer64(layer, x, mask)


def random_mask(B: int, S: int, generator: torch.Generator) -> torch.Tensor:
    return torch.rand(B, S, S, generator=generator) > 0.4  # (B, S, S_kv), some rows fully masked by chance


@pytest.mark.parametrize("B,S,C", [(1, 1, 4), (2, 5, 8), (3, 7, 32), (2, 16, 64)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
def test_matches_reference(B, S, C, bias, impl):
    torch.manual_seed(B * 100 + S)
    layer = SingleHeadAttention(C, bias=bias)
    layer.attn_impl = impl
    x = torch.randn(B, S, C)
    ref, _ = reference(layer, x)
    assert torch.allclose(layer(x).double(), ref, atol=1e-5)


@pytest.mark.parametrize("B,S,C", [(2, 5, 8), (3, 9, 16)])
def test_padding_mask_matches_reference(B, S, C):
    torch.manual_seed(1)
    layer = SingleHeadAttention(C)
    x = torch.randn(B, S, C)
    lengths = torch.randint(1, S + 1, (B,))
    pad = torch.arange(S)[None, :] < lengths[:, None]  # (B, S_kv)
    ref, ref_w = reference(layer, x, pad[:, None, :].expand(B, S, S))
    out, w = layer(x, pad, return_weights=True)
    assert torch.allclose(out.double(), ref, atol=1e-5)
    assert torch.allclose(w.double(), ref_w, atol=1e-5)
    assert torch.allclose(layer(x, pad).double(), ref, atol=1e-5)


def test_full_3d_mask_and_fully_masked_rows():
    g = torch.Generator().manual_seed(3)
    torch.manual_seed(3)
    B, S, C = 3, 6, 16
    layer = SingleHeadAttention(C)
    x = torch.randn(B, S, C)
    mask = random_mask(B, S, g)
    mask[0, 2] = False  # make sure at least one query sees nothing
    ref, ref_w = reference(layer, x, mask)
    for impl in ("sdpa", "explicit"):
        layer.attn_impl = impl
        out = layer(x, mask)
        assert not out.isnan().any()
        assert torch.allclose(out.double(), ref, atol=1e-5)
        assert torch.allclose(out[0, 2], layer.Wo.bias, atol=1e-6)  # zero context -> only the bias is left
    _, w = layer(x, mask, return_weights=True)
    assert torch.equal(w[0, 2], torch.zeros(S))
    assert torch.allclose(w.double(), ref_w, atol=1e-6)


def test_paths_agree_and_weights_are_distributions():
    torch.manual_seed(4)
    B, S, C = 4, 11, 32
    layer = SingleHeadAttention(C)
    x = torch.randn(B, S, C)
    mask = random_mask(B, S, torch.Generator().manual_seed(4))
    fused_out = layer(x, mask)
    explicit_out, w = layer(x, mask, return_weights=True)
    assert torch.allclose(fused_out, explicit_out, atol=1e-5)
    assert w.shape == (B, S, S)
    visible = mask.any(-1)  # (B, S): rows with at least one visible key
    assert torch.allclose(w.sum(-1)[visible], torch.ones(int(visible.sum())), atol=1e-6)
    assert torch.equal(w.sum(-1)[~visible], torch.zeros(int((~visible).sum())))
    assert bool((w[~mask] == 0).all())  # no weight ever lands on a masked key


def test_output_shape_and_head_size():
    layer = SingleHeadAttention(20)
    assert layer.Wqkv.weight.shape == (3 * 5, 20) and layer.Wo.weight.shape == (20, 5)
    assert layer(torch.randn(2, 3, 20)).shape == (2, 3, 20)
    assert SingleHeadAttention(8, bias=False).Wqkv.bias is None


def test_gradients_reach_every_parameter_without_nan():
    torch.manual_seed(5)
    layer = SingleHeadAttention(16)
    x = torch.randn(2, 5, 16, requires_grad=True)
    mask = torch.ones(2, 5, 5, dtype=torch.bool)
    mask[1, 3] = False  # a blind query must not produce NaN gradients
    for impl in ("sdpa", "explicit"):
        layer.zero_grad()
        x.grad = None
        layer.attn_impl = impl
        layer(x, mask).pow(2).sum().backward()
        for name, p in layer.named_parameters():
            assert p.grad is not None and p.grad.abs().sum() > 0, name
            assert torch.isfinite(p.grad).all(), name
        assert torch.isfinite(x.grad).all()


def test_gradcheck_float64():
    torch.manual_seed(6)
    layer = SingleHeadAttention(8).double()
    x = torch.randn(2, 4, 8, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    for impl in ("sdpa", "explicit"):
        layer.attn_impl = impl
        assert torch.autograd.gradcheck(lambda t: layer(t, mask), (x,))


