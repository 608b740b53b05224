"""Tests of attention_lib.viz.flow.flow_diagram, the boxes-and-arrows pictures of notebook 05."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest
from matplotlib.figure import Figure
from matplotlib.text import Annotation

from attention_lib.viz.flow import flow_diagram

BOXES = {"x": (0, 1, "x\n(B, S, C)", "grey"), "f": (2, 1, "f", "tab:blue"), "out": (4, 1, "out", "grey")}


def test_one_box_per_entry_and_one_arrow_per_pair():
    fig = flow_diagram(BOXES, [("x", "f"), ("f", "out"), ("x", "out", -0.45)], figsize=(6, 2))
    try:
        assert isinstance(fig, Figure) and len(fig.axes) == 1
        (ax,) = fig.axes
        arrows = [a for a in ax.texts if isinstance(a, Annotation)]
        boxes = [t for t in ax.texts if not isinstance(t, Annotation)]
        assert sorted(t.get_text() for t in boxes) == sorted(text for _, _, text, _ in BOXES.values())
        assert all(t.get_bbox_patch() is not None for t in boxes)  # each text sits in its rounded box
        assert len(arrows) == 3
        styles = [a.arrow_patch.get_connectionstyle() for a in arrows]
        assert [s.rad for s in styles] == [0.0, 0.0, -0.45]  # straight unless a bend is given
        assert not ax.axison and tuple(fig.get_size_inches()) == (6, 2)
    finally:
        plt.close(fig)


def test_the_axes_fit_the_boxes_and_rise_for_the_arches():
    straight = flow_diagram(BOXES, [("x", "out")])
    arched = flow_diagram(BOXES, [("x", "out", -0.5)])
    try:
        (s,), (a,) = straight.axes, arched.axes
        assert s.get_xlim() == (-1, 5) and s.get_ylim() == pytest.approx((0.6, 1.4))
        assert a.get_ylim() == pytest.approx((0.6, 1.4 + 0.5 * 4 / 2))  # an arch over 4 units of x, rad 0.5
    finally:
        plt.close(straight)
        plt.close(arched)


def test_no_arrows_draws_the_boxes_alone():
    fig = flow_diagram(BOXES, [])
    try:
        assert len(fig.axes[0].texts) == len(BOXES)
    finally:
        plt.close(fig)


def test_an_arrow_to_an_unknown_box_is_refused():
    before = plt.get_fignums()
    with pytest.raises(ValueError, match=r"not in boxes: \['y'\]"):
        flow_diagram(BOXES, [("x", "y")])
    assert plt.get_fignums() == before  # refused before any figure is made
