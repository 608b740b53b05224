"""Tests of attention_lib.viz.jacobian: the picture of a Jacobian's block sizes (notebook 04)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.colors import to_hex

from attention_lib.viz.jacobian import BLOCKS_CMAP, BLOCKS_LABEL, plot_block_sizes
from attention_lib.viz.style import HIDDEN


def test_tables_share_one_scale_and_zero_blocks_turn_grey():
    causal = torch.tensor([[2.0, 0.0], [0.5, 1.0]])  # (S, S): the block above the diagonal is exactly 0
    full = torch.tensor([[0.2, 0.3], [0.4, 0.1]])
    fig = plot_block_sizes({"causal": causal, "bidirectional": full})
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == ["causal: ||dy_i / dx_j||", "bidirectional: ||dy_i / dx_j||"]
    for ax, table in zip(panels, (causal, full), strict=True):
        sizes, zeros = ax.get_images()  # the sizes, then the grey overlay of the zero blocks
        assert sizes.get_clim() == (0, 2.0) and sizes.get_cmap().name == BLOCKS_CMAP  # the largest of both tables
        np.testing.assert_array_equal(np.asarray(sizes.get_array()), table.double().numpy())
        assert np.array_equal(~np.isnan(np.asarray(zeros.get_array())), (table == 0).numpy())
        assert to_hex(zeros.get_cmap()(0)) == HIDDEN
    bars = [ax for ax in fig.axes if ax.get_ylabel() == BLOCKS_LABEL]
    assert len(bars) == 1  # one colour bar for every table
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["exactly 0"]
    plt.close(fig)


def test_one_table_and_a_given_figure():
    fig = plt.figure()
    assert plot_block_sizes({"one": torch.ones(3, 3)}, fig=fig) is fig
    assert len([ax for ax in fig.axes if ax.get_title()]) == 1
    plt.close(fig)


@pytest.mark.parametrize(
    "tables", [{}, {"not square": torch.ones(2, 3)}, {"3-D": torch.ones(2, 2, 2)}, {"negative": -torch.ones(2, 2)}]
)
def test_refuses_what_is_not_a_table_of_sizes(tables):
    with pytest.raises(ValueError, match="table"):
        plot_block_sizes(tables)
    plt.close("all")
