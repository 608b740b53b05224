"""DecoderBlock (notebook 05) computes what nn.TransformerDecoderLayer(norm_first=True, batch_first=True) computes."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attention_lib import CausalAttention, CrossAttention, DecoderBlock, causal_mask, padding_mask


def torch_layer(C, NH, F, dropout=0.0, bias=True, seed=0):
    torch.manual_seed(seed)
    layer = nn.TransformerDecoderLayer(C, NH, F, dropout=dropout, norm_first=True, batch_first=True, bias=bias)
    with torch.no_grad():  # LayerNorms that are not the identity, so that their place in the block matters
        for norm in (layer.norm1, layer.norm2, layer.norm3):
            norm.weight.uniform_(0.5, 1.5)
            if norm.bias is not None:
                norm.bias.uniform_(-0.5, 0.5)
    return layer.eval()


def reference(layer, x, context, mask, context_mask):
    """nn.TransformerDecoderLayer with our masks: causal + decoder padding, context padding (True = ignore there)."""
    S = x.shape[1]
    return layer(
        x, context, tgt_mask=~causal_mask(S)[0], tgt_is_causal=True,
        tgt_key_padding_mask=None if mask is None else ~mask,
        memory_key_padding_mask=None if context_mask is None else ~context_mask,
    )  # (B, S, C)


@pytest.mark.parametrize("B,S,S_kv,C,NH,F", [(2, 5, 7, 16, 4, 32), (3, 1, 4, 8, 2, 8), (1, 9, 3, 12, 3, 24)])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
@pytest.mark.parametrize("bias", [True, False])
def test_equals_torch_decoder_layer(B, S, S_kv, C, NH, F, padded, impl, bias):
    layer = torch_layer(C, NH, F, bias=bias)
    block = DecoderBlock.from_torch(layer, context_size=S)
    block.self_attn.attn_impl = block.cross_attn.attn_impl = impl
    x, context = torch.randn(B, S, C), torch.randn(B, S_kv, C)  # (B, S, C), (B, S_kv, C)
    mask = padding_mask(torch.randint(1, S + 1, (B,)), S) if padded else None  # (B, S): right padding
    context_mask = padding_mask(torch.randint(1, S_kv + 1, (B,)), S_kv) if padded else None  # (B, S_kv)
    with torch.no_grad():
        ours = block(x, context, mask, context_mask)  # (B, S, C)
        theirs = reference(layer, x, context, mask, context_mask)  # (B, S, C)
    real = torch.ones(B, S, dtype=torch.bool) if mask is None else mask  # compare the real decoder tokens
    assert ours.shape == (B, S, C) and not ours.isnan().any()
    assert torch.allclose(ours[real], theirs[real], atol=1e-5)


def test_the_by_hand_copy_of_the_notebook_equals_from_torch():
    layer = torch_layer(16, 4, 32)
    block = DecoderBlock(16, 4, 32, context_size=5).eval()
    block.load_from_torch(layer)
    assert all(torch.equal(a, b) for a, b in zip(
        block.state_dict().values(), DecoderBlock.from_torch(layer, context_size=5).state_dict().values(), strict=True
    ))


def test_gradients_equal_torch_decoder_layer():
    layer = torch_layer(16, 4, 32).train()
    block = DecoderBlock.from_torch(layer, context_size=6)
    assert block.training
    x, context = torch.randn(2, 6, 16, requires_grad=True), torch.randn(2, 4, 16, requires_grad=True)
    block(x, context).sum().backward()
    grads = x.grad.clone(), context.grad.clone()
    x.grad = context.grad = None
    reference(layer, x, context, None, None).sum().backward()
    assert torch.allclose(grads[0], x.grad, atol=1e-5) and torch.allclose(grads[1], context.grad, atol=1e-5)
    assert torch.allclose(block.ffn[0].weight.grad, layer.linear1.weight.grad, atol=1e-5)


def test_the_block_is_causal_on_the_decoder_side_and_not_on_the_context():
    block = DecoderBlock(8, 2, 16, context_size=6).eval()
    x, context = torch.randn(1, 6, 8), torch.randn(1, 5, 8)
    with torch.no_grad():
        y = block(x, context)
        x2 = x.clone()
        x2[:, -1] += 1.0  # a later decoder token changes: earlier outputs must not
        assert torch.allclose(block(x2, context)[:, :-1], y[:, :-1], atol=1e-6)
        c2 = context.clone()
        c2[:, -1] += 1.0  # the last context token changes: every output may (cross attention is not causal)
        assert not torch.allclose(block(x, c2)[:, 0], y[:, 0], atol=1e-4)


def test_parts_dropout_and_sizes():
    block = DecoderBlock(8, 2, 16, context_size=4, kv_hidden_size=6, dropout=0.1)
    assert isinstance(block.self_attn, CausalAttention) and isinstance(block.cross_attn, CrossAttention)
    assert block.self_attn.attn_drop == block.cross_attn.attn_drop == 0.1
    assert block.cross_attn.kv_hidden_size == 6 and block.ffn[0].out_features == 16
    out = block.eval()(torch.randn(2, 4, 8), torch.randn(2, 3, 6))
    assert out.shape == (2, 4, 8)
    with pytest.raises(ValueError, match="longer than context_size"):
        block(torch.randn(2, 5, 8), torch.randn(2, 3, 6))


@pytest.mark.parametrize("make, error, match", [
    (lambda: nn.Linear(4, 4), TypeError, "TransformerDecoderLayer"),
    (lambda: nn.TransformerDecoderLayer(8, 2, 16, batch_first=True), ValueError, "norm_first=True"),
    (lambda: nn.TransformerDecoderLayer(8, 2, 16, norm_first=True), ValueError, "batch_first=True"),
    (lambda: nn.TransformerDecoderLayer(8, 2, 16, norm_first=True, batch_first=True, activation="gelu"),
     ValueError, "relu"),
])
def test_from_torch_refuses_layers_it_does_not_compute(make, error, match):
    with pytest.raises(error, match=match):
        DecoderBlock.from_torch(make(), context_size=4)


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("projected", [False, True])
@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
def test_decode_step_by_step_equals_forward(padded, projected, impl):
    """A 2-token prompt in one call, then one token per call: the rows of forward on the whole sequence."""
    torch.manual_seed(0)
    B, S, S_kv, C, NH = 2, 6, 5, 16, 4
    block = DecoderBlock.from_torch(torch_layer(C, NH, 32), context_size=8)
    block.self_attn.attn_impl = block.cross_attn.attn_impl = impl
    x, context = torch.randn(B, S, C), torch.randn(B, S_kv, C)
    mask = padding_mask([S, 4], S) if padded else None  # (B, S): the decoder's padding
    context_mask = padding_mask([S_kv, 2], S_kv) if padded else None  # (B, S_kv)
    with torch.no_grad():
        full = block(x, context, mask, context_mask)  # (B, S, C)
        cache = block.new_cache(B)
        kv = block.cross_attn.project_context(context) if projected else context
        bounds = [0, 2, *range(3, S + 1)]
        steps = [
            block.decode(x[:, a:b], cache, kv, None if mask is None else mask[:, :b], context_mask)
            for a, b in zip(bounds, bounds[1:], strict=False)
        ]
    out = torch.cat(steps, dim=1)  # (B, S, C)
    real = torch.ones(B, S, dtype=torch.bool) if mask is None else mask
    assert len(cache) == S
    torch.testing.assert_close(out[real], full[real], atol=1e-5, rtol=1e-5)


