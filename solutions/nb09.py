"""Solutions of notebook 09's exercises, and typical wrong answers with the hint each must get."""

from __future__ import annotations

import torch


def top_k_probs(logits, temperature, top_k):
    z = logits / temperature  # (B, V)
    if top_k is not None and top_k < z.shape[-1]:
        kth = z.topk(top_k, dim=-1).values[:, -1:]  # (B, 1): the k-th largest
        z = z.masked_fill(z < kth, float("-inf"))  # (B, V): ties with the k-th largest kept
    return z.softmax(dim=-1)  # (B, V)


def duplicate_token_scores(weights, tokens):
    S = tokens.shape[0]
    i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]  # (S, 1), (1, S)
    earlier = (tokens[:, None] == tokens[None, :]) & (j < i)  # (S, S): the earlier copies of token i
    repeats = earlier.any(dim=-1)  # (S,): the positions whose token occurred before
    per = (weights * earlier).sum(dim=-1)  # (NH, S): the weight on every earlier copy
    return per[:, repeats].mean(dim=-1)  # (NH,)


def sink_window_mask(S, window, sinks):
    i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]  # (S, 1), (1, S)
    return (j <= i) & ((i - j < window) | (j < sinks))  # (S, S)


# ---------------------------------------------------------------------------------------------- wrong answers: 09.1


def _probs_times_temperature(logits, temperature, top_k):
    return top_k_probs(logits * temperature, 1.0, top_k)


def _probs_divided_after_softmax(logits, temperature, top_k):
    return top_k_probs(logits, 1.0, top_k) / temperature  # rows sum to 1 / T


def _probs_power_after_softmax(logits, temperature, top_k):
    return top_k_probs(logits, 1.0, top_k) ** (1 / temperature)  # right once renormalised, and it is not


def _probs_filtered_after_softmax(logits, temperature, top_k):
    probs = (logits / temperature).softmax(dim=-1)  # (B, V)
    if top_k is not None and top_k < logits.shape[-1]:
        kth = probs.topk(top_k, dim=-1).values[:, -1:]
        probs = probs.masked_fill(probs < kth, 0.0)  # the kept tokens no longer sum to 1
    return probs


def _probs_zero_filled(logits, temperature, top_k):
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        z = z.masked_fill(z < z.topk(top_k, dim=-1).values[:, -1:], 0.0)  # e^0 = 1: not hidden
    return z.softmax(dim=-1)


def _probs_strict(logits, temperature, top_k):
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        z = z.masked_fill(z <= z.topk(top_k, dim=-1).values[:, -1:], float("-inf"))  # drops the k-th too
    return z.softmax(dim=-1)


def _probs_one_more(logits, temperature, top_k):
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        kth = z.sort(dim=-1, descending=True).values[:, top_k : top_k + 1]  # index k: the (k + 1)-th largest
        z = z.masked_fill(z < kth, float("-inf"))
    return z.softmax(dim=-1)


def _probs_topk_over_batch(logits, temperature, top_k):
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        z = z.masked_fill(z < z.topk(top_k, dim=0).values[-1:], float("-inf"))  # the top k of each column
    return z.softmax(dim=-1)


def _probs_scatter_drops_ties(logits, temperature, top_k):
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        keep = torch.zeros_like(z, dtype=torch.bool).scatter(-1, z.topk(top_k, dim=-1).indices, True)  # exactly k
        z = z.masked_fill(~keep, float("-inf"))
    return z.softmax(dim=-1)


def _probs_softmax_over_batch(logits, temperature, top_k):
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        z = z.masked_fill(z < z.topk(top_k, dim=-1).values[:, -1:], float("-inf"))
    return z.softmax(dim=0)


def _probs_none_crashes(logits, temperature, top_k):
    z = logits / temperature
    k = min(top_k, z.shape[-1])  # TypeError for top_k=None
    return z.masked_fill(z < z.topk(k, dim=-1).values[:, -1:], float("-inf")).softmax(dim=-1)


def _probs_none_keeps_nothing(logits, temperature, top_k):
    z = logits / temperature
    keep = torch.zeros_like(z, dtype=torch.bool)
    if top_k:  # None: no token kept
        kth = z.topk(min(top_k, z.shape[-1]), dim=-1).values[:, -1:]
        keep = z >= kth
    return z.masked_fill(~keep, float("-inf")).softmax(dim=-1)


def _probs_none_keeps_nothing_nan_cleaned(logits, temperature, top_k):
    z = logits / temperature
    k = top_k or 0  # None: 0 tokens kept
    rank = z.argsort(dim=-1, descending=True).argsort(dim=-1)  # (B, V): 0 for the largest
    return z.masked_fill(rank >= k, float("-inf")).softmax(dim=-1).nan_to_num(0.0)  # the NaN of a row without a token


def _probs_topk_beyond_V(logits, temperature, top_k):
    z = logits / temperature
    if top_k is not None:
        z = z.masked_fill(z < z.topk(top_k, dim=-1).values[:, -1:], float("-inf"))  # topk refuses k > V
    return z.softmax(dim=-1)


def _probs_in_place(logits, temperature, top_k):
    logits /= temperature  # changes the caller's logits
    return top_k_probs(logits, 1.0, top_k)


def _probs_log(logits, temperature, top_k):
    return top_k_probs(logits, temperature, top_k).log()  # log-probabilities


def _probs_masked_logits(logits, temperature, top_k):
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        z = z.masked_fill(z < z.topk(top_k, dim=-1).values[:, -1:], float("-inf"))
    return z  # the softmax forgotten


def _probs_scaled_logits(logits, temperature, top_k):
    return logits / temperature  # neither the top k nor the softmax


def _probs_logits(logits, temperature, top_k):
    return logits.clone()


def _probs_unstable_exp(logits, temperature, top_k):
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        z = z.masked_fill(z < z.topk(top_k, dim=-1).values[:, -1:], float("-inf"))
    e = z.exp()  # e^2000 is inf
    return e / e.sum(dim=-1, keepdim=True)


def _probs_kept_only(logits, temperature, top_k):
    if top_k is None or top_k >= logits.shape[-1]:
        return top_k_probs(logits, temperature, top_k)
    return (logits.topk(top_k, dim=-1).values / temperature).softmax(dim=-1)  # (B, k): which tokens?


def _probs_float32_returned_as_float64(logits, temperature, top_k):
    return top_k_probs(logits.float(), temperature, top_k).double()  # float32 arithmetic, as generate's


# ---------------------------------------------------------------------------------------------- wrong answers: 09.2


def _ij(S):
    return torch.arange(S)[:, None], torch.arange(S)[None, :]


def _dup_with_itself(weights, tokens):
    i, j = _ij(tokens.shape[0])
    mine = (tokens[:, None] == tokens[None, :]) & (j <= i)  # the token itself counts as a copy
    return (weights * mine).sum(-1)[:, (mine & (j < i)).any(-1)].mean(-1)


def _dup_equality_matrix(weights, tokens):
    same = tokens[:, None] == tokens[None, :]  # (S, S): the diagonal is True, and the weights are causal anyway
    return (weights * same).sum(-1)[:, same.sum(-1) > 1].mean(-1)


def _dup_mean_over_all(weights, tokens):
    i, j = _ij(tokens.shape[0])
    earlier = (tokens[:, None] == tokens[None, :]) & (j < i)
    return (weights * earlier).sum(-1).mean(-1)  # new tokens count as 0


def _dup_new_as_zero(weights, tokens):
    i, j = _ij(tokens.shape[0])
    earlier = (tokens[:, None] == tokens[None, :]) & (j < i)
    per = torch.where(earlier.any(-1), (weights * earlier).sum(-1), torch.zeros(()))  # (NH, S)
    return per.to(weights.dtype).mean(-1)


def _dup_mean_after_first(weights, tokens):
    i, j = _ij(tokens.shape[0])
    earlier = (tokens[:, None] == tokens[None, :]) & (j < i)
    return (weights * earlier).sum(-1)[:, 1:].mean(-1)  # every row i >= 1


def _dup_latest_only(weights, tokens):
    toks = tokens.tolist()
    per = []
    for i, t in enumerate(toks):
        before = [j for j in range(i) if toks[j] == t]
        if before:
            per.append(weights[:, i, before[-1]])  # the latest copy only
    return torch.stack(per, -1).mean(-1)


def _dup_first_only(weights, tokens):
    toks = tokens.tolist()
    per = [weights[:, i, toks.index(t)] for i, t in enumerate(toks) if toks.index(t) < i]  # index: the first copy
    return torch.stack(per, -1).mean(-1)


def _dup_max(weights, tokens):
    i, j = _ij(tokens.shape[0])
    earlier = (tokens[:, None] == tokens[None, :]) & (j < i)
    return (weights * earlier).amax(-1)[:, earlier.any(-1)].mean(-1)


def _dup_induction(weights, tokens):
    i, j = _ij(tokens.shape[0])
    earlier = (tokens[:, None] == tokens[None, :]) & (j < i)
    after = torch.zeros_like(earlier)
    after[:, 1:] = earlier[:, :-1]  # the token after each copy
    return (weights * after).sum(-1)[:, earlier.any(-1)].mean(-1)


def _dup_mean_over_heads(weights, tokens):
    return duplicate_token_scores(weights, tokens).mean()  # one number


def _dup_later_copies(weights, tokens):
    same = tokens[:, None] == tokens[None, :]
    later = same.triu(diagonal=1)  # j > i: above the diagonal, where a causal layer puts no weight
    rows = later.any(-1)
    return (weights * later).sum(-1)[:, rows].mean(-1)


def _dup_axes_swapped(weights, tokens):
    return duplicate_token_scores(weights.transpose(-2, -1), tokens)  # weights[h, j, i]


def _dup_per_position(weights, tokens):
    i, j = _ij(tokens.shape[0])
    earlier = (tokens[:, None] == tokens[None, :]) & (j < i)
    return (weights * earlier).sum(-1)  # (NH, S)


def _dup_first_occurrences_counted(weights, tokens):
    i, j = _ij(tokens.shape[0])
    same = tokens[:, None] == tokens[None, :]
    earlier = same & (j < i)
    return (weights * earlier).sum(-1)[:, same.sum(-1) > 1].mean(-1)  # a repeated token's first occurrence too


def _dup_in_place(weights, tokens):
    i, j = _ij(tokens.shape[0])
    earlier = (tokens[:, None] == tokens[None, :]) & (j < i)
    weights *= earlier  # changes the caller's weights
    return weights.sum(-1)[:, earlier.any(-1)].mean(-1)


# ---------------------------------------------------------------------------------------------- wrong answers: 09.3


def _sinks_not_causal(S, window, sinks):
    i, j = _ij(S)
    return ((j <= i) & (i - j < window)) | (j < sinks)  # token 0 sees sinks 1 .. sinks - 1


def _window_one_longer(S, window, sinks):
    i, j = _ij(S)
    return (j <= i) & ((i - j <= window) | (j < sinks))


def _window_one_shorter(S, window, sinks):
    i, j = _ij(S)
    return (j <= i) & ((j > i - window + 1) | (j < sinks))


def _sinks_inverted(S, window, sinks):
    return ~sink_window_mask(S, window, sinks)


def _sinks_additive(S, window, sinks):
    return torch.zeros(S, S).masked_fill(~sink_window_mask(S, window, sinks), float("-inf"))


def _sinks_as_ints(S, window, sinks):
    return sink_window_mask(S, window, sinks).long()


def _window_two_sided(S, window, sinks):
    i, j = _ij(S)
    return ((i - j).abs() < window) | ((j <= i) & (j < sinks))


def _sinks_at_the_end(S, window, sinks):
    i, j = _ij(S)
    return (j <= i) & ((i - j < window) | (j >= S - sinks))


def _sinks_inside_the_window(S, window, sinks):
    i, j = _ij(S)
    return (j <= i) & ((i - j < window - sinks) | (j < sinks))  # window tokens in all, sinks included


def _sinks_without_triangle(S, window, sinks):
    i, j = _ij(S)
    return (i - j < window) | (j < sinks)  # i - j < window holds for every later token


def _sinks_package_window(S, window, sinks):
    from attention_lib.masks import sliding_window_mask

    i, j = _ij(S)
    return sliding_window_mask(S, window=window) | ((j <= i) & (j < sinks))  # (1, S, S)


def _sinks_one_more(S, window, sinks):
    i, j = _ij(S)
    return (j <= i) & ((i - j < window) | (j <= sinks))


def _sinks_ignored(S, window, sinks):
    i, j = _ij(S)
    return (j <= i) & (i - j < window)


def _sinks_and(S, window, sinks):
    i, j = _ij(S)
    return (j <= i) & (i - j < window) & (j < sinks)


def _window_without_itself(S, window, sinks):
    i, j = _ij(S)
    return (j < i) & ((i - j <= window) | (j < sinks))


def _window_two_sided_sinks_for_all(S, window, sinks):
    i, j = _ij(S)
    return ((i - j).abs() < window) | (j < sinks)  # notebook 08's local window, and sinks for every token


SOLUTIONS = {"check_09_1": top_k_probs, "check_09_2": duplicate_token_scores, "check_09_3": sink_window_mask}
WRONG = {
    "check_09_1": [
        (_probs_times_temperature, "divide them, softmax(logits / T)"),
        (_probs_divided_after_softmax, "you divided the probabilities by T after the softmax"),
        (_probs_power_after_softmax, "without renormalising"),
        (_probs_filtered_after_softmax, "you zeroed the tokens outside the top k after the softmax"),
        (_probs_zero_filled, "e^0 = 1 is not 0"),
        (_probs_strict, "each row keeps 2 tokens where top_k = 3 keeps 3"),
        (_probs_one_more, "each row keeps 4 tokens where top_k = 3 keeps 3"),
        (_probs_topk_over_batch, "along the batch axis"),
        (_probs_scatter_drops_ties, "A token tied with the k-th largest is kept too"),
        (_probs_softmax_over_batch, "the softmax ran over the batch axis"),
        (_probs_none_crashes, "top_k=None means no top-k filter"),
        (_probs_none_keeps_nothing, "top_k=None means no top-k filter"),
        (_probs_none_keeps_nothing_nan_cleaned, "you returned zeros: top_k=None means no top-k filter"),
        (_probs_topk_beyond_V, "Filter only when top_k < V"),
        (_probs_in_place, "changed its input `logits` in place"),
        (_probs_log, "log-probabilities"),
        (_probs_masked_logits, "with -inf for the tokens left out"),
        (_probs_scaled_logits, "those are the logits / T: a sampler draws from their softmax"),
        (_probs_logits, "those are the logits themselves"),
        (_probs_unstable_exp, "overflows to inf"),
        (_probs_kept_only, "the probabilities of the kept tokens only"),
        (_probs_float32_returned_as_float64, "do not call .float()"),
    ],
    "check_09_2": [
        (_dup_with_itself, "the token itself (j == i) is no earlier copy"),
        (_dup_equality_matrix, "the token itself (j == i) is no earlier copy"),
        (_dup_mean_over_all, "you divided by all S = 9 positions"),
        (_dup_new_as_zero, "you divided by all S = 9 positions"),
        (_dup_mean_after_first, "the S - 1 = 8 positions after the first"),
        (_dup_latest_only, "the latest"),
        (_dup_first_only, "list.index finds the first"),
        (_dup_max, "the largest weight among the earlier copies"),
        (_dup_induction, "an induction head's score"),
        (_dup_mean_over_heads, "one number for every head together"),
        (_dup_later_copies, "your scores are all 0"),
        (_dup_axes_swapped, "your scores are all 0"),
        (_dup_per_position, "one number per head and position"),
        (_dup_first_occurrences_counted, "the first occurrences too"),
        (_dup_in_place, "changed its input `weights` in place"),
    ],
    "check_09_3": [
        (_sinks_not_causal, "sees the sinks after it"),
        (_window_one_longer, "one token too long: it holds the last 3 tokens, not 2"),
        (_window_one_shorter, "one token short: it holds 1 of the last 2 tokens"),
        (_sinks_inverted, "True means 'may attend'"),
        (_sinks_additive, "additive mask"),
        (_sinks_as_ints, "a bool tensor"),
        (_window_two_sided, "Your window is two-sided"),
        (_sinks_at_the_end, "the attention sinks are its FIRST `sinks` tokens"),
        (_sinks_inside_the_window, "You counted the sinks inside the window"),
        (_sinks_without_triangle, "keep the causal triangle"),
        (_sinks_package_window, "return the (S, S) = (10, 10) mask itself"),
        (_sinks_one_more, "You keep 4 sinks"),
        (_sinks_ignored, "a plain sliding window"),
        (_sinks_and, "AND"),
        (_window_without_itself, "leaves out the token itself"),
        (_window_two_sided_sinks_for_all, "A query never sees a later token"),
    ],
}
