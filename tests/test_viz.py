"""Tests of attention_lib.viz: the static plots and the explorer, driven from Python as a reader drives it."""

from __future__ import annotations

import hashlib
import math
import re

import matplotlib.pyplot as plt
import pytest
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from attention_lib.bidirectional import BidirectionalAttention
from attention_lib.single_head import SingleHeadAttention
from attention_lib.viz import (
    MASK_CMAP,
    PAD,
    AttentionExplorer,
    attention_view,
    explore_attention,
    padded_tokens,
    plot_cross_attention,
    plot_heads,
    plot_mask,
    plot_view,
    plot_weights,
    score_temperature,
    word_vectors,
)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def explorer() -> AttentionExplorer:
    return explore_attention(hidden_size=16, num_heads=4, max_len=8)


def reset(ex: AttentionExplorer) -> None:
    """Back to the start values (one redraw), so tests sharing the explorer do not depend on their order."""
    c = ex.controls
    with ex.hold():
        c["kind"].value = "bidirectional"
        c["seq_len"].value, c["kv_len"].value = 6, 7
        c["pad"].value, c["pad_side"].value, c["head"].value, c["temperature"].value = 0, "right", 0, 1.0
        c["tokens"].value, c["context_tokens"].value = "the cat sat on the mat", "le chat est assis sur le tapis"


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
    NH, HS = layer.num_heads, layer.head_size
    C = layer.hidden_size
    if hasattr(layer, "Wq"):
        q = x @ layer.Wq.weight.T + layer.Wq.bias  # (S, C)
        k = keys_in @ layer.Wkv.weight[:C].T + layer.Wkv.bias[:C]  # (S_kv, C)
    else:
        q = x @ layer.Wqkv.weight[:C].T + layer.Wqkv.bias[:C]  # (S, C)
        k = keys_in @ layer.Wqkv.weight[C : 2 * C].T + layer.Wqkv.bias[C : 2 * C]  # (S_kv, C)
    q, k = q.reshape(-1, NH, HS).double(), k.reshape(-1, NH, HS).double()
    scores = torch.einsum("ihd,jhd->hij", q, k) / (math.sqrt(HS) * T)  # (NH, S, S_kv)
    scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.nan_to_num(scores.softmax(-1), nan=0.0)  # rows without a visible key: zeros
    return w.float()


# ---------------------------------------------------------------- static plots


def test_plot_mask_returns_axes_with_token_labels():
    mask = torch.ones(3, 4, dtype=torch.bool).tril()  # (S, S_kv)
    ax = plot_mask(mask, "a b c", ["w", "x", "y", "z"])
    assert isinstance(ax, Axes)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["w", "x", "y", "z"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    assert (ax.images[0].get_array() == mask.numpy()).all()


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


def test_plot_weights_marks_hidden_cells_and_writes_values():
    weights = torch.tensor([[[[1.0, 0.0], [0.25, 0.75]]]])  # (B, NH, S, S_kv)
    mask = torch.tensor([[True, False], [True, True]])
    ax = plot_weights(weights, "p q", "r s", mask=mask)
    texts = [t.get_text() for t in ax.texts]
    assert texts == ["1.00", "×", "0.25", "0.75"]
    overlay = ax.images[1]  # the mask's grey over the hidden cells only
    assert overlay.get_array().mask.tolist() == [[True, False], [True, True]]
    hidden_colour, shown = overlay.to_rgba(overlay.get_array())[0, 1], overlay.to_rgba(overlay.get_array())[0, 0]
    assert tuple(hidden_colour) == MASK_CMAP(0) and shown[3] == 0  # grey like the mask's hidden cells; others clear
    assert len(ax.figure.axes) == 2  # the heat map and its colour bar
    with pytest.raises(ValueError, match="mask must broadcast"):
        plot_weights(weights, mask=torch.ones(3, 3, dtype=torch.bool))


def test_plot_heads_grid_and_cross_attention_figure():
    layer = BidirectionalAttention(8, 4)
    x = torch.randn(1, 3, 8)  # (B, S, C)
    _, w = layer(x, return_weights=True)  # (B, NH, S, S)
    fig = plot_heads(w, "a b c", "a b c", ncols=2)
    assert isinstance(fig, Figure)
    heads = [ax for ax in fig.axes if ax.get_title().startswith("head")]
    assert [ax.get_title() for ax in heads] == ["head 0", "head 1", "head 2", "head 3"]
    for h, ax in enumerate(heads):
        assert torch.allclose(torch.as_tensor(ax.images[0].get_array().data), w[0, h])
    with pytest.raises(ValueError, match=r"\(B, NH, S, S_kv\)"):
        plot_heads(w[:, 0])
    fig = plot_cross_attention(w[:, :, :2], "q1 q2", "k1 k2 k3", mask=torch.tensor([[True, True, False]]))
    assert "cross attention" in fig._suptitle.get_text()
    assert any(ax.get_xlabel().startswith("context tokens") for ax in fig.axes)
    fig = plot_cross_attention(w[:, :, :2], "q1 q2", "k1 k2 k3", head=1)
    assert [ax.get_title() for ax in fig.axes if ax.get_title()] == ["head 1"]


def test_plot_view_puts_mask_and_weights_side_by_side():
    view = attention_view(BidirectionalAttention(8, 2), "causal", "a b c", seq_len=3)
    fig = plot_view(view, Figure())
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[0].startswith("mask") and titles[1].startswith("weights, head 0")


# ---------------------------------------------------------------- pure pieces


def test_padded_tokens_and_word_vectors():
    labels, real = padded_tokens(["a", "b"], 4, pad=1, side="left")
    assert labels == [PAD, "a", "b", "tok2"] and real.tolist() == [False, True, True, True]
    labels, real = padded_tokens(["a", "b", "c"], 3, pad=2)
    assert labels == ["a", PAD, PAD] and real.tolist() == [True, False, False]
    with pytest.raises(ValueError, match="pad must lie"):
        padded_tokens(["a"], 3, pad=3)
    with pytest.raises(ValueError, match="side must be"):
        padded_tokens(["a"], 3, side="middle")
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
    reference = hand_weights(layer, x[0], x[0], mask[0].expand(4, 4), T)  # (NH, S, S_kv)
    assert torch.allclose(w[0], reference, atol=1e-6)
    assert not layer.Wqkv._forward_hooks  # the hook is gone after the block


def test_score_temperature_rejects_bad_values():
    with pytest.raises(ValueError, match="temperature must be > 0"):
        with score_temperature(BidirectionalAttention(4, 1), 0.0):
            pass
    with pytest.raises(TypeError, match="Wq or Wqkv"):
        with score_temperature(torch.nn.Linear(2, 2), 2.0):
            pass


# ---------------------------------------------------------------- the explorer, driven like a reader drives it


def test_causal_with_left_padding_is_the_and_of_tril_and_padding(explorer):
    reset(explorer)
    with explorer.hold():
        explorer.controls["kind"].value = "causal"
        explorer.controls["pad_side"].value = "left"
        explorer.controls["pad"].value = 2
    view = explorer.compute()
    assert view.query_tokens == [PAD, PAD, "the", "cat", "sat", "on"]
    assert torch.equal(view.mask, expected_mask("causal", 6, 6, 2, "left"))
    assert bool((view.weights[:, :2] == 0).all())  # the padded queries see no key: zero rows, not NaN
    assert torch.allclose(view.weights[:, 2:].sum(-1), torch.ones(4, 4))


@pytest.mark.parametrize("kind", ["bidirectional", "causal", "cross"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_keys_get_zero_weight_and_weights_match_the_formula(explorer, kind, side):
    reset(explorer)
    c = explorer.controls
    with explorer.hold():
        c["kind"].value, c["pad_side"].value, c["pad"].value, c["temperature"].value = kind, side, 2, 0.5
    view = explorer.compute()
    S, S_kv = (6, 7) if kind == "cross" else (6, 6)
    assert view.mask.shape == (S, S_kv) and view.weights.shape == (4, S, S_kv)
    assert torch.equal(view.mask, expected_mask(kind, S, S_kv, 2, side))
    padded = torch.tensor([t == PAD for t in view.key_tokens])
    assert padded.sum() == 2 and bool((view.weights[..., padded] == 0).all())
    assert bool((view.weights[:, ~view.mask] == 0).all())
    layer = explorer.layers[kind]
    x = word_vectors(view.query_tokens, 16)  # (S, C)
    keys_in = word_vectors(view.key_tokens, 16) if kind == "cross" else x  # (S_kv, C)
    assert torch.allclose(view.weights, hand_weights(layer, x, keys_in, view.mask, 0.5), atol=1e-5)


def test_bidirectional_and_causal_share_weights_so_only_the_mask_differs(explorer):
    reset(explorer)
    bi, ca = explorer.compute(kind="bidirectional"), explorer.compute(kind="causal")
    assert type(explorer.layers["causal"]).__name__ == "CausalAttention"
    assert torch.equal(explorer.layers["causal"].Wqkv.weight, explorer.layers["bidirectional"].Wqkv.weight)
    # the last query sees every key in both, so its row is the same
    assert torch.allclose(bi.weights[:, -1], ca.weights[:, -1], atol=1e-6)
    assert not torch.allclose(bi.weights[:, 0], ca.weights[:, 0])


def test_hold_redraws_once(explorer):
    reset(explorer)
    renders = explorer.renders
    with explorer.hold():
        explorer.controls["head"].value = 1
        explorer.controls["pad"].value = 3
        assert explorer.renders == renders
    assert explorer.renders == renders + 1 and 'data-pad="3"' in explorer.status.value


def test_control_changes_redraw_the_picture(explorer):
    reset(explorer)
    renders, png = explorer.renders, explorer.image.value
    explorer.controls["head"].value = 3
    assert explorer.renders == renders + 1 and explorer.image.value != png
    status = explorer.status.value
    assert 'data-head="3"' in status and 'data-kind="bidirectional"' in status
    assert f'data-png-sha256="{hashlib.sha256(explorer.image.value).hexdigest()}"' in status
    assert explorer.image.value[:8] == b"\x89PNG\r\n\x1a\n"
    png = explorer.image.value
    explorer.controls["kind"].value = "causal"
    assert explorer.image.value != png and 'data-kind="causal"' in explorer.status.value
    mask_rows = re.search(r'data-mask="([01/]+)"', explorer.status.value).group(1)
    assert mask_rows == "100000/110000/111000/111100/111110/111111"
    png = explorer.image.value
    explorer.controls["tokens"].value = "a completely different sentence of words"
    assert explorer.image.value != png and explorer.compute().query_tokens[:2] == ["a", "completely"]


def test_ranges_follow_the_lengths_and_the_kind(explorer):
    reset(explorer)
    c = explorer.controls
    with explorer.hold():  # the ranges follow at once; only the picture waits
        c["pad"].value = 5
        c["seq_len"].value = 3
        assert c["pad"].max == 2 and c["pad"].value == 2  # one real token always stays
        assert c["kv_len"].disabled and c["context_tokens"].disabled
        c["kind"].value = "cross"
    assert not c["kv_len"].disabled and c["pad"].max == 6  # cross pads the context: S_kv - 1
    view = explorer.compute()
    assert len(view.query_tokens) == 3 and len(view.key_tokens) == 7


def test_compute_is_pure(explorer):
    reset(explorer)
    before = ({n: w.value for n, w in explorer.controls.items()}, explorer.renders, explorer.image.value)
    view = explorer.compute(kind="cross", pad=3, head=2, temperature=2.0)
    assert view.kind == "cross" and view.head == 2 and view.temperature == 2.0
    assert torch.equal(view.head_weights, view.weights[2])
    assert ({n: w.value for n, w in explorer.controls.items()}, explorer.renders, explorer.image.value) == before
    with pytest.raises(TypeError, match="unknown control"):
        explorer.compute(colour="red")


def test_explorer_leaves_the_global_rng_alone_and_is_seeded():
    state = torch.get_rng_state()
    a, b = AttentionExplorer(hidden_size=8, num_heads=2), AttentionExplorer(hidden_size=8, num_heads=2)
    assert torch.equal(state, torch.get_rng_state())
    assert torch.equal(a.compute().weights, b.compute().weights)
    assert not torch.equal(a.compute().weights, AttentionExplorer(hidden_size=8, num_heads=2, seed=1).compute().weights)


def test_a_layer_passed_in_is_used_single_head_included():
    single = SingleHeadAttention(16)
    ex = AttentionExplorer(single, kinds=("bidirectional", "causal"), tokens="a b c d")
    assert ex.layers["causal"] is single and ex.controls["head"].disabled
    with ex.hold():
        ex.controls["kind"].value = "causal"
        ex.controls["pad"].value = 1
    view = ex.compute()
    assert view.weights.shape == (1, 4, 4)
    assert torch.equal(view.mask, expected_mask("causal", 4, 4, 1, "right"))
    assert bool((view.weights[0][~view.mask] == 0).all())
    assert ex.controls["kind"].options == ("bidirectional", "causal")


def test_a_causal_layer_cannot_pose_as_bidirectional():
    from attention_lib.causal import CausalAttention

    with pytest.raises(ValueError, match="CausalAttention cannot show bidirectional"):
        AttentionExplorer(CausalAttention(8, 2, context_size=8), kinds=("bidirectional", "causal"))
    ex = AttentionExplorer(CausalAttention(8, 2, context_size=12), kinds=("causal",))
    assert torch.equal(ex.compute().mask, expected_mask("causal", 6, 6, 0, "right"))


def test_a_failing_layer_shows_its_error_instead_of_a_silent_callback():
    ex = AttentionExplorer(BidirectionalAttention(8, 2), kinds=("bidirectional",), max_len=12)
    ex.embed = lambda words: torch.zeros(len(words), 5)  # wrong width: the layer raises
    ex.controls["seq_len"].value = 4
    assert "attn-error" in ex.status.value and "ValueError" in ex.status.value


def test_start_values_are_checked_and_applied():
    ex = AttentionExplorer(hidden_size=8, num_heads=2, kind="causal", seq_len=5, pad=2, pad_side="left", head=1)
    view = ex.compute()
    assert view.head == 1 and torch.equal(view.mask, expected_mask("causal", 5, 5, 2, "left"))
    assert 'data-pad="2"' in ex.status.value and ex.renders == 1
    with pytest.raises(ValueError, match="pad=5 is outside its range"):
        AttentionExplorer(hidden_size=8, num_heads=2, seq_len=5, pad=5)
    with pytest.raises(ValueError, match="head=2 is outside its range"):
        AttentionExplorer(hidden_size=8, num_heads=2, head=2)
    with pytest.raises(TypeError, match="unknown start value"):
        AttentionExplorer(hidden_size=8, num_heads=2, padding=1)


def test_close_closes_every_widget():
    ex = AttentionExplorer(hidden_size=8, num_heads=2)
    parts = [ex.widget, ex.image, ex.status, *ex.controls.values(), ex.controls["pad"].layout, ex.image.layout]
    ex.close()
    assert all(w.comm is None for w in parts)


def test_the_default_cross_layer_takes_the_sizes_of_the_layer_passed_in():
    ex = AttentionExplorer(BidirectionalAttention(12, 3), kind="cross", tokens="a b", context_tokens="c d e")
    assert (ex.layers["cross"].hidden_size, ex.layers["cross"].num_heads) == (12, 3)
    assert ex.compute().weights.shape == (3, 2, 3) and ex.controls["head"].max == 2


# ---------------------------------------------------------------- display, under ipywidgets 7.7.1 (Colab) and 8

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


@pytest.fixture
def shell():
    """An IPython shell, so that `display` publishes rich output instead of printing."""
    from IPython.core.interactiveshell import InteractiveShell

    yield InteractiveShell.instance()
    InteractiveShell.clear_instance()


def test_the_explorer_displays_as_one_view_of_its_widget(shell):
    """`display(explorer)` and the explorer as a cell's last expression both publish the widget's view.
    tests/test_colab.py runs this file under ipywidgets 7.7.1 too, where widgets have no _repr_mimebundle_."""
    from IPython.display import display
    from IPython.utils.capture import capture_output

    ex = explore_attention(hidden_size=8, num_heads=2)
    shell.user_ns["ex"] = ex
    with capture_output() as captured:
        display(ex)
        shell.run_cell("ex")
    views = [out.data[WIDGET_VIEW] for out in captured.outputs if WIDGET_VIEW in out.data]
    assert [v["model_id"] for v in views] == [ex.widget.model_id] * 2, captured.outputs
    assert all(v["version_major"] == 2 for v in views)
    ex.close()
