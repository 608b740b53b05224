"""Solutions to the exercises of notebook 04, and typical wrong answers the graders must catch."""

import torch

from attention_lib import causal_mask


def average_past(x):
    S = x.shape[1]
    tri = torch.ones(S, S, dtype=x.dtype).tril()  # (S, S)
    return (tri / tri.sum(-1, keepdim=True)) @ x  # (B, S, C)


def decode_mask(S_new, S_total):
    return torch.ones(S_new, S_total, dtype=torch.bool).tril(diagonal=S_total - S_new)  # (S_new, S_total)


def next_positions(mask, S_new):
    return mask.long().sum(-1, keepdim=True) + torch.arange(S_new)  # (B, S_new): n, n + 1, ... per row


def generate(layer, prompt, steps):
    with torch.no_grad():
        cache = layer.new_cache(prompt.shape[0])
        outs = layer.decode(prompt, cache)  # (1, P, C)
        for _ in range(steps):
            outs = torch.cat([outs, layer.decode(outs[:, -1:], cache)], dim=1)  # (1, S_total, C)
    return outs


def generate_forgetting_the_prompt(layer, prompt, steps):
    with torch.no_grad():
        cache = layer.new_cache(prompt.shape[0])
        outs = layer(prompt)  # the prompt through forward: its keys never reach the cache
        for _ in range(steps):
            outs = torch.cat([outs, layer.decode(outs[:, -1:], cache)], dim=1)
    return outs


def generate_without_cache(layer, prompt, steps):
    with torch.no_grad():
        xs = prompt
        for _ in range(steps):
            xs = torch.cat([xs, layer(xs)[:, -1:]], dim=1)
        return layer(xs)


SOLUTIONS = {
    "check_04_1": average_past,
    "check_04_2": decode_mask,
    "check_04_3": next_positions,
    "check_04_4": generate,
}

WRONG = {
    "check_04_1": [
        (lambda x: x.mean(1, keepdim=True).expand_as(x), "future"),
        (lambda x: torch.ones(x.shape[1], x.shape[1]).tril() @ x / x.shape[1], "i + 1"),
    ],
    "check_04_2": [
        (lambda S_new, S_total: torch.ones(S_new, S_total, dtype=torch.bool).tril(), "top left"),
        (lambda S_new, S_total: causal_mask(S_new, S_total)[0], "instead of calling causal_mask"),
        (lambda S_new, S_total: ~decode_mask(S_new, S_total), "may attend"),
    ],
    "check_04_3": [
        (lambda mask, n: mask.shape[1] + torch.arange(n).expand(len(mask), n), "columns"),
        (lambda mask, n: mask.long().sum(-1, keepdim=True) - 1 + torch.arange(n), "off by one"),
        (lambda mask, n: mask.long().sum(-1, keepdim=True).expand(len(mask), n), "consecutive"),
        (lambda mask, n: (mask.sum(-1, keepdim=True) + torch.arange(n)).float(), "integer"),
    ],
    "check_04_4": [
        (generate_forgetting_the_prompt, "prompt"),
        (generate_without_cache, "cache"),
    ],
}
