"""Input checks shared by every layer: fail early, name the argument, show expected and received shapes."""
from __future__ import annotations

import torch
from torch import Tensor


def check_input(x: Tensor, hidden_size: int, name: str = "x") -> None:
    """Check that `x` is a float tensor of shape (B, S, hidden_size).

    Raises `ValueError` naming `name` and showing the expected and received shape.
    """
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape (B, S, {hidden_size}), got {type(x).__name__}")
    if x.ndim != 3 or x.shape[-1] != hidden_size:
        raise ValueError(
            f"{name} must have shape (B, S, {hidden_size}) (batch, sequence, hidden_size), "
            f"got {tuple(x.shape)}"
        )


def check_same_batch(x: Tensor, other: Tensor, name: str = "context") -> None:
    """Check that `other` has the same batch size (dim 0) as `x`."""
    if other.shape[0] != x.shape[0]:
        raise ValueError(
            f"{name} must have the batch size of x ({x.shape[0]}), got {other.shape[0]} "
            f"({name} shape {tuple(other.shape)}, x shape {tuple(x.shape)})"
        )


def prepare_mask(
    mask: Tensor | None,
    batch: int,
    q_len: int,
    kv_len: int,
    num_heads: int | None = None,
) -> Tensor | None:
    """Validate a boolean mask (True = may attend) and shape it to broadcast against the scores.

    The scores are (B, NH, S, S_kv), or (B, S, S_kv) for a single head (`num_heads=None`).
    A 2-D mask is a padding mask over the keys, (B, S_kv), and becomes (B, 1, 1, S_kv)
    (single head: (B, 1, S_kv)). Any other mask must broadcast to the scores' shape as it is.
    Raises `TypeError` for a non-bool mask and `ValueError` for a shape that does not fit.
    """
    if mask is None:
        return None
    if not isinstance(mask, Tensor):
        raise TypeError(f"mask must be a torch.Tensor of dtype torch.bool, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must have dtype torch.bool (True = may attend), got {mask.dtype}")
    if num_heads is None:
        target, target_txt = (batch, q_len, kv_len), f"(B, S, S_kv) = {(batch, q_len, kv_len)}"
    else:
        target = (batch, num_heads, q_len, kv_len)
        target_txt = f"(B, NH, S, S_kv) = {target}"
    if mask.ndim == 2:
        if mask.shape[0] not in (1, batch) or mask.shape[1] != kv_len:
            raise ValueError(
                f"mask of 2 dimensions is a padding mask and must have shape (B, S_kv) = {(batch, kv_len)}, "
                f"got {tuple(mask.shape)}"
            )
        mask = mask[:, None, :] if num_heads is None else mask[:, None, None, :]
    ok = mask.ndim <= len(target) and all(
        m in (1, t) for m, t in zip(reversed(mask.shape), reversed(target), strict=False)
    )
    if not ok:
        raise ValueError(
            f"mask must be (B, S_kv) = {(batch, kv_len)} or broadcast to {target_txt}, got {tuple(mask.shape)}"
        )
    return mask
