"""A picture of a layer's Jacobian by blocks: which output depends on which input, and how strongly.

For one sequence x (S, C) and a layer's output y (S, C), block (i, j) of the Jacobian is the C x C matrix
dy_i / dx_j; its size (Frobenius norm) says how much output i follows input j. Notebook 04 computes these sizes
(an (S, S) table per layer) and draws them with `plot_block_sizes`: a causal layer's blocks above the diagonal are
exactly 0.

Colours: "Purples" from 0 (white) to the largest size of all the tables drawn together (dark), one colour bar; a
block that is exactly 0 takes the mask's grey (`style.HIDDEN`), like a hidden cell in every picture of the series.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from torch import Tensor

from . import style

BLOCKS_CMAP = "Purples"  # white = a small block, dark = a large one
BLOCKS_LABEL = "size of block (i, j): ||dy_i / dx_j||"

__all__ = ["BLOCKS_CMAP", "BLOCKS_LABEL", "plot_block_sizes"]


def plot_block_sizes(tables: Mapping[str, Tensor], fig: Figure | None = None) -> Figure:
    """Draw {title: (S, S) table of block sizes ||dy_i / dx_j||} side by side on one colour scale, 0 to the largest
    size of all the tables, with one colour bar; blocks that are exactly 0 in the mask's grey, with a legend.
    Rows are the outputs i, columns the inputs j. Returns the Figure (a pyplot one unless `fig` is given)."""
    sizes = {title: torch.as_tensor(t).detach().cpu().double() for title, t in tables.items()}  # each (S, S)
    if not sizes:
        raise ValueError("tables must hold at least one (S, S) table of block sizes, got none")
    for title, t in sizes.items():
        if t.ndim != 2 or t.shape[0] != t.shape[1] or bool((t < 0).any()):
            raise ValueError(f"table {title!r} must be an (S, S) table of sizes >= 0, got shape {tuple(t.shape)}")
    vmax = max(float(t.max()) for t in sizes.values()) or 1.0  # one scale for every table
    if fig is None:
        import matplotlib.pyplot as plt  # here: pyplot picks a drawing backend when first imported

        fig = plt.figure(figsize=(4.5 * len(sizes), 4.2))
    fig.set_layout_engine("constrained")
    axes = fig.subplots(1, len(sizes), squeeze=False)[0]
    for ax, (title, t) in zip(axes, sizes.items(), strict=True):
        image = ax.imshow(t.numpy(), cmap=BLOCKS_CMAP, vmin=0, vmax=vmax, interpolation="nearest")
        zeros = torch.where(t == 0, 0.0, float("nan"))  # NaN is transparent: only the zero blocks turn grey
        ax.imshow(zeros.numpy(), cmap=style.MASK_CMAP, vmin=0, vmax=1, interpolation="nearest")
        ax.set(title=f"{title}: ||dy_i / dx_j||", xlabel="input position j", ylabel="output position i")
    fig.colorbar(image, ax=axes, fraction=0.03, label=BLOCKS_LABEL)
    fig.legend(handles=[Patch(color=style.HIDDEN, label="exactly 0")], loc="outside lower center", frameon=False)
    return fig
