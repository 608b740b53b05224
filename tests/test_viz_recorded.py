"""Recorded weights in the explorer, the bertviz route: `head_view`, `model_view` and
`explore_attention(attentions=...)` take what a Hugging Face model returns with output_attentions=True and show
exactly those numbers; every wrong input is refused in words that say what was expected; pictures of many cells stay
small (images, at most MAX_LINES lines); the picture exports as a standalone page and as images. Also:
`explore_attention(stack, layer=...)` and token lists."""

import base64
import importlib.util
import io
import json
import re

import numpy as np
import pytest
import torch
from PIL import Image

from attention_lib import BidirectionalAttention
from attention_lib.viz import explore_attention, head_view, model_view
from attention_lib.viz.explorer import _mask_text
from attention_lib.viz.recorded import RecordedAttention, check_attention
from attention_lib.viz.style import HIDDEN, hex_colours, levels, weights_norm
from attention_lib.viz.svg import HEAD_COLOURS, MAX_LINES, RASTER_CELLS, raster, strongest

VIEWS = ("weights", "all heads", "lines", "overlay", "compare", "model")  # no neuron view: no q and k


def attentions(L: int, NH: int, S: int, S_kv: int | None = None, *, causal: bool = False, seed: int = 0, scale=2.0):
    """L tensors (1, NH, S, S_kv) of softmax weights, as a Hugging Face model returns them."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(L, 1, NH, S, S_kv or S, generator=g) * scale  # (L, 1, NH, S, S_kv)
    if causal:
        scores = scores.masked_fill(~torch.ones(S, S, dtype=torch.bool).tril(), -torch.inf)
    return tuple(scores.softmax(-1))


def cell_values(svg: str) -> list[float]:
    """The weights written in the cells' hover titles of a weights table, row by row."""
    return [float(v) for v in re.findall(r"<title>[^<]*: ([0-9.]+)</title></rect>", svg)]


def test_the_explorer_shows_exactly_the_tensors_passed_in_every_layer_and_view():
    att = attentions(3, 4, 5, seed=1)
    ex = explore_attention(attentions=att, tokens="the cat sat on it")
    assert ex.compute().kind == "bidirectional" and ex.controls["layer"].options == (("0", 0), ("1", 1), ("2", 2))
    for layer in range(3):
        assert torch.equal(ex.compute(layer=layer).weights, att[layer][0])
        ex.set(layer=layer, head=3, view="weights")
        assert cell_values(ex.picture.value) == [round(float(w), 3) for w in att[layer][0, 3].flatten()]
        for view in VIEWS:
            ex.set(view=view)
            assert ex.message.value == "" and f'data-layer="{layer}"' in ex.picture.value
    assert ex.controls["pad"].layout.display == "none"  # recorded weights keep the tokens they were recorded on
    ex.set(tokens="one two three")
    assert "recorded on (S, S_kv) = (5, 5)" in ex.message.value


def test_head_view_and_model_view_take_bertvizs_arguments():
    att = attentions(4, 3, 4, seed=2)
    ex = head_view(att, ["[CLS]", "a", "b", "[SEP]"], layer=2, heads=[1, 2], include_layers=[0, 2, 3])
    assert ex.controls["view"].value == "lines" and ex.controls["layer"].options == (("0", 0), ("2", 1), ("3", 2))
    view = ex.compute()
    assert (view.layer_index, view.head) == (2, 1) and torch.equal(view.weights, att[2][0])
    assert torch.equal(ex.compute(layer=2).weights, att[3][0])  # the third layer shown is the model's layer 3
    grid = model_view(att, ["[CLS]", "a", "b", "[SEP]"], include_heads=[2])
    assert grid.controls["view"].value == "model" and grid.compute().head == 2
    gpt2 = head_view(att, ["Ġthe", "Ġcat", "Ġsat", "."])  # prettify_tokens: the word marks become spaces
    assert gpt2.compute().query_tokens == [" the", " cat", " sat", "."]


def test_a_decoders_weights_are_shown_causal_and_a_temperature_is_exact():
    att = attentions(2, 2, 4, causal=True, seed=3)
    ex = explore_attention(attentions=att, tokens=["a b", "c", "d", "e"])  # a token may hold a space
    view = ex.compute()
    assert view.kind == "causal" and view.query_tokens == ["a b", "c", "d", "e"]
    assert bool((view.weights[:, ~view.mask] == 0).all()) and torch.equal(view.weights, att[0][0])
    T = 2.5
    assert torch.allclose(ex.compute(temperature=T).weights, (att[0][0].log() / T).softmax(-1), atol=1e-6)
    with pytest.raises(ValueError, match="keys this kind's mask hides"):  # an encoder's weights are not causal
        RecordedAttention(attentions(1, 2, 4)[0][0])(torch.zeros(1, 4, 2), mask=torch.ones(4, 4).bool().tril()[None])


def test_the_overlay_draws_the_chosen_heads_each_in_its_colour_and_every_head_by_default():
    att = attentions(1, 4, 6, seed=8)
    ex = head_view(att, "a b c d e f", heads=[1, 3])
    ex.set(view="overlay")
    assert ex.message.value == "" and ex.controls["head"].layout.display == "none"
    lines = re.findall(r'<line [^>]*stroke="(#[0-9a-f]{6})" stroke-opacity="([0-9.]+)"', ex.picture.value)
    for h in (1, 3):  # each head: its weights at least 2 % of its largest, each line twice (by query, by key)
        w = att[0][0, h]
        mine = [float(opacity) for colour, opacity in lines if colour == HEAD_COLOURS[h]]
        assert len(mine) == 2 * int((w / w.max() >= 0.02).sum()) and max(mine) == 1.0
    assert {colour for colour, _ in lines} == {HEAD_COLOURS[1], HEAD_COLOURS[3]}
    assert ">head 1</text>" in ex.picture.value and ">head 3</text>" in ex.picture.value  # the legend
    every = explore_attention(attentions=att, tokens="a b c d e f", view="overlay")
    drawn = set(re.findall(r'<line [^>]*stroke="(#[0-9a-f]{6})" stroke-opacity', every.picture.value))
    assert drawn == set(HEAD_COLOURS[:4])


def test_an_encoder_decoders_three_attentions_and_their_tokens():
    enc, dec = attentions(2, 2, 6, seed=4), attentions(2, 2, 4, causal=True, seed=5)
    cross = attentions(2, 2, 4, 6, seed=6)
    src, tgt = "le chat est sur le tapis".split(), "the cat is".split() + ["</s>"]
    ex = model_view(encoder_attention=enc, decoder_attention=dec, cross_attention=cross, encoder_tokens=src,
                    decoder_tokens=tgt)
    labels = [label for label, _ in ex.controls["kind"].options]
    assert labels == ["encoder", "decoder", "cross (decoder → encoder)"]
    for kind, weights, queries, keys in (("bidirectional", enc, src, src), ("causal", dec, tgt, tgt),
                                         ("cross", cross, tgt, src)):
        for layer in range(2):
            view = ex.compute(kind=kind, layer=layer)
            assert torch.equal(view.weights, weights[layer][0])
            assert (view.query_tokens, view.key_tokens) == (queries, keys)
        ex.set(kind=kind, view="lines")
        assert ex.message.value == "" and ex.controls["pad"].layout.display == "none"  # no padding to offer
    only_cross = head_view(cross_attention=cross, encoder_tokens=src, decoder_tokens=tgt)
    assert torch.equal(only_cross.compute().weights, cross[0][0])


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers (the test extra)")
def test_a_hugging_face_encoder_decoder_built_here_is_shown_as_it_returns_its_weights():
    from transformers import BartConfig, BartModel

    torch.manual_seed(0)
    config = BartConfig(vocab_size=50, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                        decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32)
    model = BartModel(config).eval()
    model.set_attn_implementation("eager")
    with torch.no_grad():
        out = model(input_ids=torch.tensor([[0, 5, 6, 7, 2]]), decoder_input_ids=torch.tensor([[2, 8, 9]]),
                    output_attentions=True)
    ex = head_view(encoder_attention=out.encoder_attentions, decoder_attention=out.decoder_attentions,
                   cross_attention=out.cross_attentions, encoder_tokens="<s> a b c </s>", decoder_tokens="</s> x y")
    for kind, weights in (("bidirectional", out.encoder_attentions), ("causal", out.decoder_attentions),
                          ("cross", out.cross_attentions)):
        assert all(torch.equal(ex.compute(kind=kind, layer=n).weights, weights[n][0]) for n in range(2))
    with pytest.raises(TypeError, match="is an encoder-decoder"):
        explore_attention(model, tokenizer=object(), tokens="a b")


BAD = [
    (lambda a: a[0], TypeError, "tuple of tensors"),
    (lambda a: [], TypeError, "tuple of tensors"),
    (lambda a: (a[0][0],), ValueError, r"\(1, NH, S, S_kv\)"),
    (lambda a: (torch.cat([a[0], a[0]]),), ValueError, "for sequence b of a batch"),
    (lambda a: (a[0], a[1][..., :3, :3]), ValueError, "the same in every layer"),
    (lambda a: (a[0].log(),), ValueError, r"probabilities in \[0, 1\]"),
    (lambda a: (a[0] * 0.5,), ValueError, "sum to 1 over the keys"),
    (lambda a: (a[0].masked_fill(a[0] > 0.3, float("nan")),), ValueError, "NaN or inf"),
    (lambda a: (a[0].long(),), TypeError, "floating-point"),
]


@pytest.mark.parametrize("bad, error, words", BAD)
def test_wrong_weights_are_refused_saying_what_was_expected(bad, error, words):
    with pytest.raises(error, match=words):
        explore_attention(attentions=bad(attentions(2, 2, 4)), tokens="a b c d")


def test_wrong_tokens_and_arguments_are_refused_saying_what_was_expected():
    att = attentions(2, 2, 4)
    cases = [
        (dict(attentions=att, tokens="a b c"), ValueError, "one token per position of the weights, 4, got 3"),
        (dict(attentions=att, tokens=[1, 2, 3, 4]), TypeError, "list of str"),
        (dict(attentions=att, attention=att, tokens="a b c d"), TypeError, "not both"),
        (dict(attentions=att, tokens="a b c d", include_layers=[0, 2]), ValueError, r"include_layers .* \[0, 2\)"),
        (dict(attentions=att, tokens="a b c d", include_layers=[1], layer=0), ValueError, "not one of the layers"),
        (dict(attentions=att, tokens="a b c d", heads=[2]), ValueError, r"heads .* \[0, NH=2\)"),
        (dict(attentions=attentions(1, 2, 3, 4), tokens="a b c"), ValueError, "cross_attention="),
        (dict(cross_attention=attentions(1, 2, 3, 4), encoder_tokens="a b c", decoder_tokens="x y z"), ValueError,
         "encoder_tokens must hold one token per position of the weights, 4, got 3"),
    ]
    for kwargs, error, words in cases:
        with pytest.raises(error, match=words):
            explore_attention(**kwargs)
    with pytest.raises(ValueError, match="html_action must be 'view' or 'return'"):
        head_view(att, "a b c d", html_action="show")
    with pytest.raises(ValueError, match=r"sentence_b_start must be .* in \[1, 3\] for 4 tokens, got 4"):
        head_view(att, "a b c d", sentence_b_start=4)
    with pytest.raises(ValueError, match="sentence_b_start goes with attention="):
        head_view(cross_attention=attentions(1, 2, 3, 4), encoder_tokens="a b c d", decoder_tokens="x y z",
                  sentence_b_start=1)
    with pytest.raises(TypeError, match="with recorded weights no layer is passed"):
        explore_attention(BidirectionalAttention(8, 2), attentions=att, tokens="a b c d")
    before = [a.clone() for a in att]
    assert all(torch.equal(a, b) for a, b in zip(att, before, strict=True))  # nothing was changed by the refusals
    assert check_attention(att).shape == (2, 2, 4, 4)


def test_a_stack_with_a_start_layer_and_token_lists_open_as_asked():
    stack = [BidirectionalAttention(8, 2) for _ in range(3)]
    ex = explore_attention(stack, layer=2, head=1, kinds=("bidirectional",), tokens=["x", "y z", "w"])
    view = ex.compute()
    assert (view.layer_index, view.head, view.query_tokens) == (2, 1, ["x", "y z", "w"])
    assert explore_attention(layer=stack[0], kinds=("bidirectional",)).stacks["bidirectional"] == [stack[0]]
    long = explore_attention(hidden_size=8, num_heads=2, tokens="a b")
    long.set(tokens=" ".join("abcdefghijklmnopqrstuvw"))
    assert "max_len = 16, an argument of explore_attention" in long.message.value and "max_len=23" in long.message.value


def test_at_64_tokens_and_12_heads_each_view_is_under_1_mb_with_at_most_max_lines_lines():
    flat = attentions(1, 12, 64, scale=0.3)  # nearly uniform: 2 % of the largest keeps every line
    ex = explore_attention(attentions=flat, tokens=[f"t{i}" for i in range(64)])
    for view in VIEWS:
        ex.set(view=view)
        assert ex.message.value == "" and len(ex.picture.value.encode()) <= 1_000_000, view
    ex.set(view="lines")
    assert ex.picture.value.count("<line ") == 2 * (MAX_LINES // 64) * 64  # each line twice: by query, by key
    assert f"each query&#x27;s {MAX_LINES // 64} strongest" in ex.picture.value


def test_a_picture_of_many_cells_is_an_image_of_the_same_colours():
    att = attentions(1, 12, 32, seed=7)
    assert 12 * 32 * 32 > RASTER_CELLS
    ex = explore_attention(attentions=att, tokens=[f"t{i}" for i in range(32)], view="all heads")
    images = re.findall(r'href="data:image/png;base64,([^"]+)"', ex.picture.value)
    assert len(images) == 12 and "<rect class=\"cell\"" not in ex.picture.value
    w = att[0][0]  # (NH, S, S)
    norm = weights_norm(w)
    for h in (0, 11):
        pixels = np.asarray(Image.open(io.BytesIO(base64.b64decode(images[h]))).convert("RGB"))  # (S, S, 3)
        expected = [tuple(int(c[i:i + 2], 16) for i in (1, 3, 5)) for c in hex_colours(w[h], norm)]
        assert [tuple(p) for p in pixels.reshape(-1, 3).tolist()] == expected


def image_pixels(picture: str) -> list[np.ndarray]:
    """The (S, S_kv, 3) RGB pixels of each table drawn as an image in an SVG picture."""
    images = re.findall(r'href="data:image/png;base64,([^"]+)"', picture)
    return [np.asarray(Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB")) for data in images]


def image_mode(picture: str) -> str:
    """The PIL mode of the first image in an SVG picture: "P" for a palette, "RGB"."""
    return Image.open(io.BytesIO(base64.b64decode(re.search(r'href="data:image/png;base64,([^"]+)"', picture)[1]))).mode


def rgb(hexes: list[str]) -> list[tuple[int, int, int]]:
    return [tuple(int(c[i:i + 2], 16) for i in (1, 3, 5)) for c in hexes]


def test_one_head_of_64_tokens_is_an_image_of_its_colours_hidden_cells_grey():
    att = attentions(1, 12, 64, causal=True, seed=3)  # a decoder's: the upper triangle hidden
    assert 64 * 64 > RASTER_CELLS
    ex = explore_attention(attentions=att, tokens=[f"t{i}" for i in range(64)], head=5)
    assert ex.compute().kind == "causal" and '<rect class="cell"' not in ex.picture.value
    w, mask = att[0][0, 5], ex.compute().mask  # (S, S) each
    pixels = image_pixels(ex.picture.value)[-1]  # the weights, after the mask's table
    expected = [HIDDEN if not m else c for c, m in zip(hex_colours(w, weights_norm(w[mask])), mask.flatten().tolist(),
                                                      strict=True)]
    assert [tuple(p) for p in pixels.reshape(-1, 3).tolist()] == rgb(expected)


def test_an_image_of_more_than_256_colours_keeps_every_colour_exact():
    """A palette PNG holds 256 colours: all 256 steps of the scale plus the hidden grey need RGB, still exact."""
    w = torch.arange(512.0).reshape(16, 32) / 511  # (S, S_kv): every step of the scale appears
    mask = torch.ones(16, 32, dtype=torch.bool)
    mask[0, 1] = False  # and the hidden grey
    picture = raster(0, 0, 4, w, mask, weights_norm(w))
    pixels = image_pixels(picture)[0]
    expected = [HIDDEN if not m else c for c, m in zip(hex_colours(w, weights_norm(w)), mask.flatten().tolist(),
                                                      strict=True)]
    assert image_mode(picture) == "RGB" and [tuple(p) for p in pixels.reshape(-1, 3).tolist()] == rgb(expected)
    few = raster(0, 0, 4, w[:, :8], mask[:, :8], weights_norm(w))  # fewer colours: a palette image, as exact
    assert image_mode(few) == "P"
    assert [tuple(p) for p in image_pixels(few)[0].reshape(-1, 3).tolist()] == rgb(
        [HIDDEN if not m else c for c, m in zip(hex_colours(w[:, :8], weights_norm(w)), mask[:, :8].flatten().tolist(),
                                                strict=True)])


def test_the_lines_drawn_are_each_querys_strongest_by_the_rule_written_out():
    """`strongest` (one sort in torch) against the rule as plain Python: each query's visible weights at 2 % of the
    scale or more, its k largest (ties: the later key), all of them ordered by (weight, n)."""
    g = torch.Generator().manual_seed(5)
    for S, S_kv, k in ((7, 9, 3), (40, 25, 4), (6, 6, 10)):
        w = (torch.randn(S, S_kv, generator=g) * 2).softmax(-1)
        w[:, :3] = w[:, 2:3]  # ties
        mask = torch.rand(S, S_kv, generator=g) > 0.3
        level = levels(w, weights_norm(w[mask]))
        flat, shown = w.flatten().tolist(), mask.flatten().tolist()
        rows = [sorted((n for n in range(i * S_kv, (i + 1) * S_kv) if shown[n] and level[n] >= 0.02),
                       key=lambda n: (flat[n], n)) for i in range(S)]
        drawn, count, cut = strongest(w, mask, level, k)
        assert drawn == sorted((n for row in rows for n in row[-k:]), key=lambda n: (flat[n], n))
        assert count == sum(map(len, rows)) and cut == any(len(row) > k for row in rows)


def test_the_mask_attribute_is_the_mask_row_by_row():
    mask = torch.rand(33, 17, generator=torch.Generator().manual_seed(0)) > 0.5
    assert _mask_text(mask) == "/".join("".join("01"[v] for v in row) for row in mask.int().tolist())


def test_the_picture_exports_as_a_standalone_page_and_as_images(tmp_path):
    att = attentions(2, 3, 5)
    page = head_view(att, "a b c d e", html_action="return").data
    assert page.startswith("<!DOCTYPE html>") and "<style>" in page and page.count("<script") == 2  # data, code
    assert " src=" not in page and not re.search(r"https?://(?!www.w3.org/2000/svg)", page)  # nothing to load
    data = json.loads(re.search(r'id="attn-data">(.*?)</script>', page).group(1))
    assert data["layers"] == [0, 1] and data["queries"] == list("abcde") and data["start"]["view"] == "lines"
    assert torch.equal(torch.tensor(data["weights"]).view(2, 3, 5, 5), torch.cat(att))  # every float32 as it was
    ex = explore_attention(attentions=att, tokens="a b c d e")
    assert ex.save_html(tmp_path / "page.html").read_text() == ex.html()
    svg = ex.save_image(tmp_path / "picture.svg").read_text()
    assert svg.startswith("<svg") and "<style>" in svg and cell_values(svg) == cell_values(ex.picture.value)
    assert ex.save_image(tmp_path / "picture.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="writes .svg or .png"):
        ex.save_image(tmp_path / "picture.jpg")
    assert not (tmp_path / "picture.jpg").exists()
