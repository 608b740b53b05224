"""attention_lib: the attention layers built in the attention-from-scratch notebooks.

Every module but this one is generated from the notebooks by nbdev; edit the notebooks, then `make export`.
Modules, by concept: checks (arguments), masks, functional (the attention functions and the registry of paths),
efficient (tiled attention), caches, positions (RoPE, ALiBi), the layers (single_head, bidirectional, causal, cross,
grouped), llm (a Llama-family language model around them, and SmolLM2 loaded offline), torch_interop and hf_interop,
and viz (pictures and the explorer, loaded on first use).
"""

from __future__ import annotations

import importlib

from .bidirectional import AttentionBase, BidirectionalAttention, repeat_kv
from .caches import Cache, KVCache, SlidingWindowCache, kv_cache_bytes
from .causal import CausalAttention
from .checks import check_input, check_probability, check_size
from .cross import ContextKV, CrossAttention, DecoderBlock
from .efficient import tiled_attention  # importing it registers attn_impl="tiled"
from .functional import (
    AttentionImpl,
    attend,
    attention_impl,
    attention_impls,
    explicit_attention,
    masked_softmax,
    register_attention_impl,
    sdpa_attention,
)
from .grouped import GroupedQueryAttention
from .masks import causal_mask, padding_mask, prepare_mask, sliding_window_mask
from .positions import alibi_bias, alibi_slopes, apply_rope, padding_positions, rope_cos_sin
from .single_head import SingleHeadAttention

__version__ = "0.1.0"

# The pictures and the explorer need matplotlib and ipywidgets, which take most of an import's time: attention_lib.viz
# is imported on first use of one of its names (`from attention_lib import plot_weights` or `attention_lib.viz`).
_VIZ = ("AttentionExplorer", "AttentionView", "attention_view", "explore_attention", "plot_cross_attention",
        "plot_heads", "plot_mask", "plot_view", "plot_weights")


def __getattr__(name: str):
    if name == "viz" or name in _VIZ:
        viz = importlib.import_module(".viz", __name__)
        return viz if name == "viz" else getattr(viz, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_VIZ) | {"viz"})


__all__ = [
    # layers
    "SingleHeadAttention",
    "AttentionBase",
    "BidirectionalAttention",
    "CausalAttention",
    "GroupedQueryAttention",
    "CrossAttention",
    "ContextKV",
    "DecoderBlock",
    # caches
    "Cache",
    "KVCache",
    "SlidingWindowCache",
    "kv_cache_bytes",
    # attention functions and paths
    "attend",
    "attention_impl",
    "attention_impls",
    "register_attention_impl",
    "AttentionImpl",
    "explicit_attention",
    "sdpa_attention",
    "tiled_attention",
    "masked_softmax",
    "repeat_kv",
    # masks
    "padding_mask",
    "causal_mask",
    "sliding_window_mask",
    "prepare_mask",
    # positions
    "rope_cos_sin",
    "apply_rope",
    "alibi_slopes",
    "alibi_bias",
    "padding_positions",
    # argument checks
    "check_input",
    "check_probability",
    "check_size",
    # pictures (attention_lib.viz, loaded on first use)
    *_VIZ,
]
