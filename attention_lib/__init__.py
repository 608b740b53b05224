"""attention_lib: the attention layers built in the attention-from-scratch notebooks.

Every module but this one is generated from the notebooks by nbdev; edit the notebooks, then `make export`.
"""

from .bidirectional import AttentionBase, BidirectionalAttention
from .causal import CausalAttention, KVCache
from .checks import check_input, prepare_mask
from .cross import ContextKV, CrossAttention
from .functional import attend, causal_mask, explicit_attention, fused_attention, padding_mask
from .single_head import SingleHeadAttention
from .viz import (
    AttentionExplorer,
    AttentionView,
    attention_view,
    explore_attention,
    plot_cross_attention,
    plot_heads,
    plot_mask,
    plot_view,
    plot_weights,
)

__version__ = "0.1.0"

__all__ = [
    "AttentionBase",
    "BidirectionalAttention",
    "ContextKV",
    "CrossAttention",
    "CausalAttention",
    "KVCache",
    "SingleHeadAttention",
    "attend",
    "causal_mask",
    "padding_mask",
    "check_input",
    "explicit_attention",
    "fused_attention",
    "prepare_mask",
    "AttentionExplorer",
    "AttentionView",
    "attention_view",
    "explore_attention",
    "plot_cross_attention",
    "plot_heads",
    "plot_mask",
    "plot_view",
    "plot_weights",
]
