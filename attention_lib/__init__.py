"""attention_lib: the attention layers built in the attention-from-scratch notebooks.

Every module but this one is generated from the notebooks by nbdev; edit the notebooks, then `make export`.
"""

from .bidirectional import AttentionBase, BidirectionalAttention
from .causal import CausalAttention, KVCache
from .checks import check_input, check_probability, check_size, prepare_mask
from .cross import ContextKV, CrossAttention, DecoderBlock
from .efficient import tiled_attention  # importing it registers attn_impl="tiled"
from .functional import (
    attend,
    attention_impls,
    causal_mask,
    check_attention_mask,
    explicit_attention,
    masked_softmax,
    padding_mask,
    register_attention_impl,
    sdpa_attention,
)
from .single_head import SingleHeadAttention
from .variants import (
    GroupedQueryAttention,
    SlidingWindowCache,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    attend_with_bias,
    kv_cache_bytes,
    padding_positions,
    repeat_kv,
    rope_cos_sin,
    sliding_window_mask,
)
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
    "DecoderBlock",
    "KVCache",
    "SingleHeadAttention",
    "GroupedQueryAttention",
    "SlidingWindowCache",
    "attend",
    "check_attention_mask",
    "masked_softmax",
    "attention_impls",
    "register_attention_impl",
    "causal_mask",
    "padding_mask",
    "check_input",
    "check_probability",
    "check_size",
    "explicit_attention",
    "sdpa_attention",
    "tiled_attention",
    "prepare_mask",
    "alibi_bias",
    "alibi_slopes",
    "apply_rope",
    "attend_with_bias",
    "kv_cache_bytes",
    "padding_positions",
    "repeat_kv",
    "rope_cos_sin",
    "sliding_window_mask",
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
