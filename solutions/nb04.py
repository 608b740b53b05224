"""Solutions to the exercises of notebook 04, and typical wrong answers with the hint each must get."""

import torch

from attention_lib import causal_mask, masks

# --- 04.1: average the past -----------------------------------------------------------------------------------------


def average_past(x):
    S = x.shape[1]
    tri = torch.ones(S, S, dtype=x.dtype).tril()  # (S, S)
    return (tri / tri.sum(-1, keepdim=True)) @ x  # (B, S, C)


def average_of_everything(x):
    return x.mean(1, keepdim=True).expand_as(x)  # the whole sequence, future included


def average_divided_by_length(x):
    S = x.shape[1]
    return torch.ones(S, S, dtype=x.dtype).tril() @ x / S  # row i holds i + 1 tokens, divided by S


def average_of_the_future(x):
    S = x.shape[1]
    tri = torch.ones(S, S, dtype=x.dtype).triu()  # the upper triangle: tokens i..S-1
    return (tri / tri.sum(-1, keepdim=True)) @ x


def average_without_itself(x):
    S = x.shape[1]
    tri = torch.ones(S, S, dtype=x.dtype).tril(diagonal=-1)  # tokens 0..i-1: row 0 is 0 / 0
    return (tri / tri.sum(-1, keepdim=True)) @ x


def average_by_softmax_of_the_triangle(x):
    S = x.shape[1]
    return torch.ones(S, S, dtype=x.dtype).tril().softmax(dim=-1) @ x  # the zeros get e^0 too


def average_along_the_features(x):
    C = x.shape[-1]
    return x.cumsum(dim=-1) / torch.arange(1, C + 1, dtype=x.dtype)  # the cumulative mean of the wrong axis


def average_detached(x):
    return average_past(x.detach())  # right numbers, no gradient for the layers before it


def average_in_place(x):
    for i in range(x.shape[1] - 1, -1, -1):  # from the end, so that each row still reads the original past
        x[:, i] = x[:, : i + 1].mean(1)  # writes into the caller's x
    return x


# --- 04.2: the mask of a cached step --------------------------------------------------------------------------------


def decode_mask(S_new, S_total):
    return torch.ones(S_new, S_total, dtype=torch.bool).tril(diagonal=S_total - S_new)  # (S_new, S_total)


def decode_mask_top_left(S_new, S_total):
    return torch.ones(S_new, S_total, dtype=torch.bool).tril()


def decode_mask_from_the_package(S_new, S_total):
    return causal_mask(S_new, S_total)[0]


def decode_mask_inverted(S_new, S_total):
    return ~decode_mask(S_new, S_total)


def decode_mask_as_floats(S_new, S_total):
    return torch.ones(S_new, S_total).tril(diagonal=S_total - S_new)  # 0. and 1., not False and True


def decode_mask_diagonal_negative(S_new, S_total):
    return torch.ones(S_new, S_total, dtype=torch.bool).tril(diagonal=S_new - S_total)  # the sign flipped


def decode_mask_without_itself(S_new, S_total):
    return torch.ones(S_new, S_total, dtype=torch.bool).tril(diagonal=S_total - S_new - 1)


def decode_mask_all_visible(S_new, S_total):
    return torch.ones(S_new, S_total, dtype=torch.bool)  # right for one new token only


def decode_mask_upper(S_new, S_total):
    return torch.ones(S_new, S_total, dtype=torch.bool).triu(diagonal=S_total - S_new)  # the future


def decode_mask_cache_hidden(S_new, S_total):
    new = torch.ones(S_new, S_new, dtype=torch.bool).tril()  # the new tokens among themselves
    return torch.cat([torch.zeros(S_new, S_total - S_new, dtype=torch.bool), new], dim=1)  # the cached keys hidden


def decode_mask_from_the_triangle_helper(S_new, S_total):
    return masks._lower_triangle(S_new, S_total)  # the package's triangle, behind causal_mask


def decode_mask_with_batch_axis(S_new, S_total):
    return decode_mask(S_new, S_total)[None]  # (1, S_new, S_total), causal_mask's shape


# --- 04.3: positions of the next tokens -----------------------------------------------------------------------------


def next_positions(mask, S_new):
    return mask.long().sum(-1, keepdim=True) + torch.arange(S_new)  # (B, S_new): n, n + 1, ... per row


def next_positions_columns(mask, S_new):
    return mask.shape[1] + torch.arange(S_new).expand(len(mask), S_new)  # where they land, not what they are


def next_positions_one_short(mask, S_new):
    return mask.long().sum(-1, keepdim=True) - 1 + torch.arange(S_new)


def next_positions_one_long(mask, S_new):
    return mask.long().sum(-1, keepdim=True) + 1 + torch.arange(S_new)  # counted from 1


def next_positions_all_alike(mask, S_new):
    return mask.long().sum(-1, keepdim=True).expand(len(mask), S_new)


def next_positions_as_floats(mask, S_new):
    return (mask.sum(-1, keepdim=True) + torch.arange(S_new)).float()


def next_positions_from_clamped_ids(mask, S_new):
    position_ids = (mask.long().cumsum(-1) - 1).clamp(min=0)  # the notebook's ids: the pads get 0, not -1
    return position_ids[:, -1:] + 1 + torch.arange(S_new)  # the last id plus one: 1 for a row of pads only


def next_positions_last_id(mask, S_new):
    position_ids = (mask.long().cumsum(-1) - 1).clamp(min=0)
    return position_ids[:, -1:] + torch.arange(S_new)  # the last id itself, not the next


def next_positions_as_uint8(mask, S_new):
    return (mask.sum(-1, keepdim=True) + torch.arange(S_new)).to(torch.uint8)  # nn.Embedding refuses uint8


def next_positions_counting_padding(mask, S_new):
    return (~mask).long().sum(-1, keepdim=True) + torch.arange(S_new)  # the pads counted, not the real tokens


def next_positions_from_zero(mask, S_new):
    return torch.arange(S_new).expand(len(mask), S_new)  # every row starts again at 0


# --- 04.4: generate with a cache ------------------------------------------------------------------------------------


def generate(layer, prompt, steps):
    with torch.no_grad():
        cache = layer.new_cache(prompt.shape[0])
        outs = layer(prompt, cache=cache)  # (1, P, C)
        for _ in range(steps):
            outs = torch.cat([outs, layer(outs[:, -1:], cache=cache)], dim=1)  # (1, S_total, C)
    return outs


def generate_forgetting_the_prompt(layer, prompt, steps):
    with torch.no_grad():
        cache = layer.new_cache(prompt.shape[0])
        outs = layer(prompt)  # the prompt without the cache: its keys never reach it
        for _ in range(steps):
            outs = torch.cat([outs, layer.decode(outs[:, -1:], cache)], dim=1)
    return outs


def generate_without_cache(layer, prompt, steps):
    with torch.no_grad():
        xs = prompt
        for _ in range(steps):
            xs = torch.cat([xs, layer(xs)[:, -1:]], dim=1)
        return layer(xs)


def generate_zeroing_the_weights(layer, prompt, steps):
    with torch.no_grad():
        for p in layer.parameters():
            p.zero_()  # every output is now 0: the caller's layer is broken
        return generate(layer, prompt, steps)


def generate_feeding_the_first_output(layer, prompt, steps):
    with torch.no_grad():
        cache = layer.new_cache(1)
        outs = layer(prompt, cache=cache)
        for _ in range(steps):
            outs = torch.cat([outs, layer(outs[:, :1], cache=cache)], dim=1)  # [:, :1] is the first, not the last
    return outs


def generate_feeding_the_input(layer, prompt, steps):
    with torch.no_grad():
        cache = layer.new_cache(1)
        outs, x = layer(prompt, cache=cache), prompt[:, -1:]
        for _ in range(steps):
            outs = torch.cat([outs, layer(x, cache=cache)], dim=1)  # x, the prompt's last token, never changes
    return outs


def generate_same_token(layer, prompt, steps):
    with torch.no_grad():
        cache = layer.new_cache(1)
        outs = layer(prompt, cache=cache)
        last = outs[:, -1:]
        for _ in range(steps):
            outs = torch.cat([outs, layer(last, cache=cache)], dim=1)  # last is never updated
    return outs


def generate_cache_per_step(layer, prompt, steps):
    with torch.no_grad():
        outs = layer(prompt, cache=layer.new_cache(1))
        for _ in range(steps):
            cache = layer.new_cache(1)  # a new, empty cache at each step
            outs = torch.cat([outs, layer(outs[:, -1:], cache=cache)], dim=1)
    return outs


def generate_with_gradients(layer, prompt, steps):
    cache = layer.new_cache(1)  # no torch.no_grad(): the layer refuses a cache while autograd records
    outs = layer(prompt, cache=cache)
    for _ in range(steps):
        outs = torch.cat([outs, layer(outs[:, -1:], cache=cache)], dim=1)
    return outs


def generate_in_training_mode(layer, prompt, steps):
    layer.train()  # leaves the caller's layer in training mode: its dropout would be on from now on
    return generate(layer, prompt, steps)


def generate_new_outputs_only(layer, prompt, steps):
    with torch.no_grad():
        cache = layer.new_cache(1)
        last, new = layer(prompt, cache=cache)[:, -1:], []
        for _ in range(steps):
            last = layer(last, cache=cache)
            new.append(last)
    return torch.cat(new, dim=1)  # the prompt's outputs left out


def generate_returning_inputs(layer, prompt, steps):
    with torch.no_grad():
        cache = layer.new_cache(1)
        xs, out = prompt, layer(prompt, cache=cache)
        for _ in range(steps):
            xs = torch.cat([xs, out[:, -1:]], dim=1)
            out = layer(out[:, -1:], cache=cache)
    return xs  # the sequence fed in, not the outputs


def generate_as_a_list(layer, prompt, steps):
    with torch.no_grad():
        cache = layer.new_cache(1)
        outs = [layer(prompt, cache=cache)]
        for _ in range(steps):
            outs.append(layer(outs[-1][:, -1:], cache=cache))
    return outs  # the pieces, never joined with torch.cat


def generate_with_residual(layer, prompt, steps):
    with torch.no_grad():
        cache = layer.new_cache(1)
        outs = layer(prompt, cache=cache)
        x = prompt[:, -1:] + outs[:, -1:]  # input + output, as around each layer of the two-layer stack
        for _ in range(steps):
            out = layer(x, cache=cache)
            outs, x = torch.cat([outs, out], dim=1), x + out
    return outs


SOLUTIONS = {
    "check_04_1": average_past,
    "check_04_2": decode_mask,
    "check_04_3": next_positions,
    "check_04_4": generate,
}

WRONG = {
    "check_04_1": [
        (average_of_everything, "the future leaked in"),
        (average_divided_by_length, "divide it by i + 1"),
        (average_of_the_future, "not the upper one"),
        (average_without_itself, "leaves itself out"),
        (average_by_softmax_of_the_triangle, "e^0 = 1"),
        (average_along_the_features, "along the features"),
        (average_in_place, "changed its input `x` in place"),
        (average_detached, "carries no gradient"),
    ],
    "check_04_2": [
        (decode_mask_top_left, "top left"),
        (decode_mask_from_the_package, "instead of calling causal_mask"),
        (decode_mask_inverted, "may attend"),
        (decode_mask_as_floats, "torch.bool"),
        (decode_mask_diagonal_negative, "sign the wrong way round"),
        (decode_mask_without_itself, "does not see itself"),
        (decode_mask_all_visible, "every key is visible"),
        (decode_mask_upper, "its future"),
        (decode_mask_cache_hidden, "misses a key of its past"),
        (decode_mask_with_batch_axis, "should have shape (2, 7)"),
        (decode_mask_from_the_triangle_helper, "the package's triangle behind it (_lower_triangle)"),
    ],
    "check_04_3": [
        (next_positions_columns, "columns"),
        (next_positions_one_short, "its last position id is n - 1"),
        (next_positions_one_long, "not n + 1"),
        (next_positions_all_alike, "consecutive"),
        (next_positions_as_floats, "integer"),
        (next_positions_from_clamped_ids, "no real token yet"),
        (next_positions_last_id, "its last position id is n - 1"),
        (next_positions_counting_padding, "counts each row's padding"),
        (next_positions_as_uint8, "nn.Embedding takes torch.long (or torch.int32) indices only"),
        (next_positions_from_zero, "should be [[5, 6], [3, 4], [0, 1], [4, 5]]"),
    ],
    "check_04_4": [
        (generate_forgetting_the_prompt, "missing the prompt's keys and values"),
        (generate_without_cache, "projected"),
        (generate_zeroing_the_weights, "changed the weights of `layer`"),
        (generate_feeding_the_first_output, "you fed back the first output"),
        (generate_feeding_the_input, "you fed an input"),
        (generate_same_token, "the same token as at the step before"),
        (generate_cache_per_step, "a new cache at each call"),
        (generate_with_gradients, "under torch.no_grad()"),
        (generate_new_outputs_only, "generated outputs only"),
        (generate_returning_inputs, "returned the inputs"),
        (generate_as_a_list, "return one tensor"),
        (generate_with_residual, "with nothing added or changed"),
        (generate_in_training_mode, "changed the train/eval mode of `layer`"),
    ],
}
