"""Tests of attention_lib.viz: the picture rule, the static plots, the SVG pictures and the explorer, driven from
Python as a reader drives it. Written for ipywidgets 7 (Colab's 7.7.1) and 8 alike: tests/test_colab.py runs this file
under 7.7.1 too."""

from __future__ import annotations

import html
import math
import re

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.colors import Normalize
from matplotlib.figure import Figure

from attention_lib import GroupedQueryAttention, causal_mask, padding_mask
from attention_lib.bidirectional import BidirectionalAttention
from attention_lib.cross import CrossAttention
from attention_lib.single_head import SingleHeadAttention
from attention_lib.viz import (
    KINDS,
    MASK_CMAP,
    AttentionExplorer,
    attention_view,
    explore_attention,
    plot_cross_attention,
    plot_heads,
    plot_mask,
    plot_view,
    plot_weights,
    register_kind,
    score_temperature,
    weights_norm,
    word_vectors,
    writes_values,
)
from attention_lib.viz.plots import MAX_INCHES, mask_table
from attention_lib.viz.style import BIAS_CMAP, BIAS_LABEL, HIDDEN, bias_norm, hex_colours, shows_mask
from attention_lib.viz.svg import CSS, heads_svg, lines_svg, table_svg
from attention_lib.viz.views import DEFAULT_WINDOW, PAD, InputError, pad_tokens

SENTENCE, CONTEXT = "the cat sat on the mat", "le chat est assis sur le tapis"


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def explorer() -> AttentionExplorer:
    return explore_attention(hidden_size=16, num_heads=4, max_len=10, tokens=SENTENCE)


def reset(ex: AttentionExplorer) -> None:
    """Back to the start values (one redraw), so that tests sharing the explorer do not depend on their order."""
    ex.set(kind="bidirectional", tokens=SENTENCE, context_tokens=CONTEXT, pad=0, pad_side="right", head=0,
           temperature=1.0, view="weights")


def expected_mask(kind: str, S: int, S_kv: int, pad: int, side: str) -> torch.Tensor:
    """The (S, S_kv) mask written independently of the library: padding row, AND the lower triangle if causal."""
    positions = torch.arange(S_kv)
    real = positions >= pad if side == "left" else positions < S_kv - pad  # (S_kv,)
    mask = real.expand(S, S_kv)
    if kind == "causal":
        mask = mask & (positions[None, :] <= torch.arange(S)[:, None])
    return mask


def hand_weights(layer, x: torch.Tensor, keys_in: torch.Tensor, mask: torch.Tensor, T: float) -> torch.Tensor:
    """softmax(q kᵀ / (T √HS)) per head from the raw projection weights; x: (S, C), keys_in: (S_kv, C_kv)."""
    NH, HS, C = layer.num_heads, layer.head_size, layer.hidden_size
    if hasattr(layer, "Wq"):
        q = x @ layer.Wq.weight.T + layer.Wq.bias  # (S, C)
        k = keys_in @ layer.Wkv.weight[:C].T + layer.Wkv.bias[:C]  # (S_kv, C)
    else:
        q = x @ layer.Wqkv.weight[:C].T + layer.Wqkv.bias[:C]  # (S, C)
        k = keys_in @ layer.Wqkv.weight[C : 2 * C].T + layer.Wqkv.bias[C : 2 * C]  # (S_kv, C)
    q, k = q.reshape(-1, NH, HS).double(), k.reshape(-1, NH, HS).double()
    scores = torch.einsum("ihd,jhd->hij", q, k) / (math.sqrt(HS) * T)  # (NH, S, S_kv)
    w = torch.nan_to_num(scores.masked_fill(~mask, float("-inf")).softmax(-1), nan=0.0)  # rows without a key: zeros
    return w.float()


def picture_data(ex: AttentionExplorer) -> dict[str, str]:
    """The data- attributes of the picture the explorer shows (what a browser test reads)."""
    return dict(re.findall(r'data-([\w-]+)="([^"]*)"', ex.picture.value.split(">", 1)[0]))


def shown(widget) -> bool:
    return widget.layout.display != "none"


# ---------------------------------------------------------------- the picture rule


def test_the_colour_scale_ends_at_the_largest_weight_shown():
    assert weights_norm(torch.full((4, 4), 0.25)).vmax == 0.25 and weights_norm(torch.eye(3)).vmax == 1.0
    assert (weights_norm(torch.zeros(2, 2)).vmin, weights_norm(torch.zeros(2, 2)).vmax) == (0.0, 1.0)
    assert writes_values(10, 10) and not writes_values(11, 3) and not writes_values(3, 11)
    assert shows_mask(causal_mask(3)) and not shows_mask(torch.ones(3, 3, dtype=torch.bool))
    w = torch.tensor([0.0, 0.1, 0.2])
    expected = [colormaps["Blues"](v / 0.2) for v in (0.0, 0.1, 0.2)]
    got = [tuple(int(c[i : i + 2], 16) / 255 for i in (1, 3, 5)) for c in hex_colours(w, weights_norm(w))]
    assert np.allclose(got, [e[:3] for e in expected], atol=0.01)


# ---------------------------------------------------------------- static plots


def test_plot_mask_returns_axes_with_token_labels_and_a_legend():
    mask = causal_mask(3, 4)  # (1, S, S_kv)
    ax = plot_mask(mask, "a b c", ["w", "x", "y", "z"])
    assert isinstance(ax, Axes)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["w", "x", "y", "z"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    assert (ax.images[0].get_array() == mask[0].numpy()).all()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["may attend", "hidden"]


def test_plot_mask_picks_batch_and_head_and_rejects_bad_input():
    mask = torch.zeros(2, 3, 4, 5, dtype=torch.bool)  # (B, NH, S, S_kv)
    mask[1, 2, 0, 0] = True
    ax = plot_mask(mask, batch=1, head=2)
    assert ax.images[0].get_array()[0, 0] and ax.images[0].get_array().sum() == 1
    with pytest.raises(TypeError, match="torch.bool"):
        plot_mask(torch.ones(3, 3))
    with pytest.raises(ValueError, match=r"batch must lie in \[0, 2\)"):
        plot_mask(mask, batch=2)
    with pytest.raises(ValueError, match="key_labels must have 5 labels"):
        plot_mask(mask, key_labels="a b")


def test_a_2d_mask_is_a_padding_mask_even_when_B_equals_S():
    """(B, S_kv) with B == S: the picture takes row `batch` for every query, never the rows as queries."""
    weights = torch.rand(3, 2, 3, 3).softmax(-1)  # (B, NH, S, S_kv), B == S == S_kv
    pad = padding_mask([3, 2, 1])  # (B, S_kv)
    ax = plot_weights(weights, mask=pad, batch=1, head=1)
    overlay = ax.images[1].get_array()  # the grey of the hidden cells; NaN (masked) elsewhere
    assert overlay.mask.tolist() == [[True, True, False]] * 3  # key 2 hidden from every query of sequence 1
    assert torch.equal(mask_table(pad, 3, 3, batch=2), torch.tensor([[True, False, False]] * 3))
    assert torch.equal(mask_table(causal_mask(3), batch=2), causal_mask(3)[0])  # (1, S, S) broadcasts over B


REFUSED = r"a 2-D mask is a \(B, S_kv\) padding mask; for one \(S, S_kv\) table pass mask\[None\]"


def test_a_square_table_passed_as_a_2d_mask_is_refused_never_drawn_as_padding_rows():
    """A 2-D mask is a (B, S_kv) padding mask: an (S, S) triangle given as 2-D used to be drawn as its row 0 (one key
    visible) for every query; now the plots refuse it and say how to pass one table, unless its rows can be
    sequences: 1 row, one per sequence of the weights, or an explicit batch= for plot_mask."""
    S = 4
    triangle, weights = causal_mask(S)[0], torch.rand(S, S).softmax(-1)  # (S, S), (S, S_kv)
    for draw in (lambda: plot_mask(triangle), lambda: plot_mask(triangle, "a b c d", "a b c d"),
                 lambda: plot_weights(weights, mask=triangle), lambda: plot_weights(weights, mask=triangle, batch=1),
                 lambda: plot_weights(torch.rand(2, 2, S, S), mask=padding_mask([4, 3, 2])),  # 3 rows, batch of 2
                 lambda: plot_heads(weights[None, None], mask=triangle),
                 lambda: plot_cross_attention(weights[None, None], "a b c d", "w x y z", head=0, mask=triangle)):
        with pytest.raises(ValueError, match=REFUSED):
            draw()
    assert not plt.get_fignums()  # refused before any figure is made
    drawn = plot_mask(triangle[None], "a b c d", "a b c d").images[0].get_array()  # (1, S, S): the triangle itself
    assert (drawn == triangle.numpy()).all()
    assert (plot_mask(triangle, batch=2).images[0].get_array() == triangle[2:3].numpy()).all()  # row 2, as padding
    overlay = plot_weights(weights, mask=triangle[None]).images[1].get_array()  # grey exactly above the diagonal
    assert overlay.mask.tolist() == triangle.tolist()
    assert len(plot_weights(weights, mask=padding_mask([3], S)).images) == 2  # one padding row beside one table: fine
    pad = padding_mask([4, 2])  # (B, S_kv): one row per sequence of the weights below
    hidden = plot_weights(torch.rand(2, 1, S, S).softmax(-1), mask=pad, batch=1).images[1].get_array().mask
    assert hidden.tolist() == [[True, True, False, False]] * S


def test_an_additive_float_mask_is_refused_not_inverted():
    weights = torch.rand(1, 2, 3, 3).softmax(-1)
    hidden = torch.tensor([[False, False, True]])
    additive = torch.zeros(1, 3).masked_fill(hidden, float("-inf"))  # (B, S_kv): 0 = visible, -inf = hidden
    with pytest.raises(TypeError, match=r"torch\.float32.*mask == 0"):
        plot_weights(weights, mask=additive)
    with pytest.raises(TypeError, match="torch.int64"):
        plot_heads(weights, mask=torch.ones(1, 3, dtype=torch.long))


def test_a_huge_table_is_drawn_at_a_capped_size_without_labels_or_values():
    """S = 700 asked for a 295-inch figure with 490 000 annotations before; now at most MAX_INCHES and no text."""
    weights = torch.rand(700, 700).softmax(-1)  # (S, S_kv)
    ax = plot_weights(weights, mask=torch.ones(1, 700, dtype=torch.bool))
    width, height = ax.figure.get_size_inches()
    assert width <= MAX_INCHES and height <= MAX_INCHES
    assert not ax.texts and len(ax.get_xticks()) < 20
    fig = plot_heads(torch.rand(1, 4, 300, 300).softmax(-1))
    assert max(fig.get_size_inches()) <= MAX_INCHES


def test_plot_weights_follows_the_picture_rule():
    weights = torch.tensor([[[[1.0, 0.0], [0.25, 0.75]]]])  # (B, NH, S, S_kv)
    mask = torch.tensor([[[True, False], [True, True]]])  # (1, S, S_kv)
    ax = plot_weights(weights, "p q", "r s", mask=mask)
    assert [t.get_text() for t in ax.texts] == ["1.00", "0.25", "0.75"]  # hidden cells carry no value
    overlay = ax.images[1]  # the mask's grey over the hidden cells only
    assert overlay.get_array().mask.tolist() == [[True, False], [True, True]]
    assert tuple(overlay.to_rgba(overlay.get_array())[0, 1]) == MASK_CMAP(0)
    bar = ax.figure.axes[1]
    assert bar.get_ylabel() == "attention weight" and ax.images[0].norm.vmax == 1.0
    small = plot_weights(torch.full((3, 3), 1 / 3))  # an even head: the scale ends at 1/3, not 1
    assert math.isclose(small.images[0].norm.vmax, 1 / 3, rel_tol=1e-6)
    assert len(plot_weights(torch.rand(11, 4).softmax(-1)).texts) == 0  # S > 10: no values
    with pytest.raises(ValueError, match="does not fit"):
        plot_weights(weights, mask=torch.ones(1, 3, 3, dtype=torch.bool))


def test_plot_heads_shares_one_scale_and_plot_cross_attention_names_the_axes():
    layer = BidirectionalAttention(8, 4)
    _, w = layer(torch.randn(1, 3, 8), return_weights=True)  # (B, NH, S, S)
    fig = plot_heads(w, "a b c", "a b c", ncols=2)
    heads = [ax for ax in fig.axes if ax.get_title().startswith("head")]
    assert [ax.get_title() for ax in heads] == ["head 0", "head 1", "head 2", "head 3"]
    for h, ax in enumerate(heads):
        assert torch.allclose(torch.as_tensor(ax.images[0].get_array().data), w[0, h])
        assert ax.images[0].norm.vmax == pytest.approx(float(w.detach().max()))
    with pytest.raises(ValueError, match=r"\(B, NH, S, S_kv\)"):
        plot_heads(w[:, 0])
    fig = plot_cross_attention(w[:, :, :2], "q1 q2", "k1 k2 k3", mask=torch.tensor([[True, True, False]]))
    assert "cross attention" in fig.get_suptitle()
    assert any(ax.get_xlabel().startswith("context tokens") for ax in fig.axes)
    fig = plot_cross_attention(w[:, :, :2], "q1 q2", "k1 k2 k3", head=1)
    assert [ax.get_title() for ax in fig.axes if ax.get_title()] == ["head 1"]


def test_plot_view_shows_the_mask_only_when_it_hides_something_with_rows_aligned():
    layer = BidirectionalAttention(8, 2)
    view = attention_view(layer, "causal", "a b c", pad=2, pad_side="left")
    fig = plot_view(view, Figure())
    mask_ax, weights_ax = [ax for ax in fig.axes if ax.get_title()]
    assert mask_ax.get_title() == "mask" and weights_ax.get_title() == "weights, head 0"  # one layer: no layer named
    assert (mask_ax.images[0].get_array() == view.mask.numpy()).all()  # the view's (S, S_kv) table, row by row
    assert weights_ax.images[1].get_array().mask.tolist() == view.mask.tolist()  # grey exactly where hidden
    fig.canvas.draw()
    a, b = mask_ax.get_window_extent(), weights_ax.get_window_extent()
    assert abs(a.y0 - b.y0) < 1 and abs(a.height - b.height) < 1  # the rows line up
    fig = plot_view(attention_view(layer, "bidirectional", "a b c"), Figure())
    assert [ax.get_title() for ax in fig.axes if ax.get_title()] == ["weights, head 0"]


# ---------------------------------------------------------------- pure pieces


def test_pad_tokens_adds_pads_and_word_vectors_are_fixed():
    labels, real = pad_tokens(["a", "b"], 2, side="left")
    assert labels == [PAD, PAD, "a", "b"] and real.tolist() == [False, False, True, True]
    labels, real = pad_tokens(["a", "b", "c"], 1)
    assert labels == ["a", "b", "c", PAD] and real.tolist() == [True, True, True, False]
    with pytest.raises(ValueError, match="pad_side"):
        pad_tokens(["a"], 1, side="middle")
    v = word_vectors(["x", "y", "x"], 6)  # (S, C)
    assert v.shape == (3, 6) and torch.equal(v, word_vectors(["x", "y", "x"], 6))
    assert not torch.equal(v[0], v[2])  # the position encoding separates equal words


@pytest.mark.parametrize("T", [0.3, 1.0, 4.0])
def test_score_temperature_divides_scores_exactly(T):
    torch.manual_seed(0)
    layer = BidirectionalAttention(12, 3)
    x = torch.randn(1, 4, 12)  # (B, S, C)
    mask = torch.tensor([[True, True, True, False]])  # (B, S_kv)
    with torch.no_grad(), score_temperature(layer, T):
        _, w = layer(x, mask=mask, return_weights=True)  # (B, NH, S, S_kv)
    assert torch.allclose(w[0], hand_weights(layer, x[0], x[0], mask[0].expand(4, 4), T), atol=1e-6)
    assert not layer.Wqkv._forward_hooks  # the hook is gone after the block
    for bad in (0.0, -1.0, float("nan"), float("inf"), True, "2"):
        with pytest.raises(ValueError, match="temperature must be a finite number > 0"), score_temperature(layer, bad):
            pass


def test_a_registered_kind_is_shown_by_attention_view_and_the_explorer():
    def sliding(layer, x, context, keys, window=2):  # query i sees the real keys i - 1 and i
        S = x.shape[1]
        i = torch.arange(S)
        mask = keys[:, None, :] & causal_mask(S) & (i[:, None] - i[None, :] < window)  # (1, S, S)
        return mask[0], layer(x, mask=mask, return_weights=True)[1]

    register_kind("window of 2", sliding)
    try:
        layer = BidirectionalAttention(8, 2)
        view = attention_view(layer, "window of 2", "a b c d")
        assert view.mask.sum(-1).tolist() == [1, 2, 2, 2] and bool((view.weights[:, ~view.mask] == 0).all())
        ex = explore_attention(layer, kinds=("window of 2", "bidirectional"), tokens="a b c d")
        assert torch.equal(ex.compute().mask, view.mask) and picture_data(ex)["kind"] == "window of 2"
    finally:
        del KINDS["window of 2"]


# ---------------------------------------------------------------- the explorer, driven as a reader drives it


def test_causal_with_left_padding_is_the_and_of_tril_and_padding(explorer):
    reset(explorer)
    explorer.set(kind="causal", pad_side="left", pad=2)
    view = explorer.compute()
    assert view.query_tokens == [PAD, PAD, "the", "cat", "sat", "on", "the", "mat"]  # padding adds pad tokens
    assert torch.equal(view.mask, expected_mask("causal", 8, 8, 2, "left"))
    assert bool((view.weights[:, :2] == 0).all())  # the padded queries see no key: zero rows, not NaN
    assert torch.allclose(view.weights[:, 2:].sum(-1), torch.ones(4, 6))


@pytest.mark.parametrize("kind", ["bidirectional", "causal", "cross"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_keys_get_zero_weight_and_weights_match_the_formula(explorer, kind, side):
    reset(explorer)
    explorer.set(kind=kind, pad_side=side, pad=2, temperature=0.5)
    view = explorer.compute()
    S, S_kv = (6, 9) if kind == "cross" else (8, 8)
    assert view.mask.shape == (S, S_kv) and view.weights.shape == (4, S, S_kv)
    assert torch.equal(view.mask, expected_mask(kind, S, S_kv, 2, side))
    padded = torch.tensor([t == PAD for t in view.key_tokens])
    assert padded.sum() == 2 and bool((view.weights[..., padded] == 0).all())
    layer = explorer.layers[kind]
    x = word_vectors(view.query_tokens, 16)  # (S, C)
    keys_in = word_vectors(view.key_tokens, 16) if kind == "cross" else x  # (S_kv, C)
    assert torch.allclose(view.weights, hand_weights(layer, x, keys_in, view.mask, 0.5), atol=1e-5)


def test_bidirectional_and_causal_share_weights_so_only_the_mask_differs(explorer):
    reset(explorer)
    bi, ca = explorer.compute(kind="bidirectional"), explorer.compute(kind="causal")
    assert type(explorer.layers["causal"]).__name__ == "CausalAttention"
    assert torch.equal(explorer.layers["causal"].Wqkv.weight, explorer.layers["bidirectional"].Wqkv.weight)
    assert torch.allclose(bi.weights[:, -1], ca.weights[:, -1], atol=1e-6)  # the last query sees every key in both
    assert not torch.allclose(bi.weights[:, 0], ca.weights[:, 0])


def test_set_redraws_once_and_each_control_change_redraws(explorer):
    reset(explorer)
    renders = explorer.renders
    explorer.set(head=1, pad=3, temperature=2.0)
    assert explorer.renders == renders + 1 and picture_data(explorer)["pad"] == "3"
    before = picture_data(explorer)
    explorer.controls["head"].value = 3
    after = picture_data(explorer)
    assert explorer.renders == renders + 2 and after["head"] == "3" and after["digest"] != before["digest"]
    explorer.controls["kind"].value = "causal"
    assert picture_data(explorer)["mask"].startswith("100000000/110000000")
    explorer.controls["tokens"].value = "a completely different sentence"
    assert explorer.compute().query_tokens[:2] == ["a", "completely"] and explorer.renders == renders + 4


def test_typed_tokens_set_S_and_the_padding_stops_at_max_len(explorer):
    reset(explorer)
    c = explorer.controls
    explorer.set(tokens="one two three")
    assert len(explorer.compute().query_tokens) == 3 and c["pad"].max == 10 - 3
    explorer.set(pad=4)
    assert explorer.compute().query_tokens == ["one", "two", "three", PAD, PAD, PAD, PAD]
    explorer.set(kind="cross", context_tokens="un deux")
    assert c["pad"].max == 10 - 2 and explorer.compute().key_tokens == ["un", "deux", PAD, PAD, PAD, PAD]


def test_controls_that_do_not_apply_are_hidden(explorer):
    reset(explorer)
    c = explorer.controls
    assert not shown(c["context_tokens"]) and not shown(c["pad_side"]) and not shown(c["layer"])
    assert shown(c["head"]) and not shown(c["head_b"])
    explorer.set(kind="cross", pad=1)
    assert shown(c["context_tokens"]) and shown(c["pad_side"])
    explorer.set(view="all heads")
    assert not shown(c["head"])
    explorer.set(view="compare")
    assert shown(c["head"]) and shown(c["head_b"]) and not shown(c["layer_b"])  # one layer: nothing to choose


def test_sliders_and_text_boxes_report_once_and_temperatures_are_exact(explorer):
    c = explorer.controls
    assert not any(c[n].continuous_update for n in ("pad", "temperature", "tokens", "context_tokens"))
    assert 0.5 in c["temperature"].options and 1.0 in c["temperature"].options
    reset(explorer)
    explorer.set(temperature=0.5)
    assert explorer.compute().temperature == 0.5 and picture_data(explorer)["temperature"] == "0.5"


def test_bad_input_shows_a_message_and_a_stale_picture_never_a_traceback():
    def numbers(words):  # like the trained reverser's encoder: only integers can be embedded
        return torch.stack([word_vectors([w], 8)[0] * int(w) for w in words])

    ex = explore_attention(hidden_size=8, num_heads=2, kinds=("cross",), max_len=6, tokens="a b",
                           context_tokens="1 2 3", context_embed=numbers)
    good = picture_data(ex)
    ex.controls["context_tokens"].value = "1 two 3"  # int("two") fails, as the trained reverser's embed does
    assert "embedding the context failed" in ex.message.value and "Traceback" not in ex.message.value
    assert picture_data(ex)["stale"] == "1" and picture_data(ex)["digest"] == good["digest"]
    assert "attn-stale" in ex.picture.value
    ex.controls["context_tokens"].value = "1 2 3 4 5 6 7"
    assert "at most max_len = 6" in ex.message.value
    ex.controls["context_tokens"].value = "4 5"
    assert ex.message.value == "" and picture_data(ex)["stale"] == "0" and picture_data(ex)["kv-len"] == "2"
    ex.controls["tokens"].value = ""
    assert "no tokens" in ex.message.value


def test_compute_is_pure(explorer):
    reset(explorer)
    before = ({n: w.value for n, w in explorer.controls.items()}, explorer.renders, explorer.picture.value)
    view = explorer.compute(kind="cross", pad=3, head=2, temperature=2.0)
    assert view.kind == "cross" and view.head == 2 and view.temperature == 2.0
    assert torch.equal(view.head_weights, view.weights[2])
    assert ({n: w.value for n, w in explorer.controls.items()}, explorer.renders, explorer.picture.value) == before
    with pytest.raises(TypeError, match="unknown control"):
        explorer.compute(colour="red")


def test_the_explorer_leaves_the_global_rng_alone_and_is_seeded():
    state = torch.get_rng_state()
    a, b = AttentionExplorer(hidden_size=8, num_heads=2), AttentionExplorer(hidden_size=8, num_heads=2)
    assert torch.equal(state, torch.get_rng_state())
    assert torch.equal(a.compute().weights, b.compute().weights)
    assert not torch.equal(a.compute().weights, AttentionExplorer(hidden_size=8, num_heads=2, seed=1).compute().weights)


def test_a_layer_passed_in_is_used_single_head_included():
    single = SingleHeadAttention(16)
    ex = AttentionExplorer(single, kinds=("bidirectional", "causal"), tokens="a b c d")
    assert ex.layers["causal"] is single and not shown(ex.controls["head"])
    ex.set(kind="causal", pad=1)
    view = ex.compute()
    assert view.weights.shape == (1, 5, 5)
    assert torch.equal(view.mask, expected_mask("causal", 5, 5, 1, "right"))
    assert bool((view.weights[0][~view.mask] == 0).all())
    assert tuple(ex.controls["kind"].options) == ("bidirectional", "causal")


def test_a_causal_layer_cannot_pose_as_bidirectional():
    from attention_lib.causal import CausalAttention

    with pytest.raises(ValueError, match="CausalAttention cannot show bidirectional"):
        AttentionExplorer(CausalAttention(8, 2, context_size=8), kinds=("bidirectional", "causal"))
    ex = AttentionExplorer(CausalAttention(8, 2, context_size=12), kinds=("causal",), tokens=SENTENCE)
    assert torch.equal(ex.compute().mask, expected_mask("causal", 6, 6, 0, "right"))


def test_start_values_are_checked_and_applied():
    ex = AttentionExplorer(hidden_size=8, num_heads=2, kind="causal", pad=2, pad_side="left", head=1)
    view = ex.compute()
    assert view.head == 1 and torch.equal(view.mask, expected_mask("causal", 6, 6, 2, "left")) and ex.renders == 1
    with pytest.raises(ValueError, match="pad=15 is outside its range"):
        AttentionExplorer(hidden_size=8, num_heads=2, pad=15)
    with pytest.raises(ValueError, match="head=2 is not available"):
        AttentionExplorer(hidden_size=8, num_heads=2, head=2)
    with pytest.raises(TypeError, match="unknown control"):
        AttentionExplorer(hidden_size=8, num_heads=2, padding=1)
    # the older length keywords: accepted when they agree with the tokens and the padding
    ex = AttentionExplorer(kinds=("cross",), tokens="le chat", context_tokens="the cat", kv_len=4, pad=2)
    assert ex.compute().key_tokens == ["the", "cat", PAD, PAD]
    with pytest.raises(ValueError, match="seq_len=7, but the tokens and the padding give 4"):
        AttentionExplorer(hidden_size=8, num_heads=2, seq_len=7)


def test_close_closes_every_widget():
    ex = AttentionExplorer(hidden_size=8, num_heads=2)
    parts = [ex.widget, ex.picture, ex.message, *ex.controls.values(), ex.controls["pad"].layout, ex.picture.layout]
    ex.close()
    assert all(w.comm is None for w in parts)


def test_the_default_cross_layer_takes_the_sizes_of_the_layer_passed_in():
    ex = AttentionExplorer(BidirectionalAttention(12, 3), kind="cross", tokens="a b", context_tokens="c d e")
    assert (ex.layers["cross"].hidden_size, ex.layers["cross"].num_heads) == (12, 3)
    assert ex.compute().weights.shape == (3, 2, 3) and len(ex.controls["head"].options) == 3


def test_a_stack_of_layers_gets_a_layer_selector_and_per_layer_inputs():
    torch.manual_seed(0)
    stack = [BidirectionalAttention(8, 2) for _ in range(3)]
    calls = []

    def embed(tokens):  # (L, S, C): a different input for each layer, as a model's hidden states
        calls.append(tuple(tokens))
        return torch.stack([word_vectors(tokens, 8) * (layer + 1) for layer in range(3)])

    ex = explore_attention(stack, kinds=("bidirectional",), tokens="a b c", embed=embed, view="compare")
    assert shown(ex.controls["layer"]) and shown(ex.controls["layer_b"]) and len(ex.controls["layer"].options) == 3
    for layer in range(3):
        x = word_vectors(["a", "b", "c"], 8) * (layer + 1)
        expected = hand_weights(stack[layer], x, x, torch.ones(3, 3, dtype=torch.bool), 1.0)
        assert torch.allclose(ex.compute(layer=layer).weights, expected, atol=1e-5)
    ex.set(layer=2, layer_b=1, head_b=1)
    assert ex.layers["bidirectional"] is stack[2] and "A: layer 2, head 0" in ex.picture.value
    assert "B: layer 1, head 1" in ex.picture.value and len(set(calls)) == len(calls)  # each sentence embedded once
    ex.set(view="weights")
    assert "weights, layer 2, head 0" in ex.picture.value
    titles = [ax.get_title() for ax in ex.plot().axes]
    assert "weights, layer 2, head 0" in titles


def test_one_layer_is_never_named_layer_0():
    """A single layer (e.g. one layer taken out of a model) is not the first of a stack: no picture calls it layer 0."""
    ex = explore_attention(BidirectionalAttention(8, 2), kinds=("bidirectional",), tokens="a b c", head=1)
    for view in ("weights", "lines", "compare", "all heads"):
        ex.set(view=view)
        assert "layer 0" not in ex.picture.value
    ex.set(view="weights")
    assert "weights, head 1" in [ax.get_title() for ax in ex.plot().axes]


def test_each_view_draws_its_picture_legibly():
    ex = explore_attention(hidden_size=16, num_heads=4, tokens=" ".join(f"w{i}" for i in range(16)), pad=0)
    views = {"weights": "attn-table", "all heads": "attn-heads", "lines": "attn-lines", "compare": "attn-table"}
    for view, cls in views.items():
        ex.set(view=view)
        assert f"attn-pic {cls}" in ex.picture.value and picture_data(ex)["view"] == view and ex.message.value == ""
        sizes = [int(s) for s in re.findall(r"font(?:-size)?:\s*(\d+)px", CSS)]
        assert sizes and min(sizes) >= 10  # no text smaller than 10 px, and the pictures are never scaled down
        assert "max-width" not in ex.picture.value
    ex.set(tokens="a b c d", kind="causal", pad=2, pad_side="left", view="all heads")
    panels = [ax for ax in ex.plot().axes if ax.get_title().startswith("head")]
    assert len(panels) == 4 and panels[0].images[1].get_array().mask.tolist() == ex.compute().mask.tolist()
    everything = torch.ones(5, 5, dtype=torch.bool)
    heads = heads_svg(torch.rand(12, 5, 5).softmax(-1), everything, list("abcde"), list("abcde"),
                      weights_norm(torch.ones(1)), selected=3)
    assert all(f">head {h}</text>" in heads for h in range(12)) and heads.count('stroke="#e6550d"') == 1


def test_the_lines_picture_groups_each_tokens_lines_for_hover():
    weights = torch.tensor([[0.9, 0.1, 0.0], [0.5, 0.5, 0.0]])  # (S, S_kv); key 2 is padding
    mask = torch.tensor([[True, True, False]] * 2)
    picture = lines_svg(weights, mask, ["q0", "q1"], ["k0", "k1", PAD], weights_norm(weights))
    by_k, by_q = re.search(r'<g class="by-k">(.*)</g><g class="by-q">(.*)</g>', picture).groups()
    assert by_k.count("<line") == by_q.count("<line") == 4  # every visible pair, once per side
    assert by_q.split("<g>")[1].count("<line") == 2 and ">0.90<" in by_q  # q0's lines and values in its group
    assert "fill:#999" in by_k.split("<g>")[3]  # the padding key is greyed
    cross = lines_svg(torch.rand(5, 2).softmax(-1), torch.ones(5, 2, dtype=torch.bool), list("abcde"), ["x", "y"],
                      weights_norm(torch.ones(1)))  # S != S_kv, as in cross attention
    assert cross.count('<g class="by-q">') == 1 and cross.count("<line") == 2 * 10
    panels = [("mask", None, mask), ("w", weights, mask)]
    table = table_svg(panels, ["q0", "q1"], ["k0", "k1", PAD], weights_norm(weights))
    assert table.count('<rect class="cell"') == 12 and table.count(f'fill="{HIDDEN}"') >= 4 and ">0.90<" in table


def test_the_lines_picture_leaves_out_weights_below_2_percent_of_the_largest():
    """As lines_svg's docstring and notebook 06 say: a visible pair gets a line only from 2 % of the scale's top."""
    weights = torch.tensor([[0.97, 0.01, 0.02]])  # (S, S_kv): 0.01 / 0.97 < 2 % <= 0.02 / 0.97
    mask = torch.ones(1, 3, dtype=torch.bool)
    by_q = lines_svg(weights, mask, ["q"], ["a", "b", "c"], weights_norm(weights)).split('<g class="by-q">')[1]
    assert by_q.count("<line") == 2 and ">0.02<" in by_q and ">0.01<" not in by_q


def test_the_explorer_displays_as_one_view_of_its_widget():
    """`display(explorer)` and the explorer as a cell's last expression both publish the widget's view, under
    ipywidgets 7.7.1 (Colab's, whose widgets have no _repr_mimebundle_) and 8."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.display import display
    from IPython.utils.capture import capture_output

    shell = InteractiveShell.instance()
    try:
        ex = explore_attention(hidden_size=8, num_heads=2)
        shell.user_ns["ex"] = ex
        with capture_output() as captured:
            display(ex)
            shell.run_cell("ex")
        key = "application/vnd.jupyter.widget-view+json"
        views = [out.data[key] for out in captured.outputs if key in out.data]
        assert [v["model_id"] for v in views] == [ex.widget.model_id] * 2, captured.outputs
        ex.close()
    finally:
        InteractiveShell.clear_instance()


def test_the_displayed_explorer_keeps_its_standalone_page_in_the_output_metadata():
    """Under ipywidgets 8 the output's metadata holds `html()` (the page the website embeds), beside the widget's view;
    input the explorer cannot show leaves the widget alone, without a page, instead of failing to display. Under
    ipywidgets 7.7.1 (Colab's) a widget publishes its view itself, without the metadata: the widget alone."""
    import ipywidgets
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.display import display
    from IPython.utils.capture import capture_output

    from attention_lib.viz.explorer import PAGE_METADATA

    InteractiveShell.instance()  # display publishes through a shell
    try:
        ex = explore_attention(hidden_size=8, num_heads=2, kind="causal", head=1, pad=2)
        with capture_output() as captured:
            display(ex)
        (out,) = captured.outputs
        assert "application/vnd.jupyter.widget-view+json" in out.data
        assert '"start":{"layer":0,"head":1' in ex.html()
        if ipywidgets.__version__.startswith("7."):
            assert PAGE_METADATA not in out.metadata
        else:
            assert out.metadata[PAGE_METADATA] == ex.html()
        ex.controls["tokens"].value = " ".join(["a"] * 20)  # more than max_len = 16: the message says so
        with capture_output() as captured:
            display(ex)
        (out,) = captured.outputs
        assert "application/vnd.jupyter.widget-view+json" in out.data and PAGE_METADATA not in out.metadata
        ex.close()
    finally:
        InteractiveShell.clear_instance()


# ---------------------------------------------------------------- notebook 08's layers: windows, ALiBi, shared heads


def gqa(num_kv_heads: int = 2, **options) -> GroupedQueryAttention:
    """A seeded GroupedQueryAttention, C = 16, NH = 4 (HS = 4), context_size = 12."""
    torch.manual_seed(0)
    return GroupedQueryAttention(16, 4, num_kv_heads, context_size=12, **options).eval()


def band_mask(S: int, pad: int, side: str, window: int | None) -> torch.Tensor:
    """(S, S): the padding row AND the lower triangle AND (with a window) i - j < window, written out."""
    i = torch.arange(S)
    distance = i[:, None] - i[None, :]  # (S, S): i - j
    return expected_mask("causal", S, S, pad, side) & (distance < (window or S))


def hand_alibi(NH: int, S: int) -> torch.Tensor:
    """(NH, S, S): -m_h (i - j) with the slopes m_h = 2^(-8h / NH), h = 1..NH, of a power-of-two NH."""
    slopes = 2.0 ** (-8.0 * torch.arange(1, NH + 1) / NH)  # (NH,)
    i = torch.arange(S).float()
    return -slopes[:, None, None] * (i[:, None] - i[None, :])  # (NH, S, S)


def gqa_weights(layer: GroupedQueryAttention, x: torch.Tensor, mask: torch.Tensor, T: float = 1.0) -> torch.Tensor:
    """softmax((q·k / √HS + ALiBi) / T) per head from the raw Wqkv, laid out [q (NH·HS) | k (NKV·HS) | v (NKV·HS)],
    query head h reading key head h // G; x: (S, C), mask: (S, S). No RoPE."""
    NH, NKV, HS = layer.num_heads, layer.num_kv_heads, layer.head_size
    out = x.double() @ layer.Wqkv.weight.double().T  # (S, (NH + 2 NKV) HS)
    out = out if layer.Wqkv.bias is None else out + layer.Wqkv.bias.double()
    q = out[:, : NH * HS].reshape(-1, NH, HS)  # (S, NH, HS)
    k = out[:, NH * HS : (NH + NKV) * HS].reshape(-1, NKV, HS).repeat_interleave(NH // NKV, dim=1)  # (S, NH, HS)
    scores = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(HS)  # (NH, S, S)
    if layer.alibi:
        scores = scores + hand_alibi(NH, x.shape[0]).double()
    w = torch.nan_to_num((scores / T).masked_fill(~mask, float("-inf")).softmax(-1), nan=0.0)  # blind rows: zeros
    return w.float()


@pytest.mark.parametrize("kind", ["causal", "sliding window", "ALiBi", "grouped-query"])  # every kind it can run
@pytest.mark.parametrize("side", ["left", "right"])
def test_a_grouped_query_layer_shows_the_mask_it_applies_padding_causal_and_window(kind, side):
    layer = gqa(window=3, alibi=True)
    view = attention_view(layer, kind, SENTENCE, pad=2, pad_side=side)
    expected = band_mask(8, 2, side, window=3)  # (S, S), independent of the library
    assert torch.equal(view.mask, expected), (kind, view.mask.int())
    x = word_vectors(view.query_tokens, 16)  # (S, C)
    assert torch.allclose(view.weights, gqa_weights(layer, x, expected), atol=1e-5)
    assert bool((view.weights[:, ~expected] == 0).all())
    plain = attention_view(gqa(), "causal", SENTENCE, pad=2, pad_side=side)  # no window: padding AND causal
    assert torch.equal(plain.mask, band_mask(8, 2, side, window=None)) and plain.bias is None


def test_a_grouped_query_layer_cannot_pose_as_bidirectional_and_a_kind_cannot_hide_what_it_applies():
    layer = gqa(window=2)
    with pytest.raises(InputError, match="GroupedQueryAttention cannot show bidirectional"):
        attention_view(layer, "bidirectional", "a b c")
    with pytest.raises(ValueError, match="GroupedQueryAttention cannot show bidirectional"):
        AttentionExplorer(layer)  # the default kinds start with bidirectional

    def padding_only(layer, x, context, keys):  # a kind that gives the layer the padding row alone
        return keys.expand(x.shape[1], -1), layer(x, mask=keys, return_weights=True)[1]

    register_kind("padding only", padding_only)
    try:  # the view still shows what the layer hid by itself: its triangle and its window
        view = attention_view(layer, "padding only", "a b c d e", pad=1)
        assert torch.equal(view.mask, band_mask(6, 1, "right", window=2))
    finally:
        del KINDS["padding only"]


def test_the_sliding_window_kind_uses_the_layers_window_or_its_own():
    layer = BidirectionalAttention(16, 4)
    view = attention_view(layer, "sliding window", SENTENCE, pad=1, pad_side="left")  # no window: DEFAULT_WINDOW
    expected = band_mask(7, 1, "left", window=DEFAULT_WINDOW)
    assert DEFAULT_WINDOW == 3 and torch.equal(view.mask, expected) and view.bias is None and view.groups == 1
    x = word_vectors(view.query_tokens, 16)
    assert torch.allclose(view.weights, hand_weights(layer, x, x, expected, 1.0), atol=1e-5)
    view = attention_view(gqa(window=5), "sliding window", SENTENCE)  # the layer's own window
    assert torch.equal(view.mask, band_mask(6, 0, "right", window=5))


def test_the_alibi_panel_shows_each_heads_bias_on_its_own_scale():
    layer = gqa(alibi=True, window=4)
    view = attention_view(layer, "causal", SENTENCE, head=2, temperature=0.5)
    assert view.bias.shape == (4, 6, 6) and torch.allclose(view.bias, hand_alibi(4, 6))
    assert not bool(view.bias.signbit()[view.bias == 0].any())  # 0 on the diagonal, never "-0.00"
    assert torch.equal(view.bias, attention_view(layer, "causal", SENTENCE).bias)  # the layer's bias, whatever T
    assert attention_view(gqa(), "causal", SENTENCE).bias is None  # no ALiBi, no bias panel
    # the explorer's table: the bias last, on its own scale (dark = most negative) with its own colour bar
    ex = explore_attention(layer, kinds=("causal",), tokens=SENTENCE, head=2)
    picture = ex.picture.value
    assert picture_data(ex)["bias"] == "1" and f">{BIAS_LABEL}, head 2</text>" in picture
    assert picture.count(f">{BIAS_LABEL}</text>") == 1 and picture.count(">attention weight</text>") == 1
    mask = view.mask
    table = table_svg([("w", view.head_weights, mask)], view.query_tokens, view.key_tokens,
                      weights_norm(view.head_weights), bias=("b", view.bias[2], mask))
    fills = re.findall(r'<rect class="cell"[^>]* fill="(#\w+)"', table)[36:]  # the bias table's 36 cells
    colours = hex_colours(view.bias[2], bias_norm(view.bias[2], mask), BIAS_CMAP)
    assert fills == [c if visible else HIDDEN for c, visible in zip(colours, mask.flatten().tolist(), strict=True)]
    low = float(view.bias[2][mask].min())  # the most negative visible bias: -slope_2 · (W - 1)
    scale = bias_norm(view.bias[2], mask)
    assert low < 0 and scale.vmin == pytest.approx(low) and scale.vmax == 0
    # the static picture: mask, weights, bias, rows aligned, a colour bar for each scale
    fig = plot_view(attention_view(layer, "causal", SENTENCE, head=2), Figure())
    mask_ax, weights_ax, bias_ax = [ax for ax in fig.axes if ax.get_title()]
    assert bias_ax.get_title() == f"{BIAS_LABEL}, head 2" and "head 2 → key/value head 1" in weights_ax.get_title()
    assert torch.allclose(torch.as_tensor(bias_ax.images[0].get_array().data), view.bias[2])
    assert bias_ax.images[0].get_cmap().name == BIAS_CMAP and bias_ax.images[0].norm.vmax == 0
    assert bias_ax.images[1].get_array().mask.tolist() == mask.tolist()  # grey exactly where hidden
    assert {ax.get_ylabel() for ax in fig.axes if not ax.get_title()} == {"attention weight", BIAS_LABEL}
    fig.canvas.draw()
    a, b = mask_ax.get_window_extent(), bias_ax.get_window_extent()
    assert abs(a.y0 - b.y0) < 1 and abs(a.height - b.height) < 1


def test_heads_are_labelled_with_their_key_value_head_and_all_heads_are_arranged_by_group():
    view = attention_view(gqa(num_kv_heads=2), "causal", "a b c")
    assert view.groups == 2 and view.head_name() == "head 0 → key/value head 0"
    assert [view.head_name(h) for h in (1, 2, 3)] == [f"head {h} → key/value head {h // 2}" for h in (1, 2, 3)]
    assert attention_view(gqa(num_kv_heads=1), "causal", "a b c").head_name(3) == "head 3 → key/value head 0"
    assert attention_view(gqa(num_kv_heads=4), "causal", "a b c").head_name(3) == "head 3"  # NKV = NH: no sharing
    assert attention_view(BidirectionalAttention(8, 2), "causal", "a b").groups == 1
    ex = explore_attention(gqa(num_kv_heads=2), kinds=("causal",), tokens="a b c", head=3)
    assert ">weights, head 3 → key/value head 1</text>" in ex.picture.value and picture_data(ex)["groups"] == "2"
    ex.set(view="all heads")
    where = {h: tuple(map(float, re.search(rf'<text x="([\d.]+)" y="([\d.]+)"[^>]*>head {h} → kv {h // 2}</text>',
                                           ex.picture.value).groups())) for h in range(4)}
    assert where[0][1] == where[1][1] < where[2][1] == where[3][1]  # one group per row
    assert where[0][0] == where[2][0] < where[1][0] == where[3][0]
    titles = [ax.get_title() for ax in ex.plot().axes if ax.get_title().startswith("head")]
    assert titles == ["head 0 → kv 0", "head 1 → kv 0", "head 2 → kv 1", "head 3 → kv 1"]
    fig = plot_heads(torch.rand(1, 4, 3, 3).softmax(-1), groups=2)
    rows = [round(ax.get_position().y0, 3) for ax in fig.axes if ax.get_title().startswith("head")]
    assert rows[0] == rows[1] != rows[2] == rows[3]


@pytest.mark.parametrize("num_kv_heads", [1, 2])
@pytest.mark.parametrize("alibi", [False, True])
@pytest.mark.parametrize("T", [0.5, 3.0])
def test_temperature_divides_the_scores_of_a_layer_with_fewer_key_value_heads(num_kv_heads, alibi, T):
    """With NKV < NH the query columns of Wqkv are NH·HS of (NH + 2·NKV)·HS, not a third of them; ALiBi's bias is part
    of the score. Reference: the layer's own explicit weights at T = 1, w, recomputed at T as softmax(log w / T)."""
    layer = gqa(num_kv_heads, alibi=alibi)
    torch.manual_seed(1)
    x = torch.randn(1, 5, 16)  # (B, S, C)
    mask = padding_mask([4], 5)  # (B, S_kv): the last key is padding
    with torch.no_grad():
        _, w1 = layer(x, mask, return_weights=True)  # (B, NH, S, S): the explicit path
        with score_temperature(layer, T):
            _, wT = layer(x, mask, return_weights=True)
    visible = band_mask(5, 1, "right", window=None)  # (S, S)
    recomputed = (w1[0].log() / T).masked_fill(~visible, float("-inf")).softmax(-1)  # (NH, S, S)
    assert torch.allclose(wT[0], recomputed, atol=1e-5)
    assert torch.allclose(wT[0], gqa_weights(layer, x[0], visible, T), atol=1e-5)
    assert not layer.Wqkv._forward_hooks  # the block leaves the layer as it was
    assert not alibi or torch.equal(layer.slopes, 2.0 ** (-8.0 * torch.arange(1, 5) / 4))
    view = attention_view(layer, "causal", ["w0", "w1", "w2", "w3"], pad=1, temperature=T)
    assert torch.allclose(view.weights, gqa_weights(layer, word_vectors(view.query_tokens, 16), visible, T), atol=1e-5)


def test_the_alibi_kind_needs_a_layer_that_adds_it():
    with pytest.raises(InputError, match="ALiBi needs a layer that adds it.*GroupedQueryAttention without it"):
        attention_view(gqa(), "ALiBi", SENTENCE)
    ex = explore_attention(BidirectionalAttention(16, 4), kinds=("causal", "ALiBi"), tokens=SENTENCE)
    ex.set(kind="ALiBi")  # a message under the controls, never a traceback
    assert "ALiBi needs a layer that adds it" in ex.message.value and picture_data(ex)["stale"] == "1"
    assert torch.allclose(attention_view(gqa(alibi=True), "ALiBi", SENTENCE).bias, hand_alibi(4, 6))


def test_the_new_kinds_run_seeded_default_layers():
    state = torch.get_rng_state()
    ex = explore_attention(kinds=("sliding window",), hidden_size=16, num_heads=4, tokens=SENTENCE)
    windowed = ex.layers["sliding window"]
    assert isinstance(windowed, GroupedQueryAttention) and windowed.window == DEFAULT_WINDOW and ex.message.value == ""
    assert torch.equal(ex.compute().mask, band_mask(6, 0, "right", window=DEFAULT_WINDOW))
    kinds = ("causal", "sliding window", "ALiBi", "grouped-query")
    ex = explore_attention(kinds=kinds, hidden_size=16, num_heads=4, tokens=SENTENCE)
    assert torch.equal(state, torch.get_rng_state())  # the global RNG is left alone
    causal = ex.layers["causal"]
    for kind in ("sliding window", "ALiBi"):  # NKV = NH: the causal layer's weights, only the kind's change differs
        assert torch.equal(ex.layers[kind].Wqkv.weight, causal.Wqkv.weight)
        assert torch.equal(ex.layers[kind].Wo.bias, causal.Wo.bias)
    assert ex.layers["ALiBi"].alibi and ex.layers["grouped-query"].num_kv_heads == 2
    for kind in kinds:
        ex.set(kind=kind)
        data = picture_data(ex)
        assert ex.message.value == "" and data["kind"] == kind
        assert data["bias"] == ("1" if kind == "ALiBi" else "0")
        assert data["groups"] == ("2" if kind == "grouped-query" else "1")
    again = explore_attention(kinds=("grouped-query",), hidden_size=16, num_heads=4, tokens=SENTENCE)
    assert torch.equal(again.compute().weights, ex.compute(kind="grouped-query").weights)  # seeded: the same layer
    register_kind("mine", KINDS["causal"].run, make_layer=lambda C, NH, T: BidirectionalAttention(C, NH, bias=False))
    try:  # a kind registered with its own default layer gets it
        assert explore_attention(kinds=("mine",), hidden_size=8, num_heads=2).layers["mine"].Wqkv.bias is None
    finally:
        del KINDS["mine"]


# ---------------------------------------------------------------- weights that change, numbers that cannot be drawn


def test_the_explorer_shows_the_layers_weights_as_they_are_now():
    """Views were cached by the controls only: after a training step the explorer showed the old picture."""
    layer = BidirectionalAttention(16, 2)
    ex = explore_attention(layer, kinds=("bidirectional",), tokens="the cat sat on")
    try:
        before = ex.compute().weights.clone()
        assert torch.equal(ex.compute().weights, before)  # nothing changed: the same view
        optimizer = torch.optim.SGD(layer.parameters(), lr=5.0)
        layer(word_vectors("the cat sat on".split(), 16)[None]).pow(2).sum().backward()
        optimizer.step()  # in place: the parameters' version counters move
        with torch.no_grad():
            _, expected = layer(word_vectors("the cat sat on".split(), 16)[None], return_weights=True)
        torch.testing.assert_close(ex.compute().weights, expected[0])
        assert not torch.equal(ex.compute().weights, before)
        layer.load_state_dict(BidirectionalAttention(16, 2).state_dict())  # a checkpoint, loaded in place
        with torch.no_grad():
            _, expected = layer(word_vectors("the cat sat on".split(), 16)[None], return_weights=True)
        ex.redraw()
        torch.testing.assert_close(ex.compute().weights, expected[0])
    finally:
        ex.close()


@pytest.mark.parametrize("T", [math.nan, math.inf, 0.0, -2.0])
def test_a_temperature_that_is_not_a_finite_positive_number_is_refused_in_words(T):
    with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
        explore_attention(hidden_size=8, num_heads=2, temperature=T)


def test_a_kind_that_returns_a_mask_of_the_wrong_shape_gets_a_message_in_every_view():
    def short(layer, x, context, keys):  # a (S, 2) mask for S keys
        return keys.expand(x.shape[1], -1)[:, :2], layer(x, mask=keys, return_weights=True)[1]

    register_kind("short mask", short)
    try:
        with pytest.raises(InputError, match=r"returned a mask of torch.bool \(4, 2\).*\(S, S_kv\) = \(4, 4\)"):
            attention_view(BidirectionalAttention(8, 2), "short mask", "a b c d")
        ex = explore_attention(hidden_size=8, num_heads=2, kinds=("short mask",), tokens="a b c d")
        for view in ("weights", "lines", "all heads", "compare"):
            ex.set(view=view)
            assert "returned a mask of torch.bool (4, 2)" in html.unescape(ex.message.value), view
        ex.close()
    finally:
        del KINDS["short mask"]


def test_a_shared_norm_below_the_data_takes_the_ends_of_the_colormap():
    w = torch.tensor([[0.2, 0.8], [0.5, 0.5]])  # (S, S_kv)
    low = Normalize(0.0, 0.1)  # tops out below every weight
    ax = plot_weights(w, norm=low)  # raised IndexError: a text colour looked up past the colormap's end
    plt.close(ax.figure)
    mask = torch.ones(2, 2, dtype=torch.bool)
    assert "<svg" in table_svg([("w", w, mask)], ["a", "b"], ["c", "d"], low)
    assert "<svg" in lines_svg(w, mask, ["a", "b"], ["c", "d"], low)
    assert set(hex_colours(w, low)) == {hex_colours(torch.tensor([0.1]), low)[0]}  # the top colour, for all


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_weights_that_are_not_finite_are_refused_in_the_packages_words(bad):
    w = torch.tensor([[0.2, 0.8], [0.5, bad]])
    mask = torch.ones(2, 2, dtype=torch.bool)
    words = "weights contain NaN or inf"
    for draw in (lambda: weights_norm(w), lambda: plot_weights(w), lambda: table_svg([("w", w, mask)], "ab", "cd",
                 Normalize(0, 1)), lambda: lines_svg(w, mask, "ab", "cd", Normalize(0, 1)),
                 lambda: heads_svg(w[None], mask, "ab", "cd", Normalize(0, 1))):
        with pytest.raises(ValueError, match=words):
            draw()
    plt.close("all")


GOOD_STEPS = [dict(kind="causal"), dict(kind="cross"), dict(kind="bidirectional"), dict(tokens="a b c"),
              dict(tokens=SENTENCE), dict(pad=2), dict(pad_side="left"), dict(head=3), dict(view="lines"),
              dict(temperature=2.0)]
REFUSED_SETS = [dict(pad=2, head=99), dict(tokens="a b c", layer=5), dict(kind="nope"), dict(view="bars"),
                dict(temperature=math.nan), dict(pad=1, temperature=0.3), dict(tokens="x y", pad=50),
                dict(head=1, pad_side="up"), dict(colour="red")]
REFUSED_COMPUTES = [dict(head=99), dict(layer=3), dict(tokens="a " * 40), dict(temperature=-1.0),
                    dict(temperature=math.nan), dict(pad_side="up"), dict(pad=-1), dict(colour="red"),
                    dict(kind="cross", context_tokens="")]


def explorer_state(ex: AttentionExplorer) -> tuple:
    """What a reader sees and what the explorer remembers: controls, ranges, picture, message, views kept."""
    ranges = tuple((n, tuple(getattr(c, "options", ())), getattr(c, "max", None), c.layout.display)
                   for n, c in ex.controls.items())
    return ({n: c.value for n, c in ex.controls.items()}, ranges, ex.renders, ex.picture.value, ex.message.value,
            ex._run.cache_info().currsize)


def test_a_refused_call_leaves_the_explorer_as_it_was(explorer):
    """`set` was not all or nothing (the values before a refused one stayed), and a head out of range was refused only
    after its view had been computed and remembered. From each of several states, every refused `set` and `compute`
    now changes nothing. (Every combination, not a sample: the Colab-like run of this file has no hypothesis.)"""
    reset(explorer)
    for good in GOOD_STEPS:  # the states accumulate: each step starts where the last one left the explorer
        explorer.set(**good)
        before = explorer_state(explorer)
        for bad in REFUSED_SETS:
            with pytest.raises((ValueError, TypeError)):
                explorer.set(**bad)
            assert explorer_state(explorer) == before, (good, bad)
        for bad in REFUSED_COMPUTES:
            with pytest.raises((ValueError, TypeError)):
                explorer.compute(**bad)
            assert explorer_state(explorer) == before, (good, bad)


def test_cross_layer_may_be_passed_by_keyword():
    cross = CrossAttention(12, 3)
    ex = explore_attention(cross_layer=cross, kinds=("cross",), tokens="a b", context_tokens="c d e")
    assert ex.layers["cross"] is cross and ex.compute().weights.shape == (3, 2, 3)
