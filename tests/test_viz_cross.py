"""Tests of attention_lib.viz.cross, the pictures of notebook 05."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest
import torch
from matplotlib.text import Annotation

from attention_lib.viz.cross import cross_attention_diagram, decoder_block_diagram, plot_training_maps


def boxes_and_arrows(fig):
    (ax,) = fig.axes
    arrows = [t for t in ax.texts if isinstance(t, Annotation)]
    return [t.get_text() for t in ax.texts if not isinstance(t, Annotation)], arrows


def test_the_cross_attention_diagram_takes_q_from_x_and_k_v_from_the_context():
    fig = cross_attention_diagram()
    try:
        texts, arrows = boxes_and_arrows(fig)
        assert len(texts) == 7 and len(arrows) == 7
        assert any(t.startswith("Q = x Wq") for t in texts) and any(t.startswith("K = Z") for t in texts)
        assert any("(B, NH, S, S_kv)" in t for t in texts)
    finally:
        plt.close(fig)


def test_the_block_diagram_has_three_sub_layers_with_a_residual_arc_each():
    fig = decoder_block_diagram()
    try:
        texts, arrows = boxes_and_arrows(fig)
        assert [t for t in texts if t.startswith("LN")] == ["LN₁", "LN₂", "LN₃"] and texts.count("+") == 3
        bends = [a.arrow_patch.get_connectionstyle().rad for a in arrows]
        assert sum(rad != 0 for rad in bends) == 3  # one arc per sub-layer
        assert len(arrows) == 10 + 3 + 1  # the main line, the arcs, the context into the cross attention
    finally:
        plt.close(fig)


def test_training_maps_get_one_panel_each_titled_by_its_updates_on_one_scale():
    maps = {0: torch.full((3, 4), 0.25), 7: torch.eye(3, 4), 20: torch.eye(3, 4).flip(1)}  # (S, S_kv), S != S_kv
    fig = plot_training_maps(maps)
    try:
        panels = [ax for ax in fig.axes if ax.get_title()]
        assert [ax.get_title() for ax in panels] == ["0 updates", "7 updates", "20 updates"]
        assert panels[0].get_ylabel() == "output position" and panels[0].get_xlabel() == "input position"
        assert len({ax.images[0].get_clim() for ax in panels}) == 1  # one colour scale for every snapshot
        assert panels[2].images[0].get_array()[0, -1] == pytest.approx(1.0)
    finally:
        plt.close(fig)
