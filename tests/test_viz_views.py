"""The explorer's views for bertviz users beyond one head: the sentence-pair filter (`sentence_b_start`), the model
view (layers x heads thumbnails that open a head), the neuron view (q, k and q·k of the package's own layers, checked
against q and k computed here from the layer's weights and against the weights the layer returns), and the save-SVG
button. Each asserts the numbers behind the picture."""

from __future__ import annotations

import base64
import io
import math
import re

import numpy as np
import pytest
import torch
from PIL import Image

from attention_lib import BidirectionalAttention, GroupedQueryAttention
from attention_lib.cross import CrossAttention
from attention_lib.viz import explore_attention, head_view, model_view, word_vectors
from attention_lib.viz.grid import grid_svg
from attention_lib.viz.neuron import neuron_numbers
from attention_lib.viz.pairs import sentence_pair
from attention_lib.viz.style import HIDDEN, hex_colours, weights_norm

TOKENS = "[CLS] the cat sat [SEP] it was warm [SEP]".split()  # sentence B starts at 5


def attentions(L: int, NH: int, S: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple((torch.randn(1, NH, S, S, generator=g) * 2).softmax(-1) for _ in range(L))


def cell_values(svg: str) -> list[float]:
    return [float(v) for v in re.findall(r"<title>[^<]*: ([0-9.]+)</title></rect>", svg)]


def pixels(uri: str) -> list[tuple[int, ...]]:
    png = base64.b64decode(uri.removeprefix("data:image/png;base64,"))
    return [tuple(p) for p in np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).reshape(-1, 3).tolist()]


def test_sentence_b_start_shows_each_block_of_the_weights_as_bertviz_filters_them():
    att = attentions(2, 3, 9)
    ex = head_view(att, TOKENS, sentence_b_start=5)
    assert ex.controls["pair"].layout.display is None and ex.compute().weights.shape == (3, 9, 9)  # "all" first
    A, B = slice(0, 5), slice(5, 9)
    for pair, rows, columns in (("A → A", A, A), ("A → B", A, B), ("B → A", B, A), ("B → B", B, B)):
        for layer in (0, 1):
            view = ex.set(pair=pair, layer=layer, head=2, view="weights")
            assert torch.equal(view.weights, att[layer][0][:, rows, columns]) and ex.message.value == ""
            assert view.query_tokens == TOKENS[rows] and view.key_tokens == TOKENS[columns]
            block = att[layer][0, 2, rows, columns]  # (S_A or S_B, S_A or S_B)
            assert cell_values(ex.picture.value) == [round(float(w), 3) for w in block.flatten()]
    ex.set(pair="all")
    assert torch.equal(ex.compute().weights, att[1][0])
    assert head_view(att, TOKENS).controls["pair"].layout.display == "none"  # no pair, no menu
    for bad in (0, 9, 2.5, True):
        with pytest.raises(ValueError, match="sentence_b_start must be"):
            head_view(att, TOKENS, sentence_b_start=bad)


def test_the_sentence_filter_follows_left_padding_and_refuses_cross_attention():
    ex = explore_attention(tokens="a b c d e", sentence_b_start=2, hidden_size=8, num_heads=2)
    full = ex.set(pad=2, pad_side="left", pair="all")
    block = ex.set(pair="B → A")  # left padding moves sentence B two places
    assert block.query_tokens == ["c", "d", "e"] and block.key_tokens == ["[PAD]", "[PAD]", "a", "b"]
    assert torch.equal(block.weights, full.weights[:, 4:, :4])
    assert ex.set(kind="cross") is None and "sentence filter cuts self-attention" in ex.message.value
    with pytest.raises(ValueError, match="the sentence filter must be one of"):
        sentence_pair(full, 2, "A → C")


def test_the_model_view_shows_every_head_as_a_thumbnail_and_a_click_opens_it():
    att = attentions(3, 4, 6, seed=1)
    ex = model_view(att, "a b c d e f")
    assert ex.controls["view"].value == "model" and ex.grid.layout.display is None
    assert sorted(ex.grid_buttons) == [(i, h) for i in range(3) for h in range(4)]
    rule = r"\.attn-thumb-(\d+-\d+) \{ background: #fff url\((data:image/png;base64,[^)]+)\)"
    uris = dict(re.findall(rule, ex.picture.value))
    assert len(uris) == 12
    for i, h in ((0, 0), (2, 3)):  # each head on its own scale, 0 to its largest weight, in 255 steps (a byte a pixel)
        w = att[i][0, h]
        expected = np.array([[int(c[k:k + 2], 16) for k in (1, 3, 5)] for c in hex_colours(w, weights_norm(w))])
        assert np.abs(np.array(pixels(uris[f"{i}-{h}"])) - expected).max() <= 2
    ex.grid_buttons[2, 1].click()
    c = ex.controls
    assert (c["layer"].value, c["head"].value, c["view"].value) == (2, 1, "weights")
    assert ex.grid.layout.display == "none"
    assert cell_values(ex.picture.value) == [round(float(w), 3) for w in att[2][0, 1].flatten()]


def test_the_grid_greys_hidden_cells_and_saves_as_one_svg(tmp_path):
    att = tuple(a.tril() / a.tril().sum(-1, keepdim=True) for a in attentions(2, 2, 4))  # a decoder's
    ex = model_view(att, "a b c d")
    svg = ex.save_image(tmp_path / "grid.svg").read_text()
    thumb = r'<g class="thumb" data-layer="(\d)" data-head="(\d)">.*?href="(data:image/png;base64,[^"]+)"'
    images = re.findall(thumb, svg)
    assert [(int(i), int(h)) for i, h, _ in images] == [(0, 0), (0, 1), (1, 0), (1, 1)] and "<style>" in svg
    grey = tuple(int(HIDDEN[k:k + 2], 16) for k in (1, 3, 5))
    assert [p == grey for p in pixels(images[3][2])] == (~torch.ones(4, 4, dtype=torch.bool).tril()).flatten().tolist()
    assert svg == ex.save_image(tmp_path / "again.svg").read_text()


def test_the_model_view_at_64_tokens_12_heads_and_6_layers_is_under_1_mb():
    att = attentions(6, 12, 64, seed=2)
    ex = model_view(att, [f"t{i}" for i in range(64)])
    assert ex.message.value == "" and len(ex.grid_buttons) == 72
    assert len(ex.picture.value.encode()) <= 1_000_000 and len(ex.grid_svg.encode()) <= 1_000_000
    assert len(grid_svg([ex.compute(layer=i) for i in range(6)]).encode()) <= 1_000_000


def own_q_k(layer, kind: str, tokens: list[str], context: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """q (NH, S, HS) and k (NKV, S_kv, HS) computed here from the layer's weights, on the explorer's word vectors."""
    C, HS = layer.hidden_size, layer.head_size
    x = word_vectors(tokens, C)  # (S, C)
    if kind == "cross":
        q = layer.Wq(x).view(len(tokens), -1, HS).transpose(0, 1)  # (NH, S, HS)
        k = layer.Wkv(word_vectors(context, C))[:, :C].view(len(context), -1, HS).transpose(0, 1)  # (NH, S_kv, HS)
        return q, k
    NH, NKV = layer.num_heads, getattr(layer, "num_kv_heads", layer.num_heads)
    qkv = layer.Wqkv(x)  # (S, (NH + 2 NKV) HS)
    q = qkv[:, : NH * HS].view(len(tokens), NH, HS).transpose(0, 1)  # (NH, S, HS)
    k = qkv[:, NH * HS : (NH + NKV) * HS].view(len(tokens), NKV, HS).transpose(0, 1)  # (NKV, S, HS)
    return q, k


@pytest.mark.parametrize("kind", ["bidirectional", "causal", "cross", "grouped", "ALiBi"])
def test_the_neuron_view_shows_the_layers_own_q_k_and_the_softmax_row_they_feed(kind):
    torch.manual_seed(0)
    tokens, context = "the cat sat on the warm mat".split(), "le chat est assis".split()
    if kind == "cross":
        layer = CrossAttention(16, 4)
        ex = explore_attention(None, layer, kinds=("cross",), tokens=tokens, context_tokens=context, hidden_size=16)
    elif kind in ("grouped", "ALiBi"):  # two query heads per key/value head; ALiBi adds its bias to the scores
        NKV = 2 if kind == "grouped" else 4
        layer = GroupedQueryAttention(16, 4, NKV, context_size=16, bias=True, alibi=kind == "ALiBi")
        shown = "causal" if kind == "grouped" else "ALiBi"
        ex = explore_attention(layer, kinds=(shown,), tokens=tokens, hidden_size=16)
    else:
        layer = BidirectionalAttention(16, 4)
        ex = explore_attention(layer, kinds=(kind,), tokens=tokens, hidden_size=16)
    with torch.no_grad():
        q, k = own_q_k(layer, kind, tokens, context)
    G = 2 if kind == "grouped" else 1
    for head, i, j in ((1, 4, 2), (3, 6, 0)):
        view, n = neuron_numbers(ex, i, j, head=head)
        assert torch.allclose(n.q, q[head, i], atol=1e-6) and torch.allclose(n.k, k[head // G, j], atol=1e-6)
        assert torch.allclose(n.products, q[head, i] * k[head // G, j], atol=1e-6)
        bias = 0.0 if view.bias is None else float(view.bias[head, i, j])
        assert n.score == pytest.approx(float(q[head, i] @ k[head // G, j]) / math.sqrt(4) + bias, abs=1e-5)
        assert torch.allclose(n.weights, view.weights[head, i], atol=1e-6)  # the row the layer itself returned
        assert bool((n.scores[~view.mask[i]] == -math.inf).all())
    view = ex.set(view="neuron", head=3, query=6, key=0)
    assert ex.message.value == "" and view.head == 3
    assert ex.controls["query"].options[6] == ("6: mat", 6) and ex.controls["key"].layout.display is None
    assert f"= {n.score:.3f};" in ex.picture.value and f"{float(n.weights[0]):.3f}" in ex.picture.value
    shown = [float(v) for v in re.findall(r"<title>q \([^)]*\)\[\d+\] = (-?[0-9.]+)</title>", ex.picture.value)]
    assert shown == pytest.approx(n.q.tolist(), abs=1e-4)


def test_under_a_temperature_the_neuron_view_shows_q_divided_by_t():
    torch.manual_seed(0)
    layer = BidirectionalAttention(16, 4)
    ex = explore_attention(layer, kinds=("bidirectional",), tokens="a b c d", hidden_size=16)
    _, one = neuron_numbers(ex, 1, 2, head=2)
    view, hot = neuron_numbers(ex, 1, 2, head=2, temperature=2.0)
    assert torch.allclose(hot.q, one.q / 2) and torch.allclose(hot.weights, view.weights[2, 1], atol=1e-6)
    assert not callable(layer.__dict__.get("_attend"))  # the layer is left as it was


def test_recorded_weights_have_no_neuron_view():
    att = attentions(1, 2, 4)
    ex = head_view(att, "a b c d")
    assert "neuron" not in ex.controls["view"].options
    with pytest.raises(ValueError, match="the neuron view needs an attention_lib layer"):
        neuron_numbers(ex, 0, 0)
    with pytest.raises(ValueError, match="recorded weights have none"):
        explore_attention(attentions=att, tokens="a b c d", view="neuron")


def test_the_save_button_writes_the_picture_shown_and_offers_it_as_a_download(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    att = attentions(2, 2, 5)
    ex = head_view(att, "a b c d e", layer=1)
    ex.save_button.click()
    path = tmp_path / "attention-bidirectional-lines-layer1-head0.svg"
    assert path.read_text() == ex.save_image(tmp_path / "same.svg").read_text()
    link = re.search(r'download="([^"]+)" href="data:image/svg\+xml;base64,([^"]+)"', ex.message.value)
    assert link.group(1) == path.name and base64.b64decode(link.group(2)) == path.read_bytes()
    ex.set(view="model")
    ex.save_button.click()
    assert (tmp_path / "attention-bidirectional-model-layer1-head0.svg").read_text().count('<g class="thumb"') == 4
    assert ex.message.value.startswith('<div class="attn-message">saved')


def test_the_saved_page_carries_the_model_view_and_the_save_button():
    page = model_view(attentions(2, 3, 4), "a b c d", html_action="return").data
    assert '"start":{"layer":0,"head":0,"view":"model"}' in page and '<option value="model">' in page
    assert '<button id="attn-save">save SVG</button>' in page and "function grid(" in page
