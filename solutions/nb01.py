"""Solutions to the exercises of notebook 01, and typical wrong answers with the hint each must get."""

import copy
import math
from unittest import mock

import torch
from torch import nn

# --- 01.1: count the parameters -------------------------------------------------------------------------------------


def n_params(C, bias):
    HS = C // 4
    return 4 * C * HS + (3 * HS + C if bias else 0)  # Wqkv: C x 3HS (+ 3HS), Wo: HS x C (+ C)


def n_params_full_width(C, bias):
    return 4 * C * C + (4 * C if bias else 0)  # a head as wide as the token


def n_params_without_biases(C, bias):
    return 4 * C * (C // 4)


def n_params_wo_bias_of_head_size(C, bias):
    HS = C // 4
    return 4 * C * HS + (3 * HS + HS if bias else 0)  # Wo's bias counted with HS numbers instead of C


def n_params_true_division(C, bias):
    HS = C / 4
    return 4 * C * HS + (3 * HS + C if bias else 0)


def n_params_bias_by_true_division(C, bias):
    HS = C // 4
    return 4 * C * HS + (3 * C / 4 + C if bias else 0)  # Wqkv's biases as 3 * C / 4: 97.5 for C = 10


def n_params_anything(C, bias):
    return mock.ANY  # equal to everything: a count must be a number


def n_params_ignoring_the_flag(C, bias):
    HS = C // 4
    return 4 * C * HS + 3 * HS + C  # the biases counted with bias=False too


def n_params_wqkv_only(C, bias):
    HS = C // 4
    return 3 * C * HS + (3 * HS if bias else 0)  # forgot Wo


def n_params_rounded_up(C, bias):
    HS = math.ceil(C / 4)  # a head of 3 for C = 10
    return 4 * C * HS + (3 * HS + C if bias else 0)


def n_params_one_bias_per_head(C, bias):
    HS = C // 4
    return 4 * C * HS + (HS + C if bias else 0)  # Wqkv's bias counted once, HS numbers, instead of 3 * HS


def n_params_as_a_tensor(C, bias):
    HS = torch.tensor(C) // 4
    return 4 * C * HS + (3 * HS + C if bias else 0)  # a 0-d tensor, not a number


# --- 01.2: fuse three projections -----------------------------------------------------------------------------------


def fuse(W_q, W_k, W_v):
    C, HS = W_q.in_features, W_q.out_features
    fused = nn.Linear(C, 3 * HS, bias=W_q.bias is not None, dtype=W_q.weight.dtype, device=W_q.weight.device)
    with torch.no_grad():
        fused.weight.copy_(torch.cat([W_q.weight, W_k.weight, W_v.weight], dim=0))  # (3 * HS, C)
        if W_q.bias is not None:
            fused.bias.copy_(torch.cat([W_q.bias, W_k.bias, W_v.bias]))  # (3 * HS,)
    return fused


def fuse_along_inputs(W_q, W_k, W_v):
    fused = nn.Linear(W_q.in_features, 3 * W_q.out_features)
    fused.weight = nn.Parameter(torch.cat([W_q.weight, W_k.weight, W_v.weight], dim=1).detach())  # (HS, 3 * C)
    return fused


def fuse_in_order_k_q_v(W_q, W_k, W_v):
    return fuse(W_k, W_q, W_v)


def fuse_without_bias(W_q, W_k, W_v):
    C, HS = W_q.in_features, W_q.out_features
    fused = nn.Linear(C, 3 * HS, bias=False)
    with torch.no_grad():
        fused.weight.copy_(torch.cat([W_q.weight, W_k.weight, W_v.weight], dim=0))
    return fused


def fuse_keeping_the_random_bias(W_q, W_k, W_v):
    C, HS = W_q.in_features, W_q.out_features
    fused = nn.Linear(C, 3 * HS)  # bias=True, initialised at random
    with torch.no_grad():
        fused.weight.copy_(torch.cat([W_q.weight, W_k.weight, W_v.weight], dim=0))  # the weight only
    return fused


def fuse_always_with_bias(W_q, W_k, W_v):
    C, HS = W_q.in_features, W_q.out_features
    fused = nn.Linear(C, 3 * HS)  # a random bias, kept when the three layers have none
    with torch.no_grad():
        fused.weight.copy_(torch.cat([W_q.weight, W_k.weight, W_v.weight], dim=0))
        if W_q.bias is not None:
            fused.bias.copy_(torch.cat([W_q.bias, W_k.bias, W_v.bias]))
    return fused


def fuse_returns_the_weight(W_q, W_k, W_v):
    return torch.cat([W_q.weight, W_k.weight, W_v.weight], dim=0)  # the weight, not a layer


def fuse_returns_weight_and_bias(W_q, W_k, W_v):
    weight = torch.cat([W_q.weight, W_k.weight, W_v.weight], dim=0)
    bias = None if W_q.bias is None else torch.cat([W_q.bias, W_k.bias, W_v.bias])
    return weight, bias


def fuse_transposed(W_q, W_k, W_v):
    fused = nn.Linear(W_q.in_features, 3 * W_q.out_features, bias=False)
    weights = [W.weight.T for W in (W_q, W_k, W_v)]  # the (C, HS) matrices of x @ W
    fused.weight = nn.Parameter(torch.cat(weights, dim=1).detach())  # (C, 3 * HS): x @ W, not nn.Linear's layout
    return fused


def fuse_into_a_copy_of_W_q(W_q, W_k, W_v):
    fused = copy.deepcopy(W_q)  # still says out_features=HS
    fused.weight = nn.Parameter(torch.cat([W_q.weight, W_k.weight, W_v.weight], dim=0).detach())
    if W_q.bias is not None:
        fused.bias = nn.Parameter(torch.cat([W_q.bias, W_k.bias, W_v.bias]).detach())
    return fused


def fuse_into_W_q(W_q, W_k, W_v):
    weight = torch.cat([W_q.weight, W_k.weight, W_v.weight], dim=0).detach()
    bias = None if W_q.bias is None else torch.cat([W_q.bias, W_k.bias, W_v.bias]).detach()
    W_q.weight = nn.Parameter(weight)  # changes the caller's W_q
    if bias is not None:
        W_q.bias = nn.Parameter(bias)
    W_q.out_features = weight.size(0)
    return W_q


def fuse_biases_reversed(W_q, W_k, W_v):
    fused = fuse(W_q, W_k, W_v)
    if W_q.bias is not None:
        with torch.no_grad():
            fused.bias.copy_(torch.cat([W_v.bias, W_k.bias, W_q.bias]))  # the weight [q | k | v], the bias [v | k | q]
    return fused


def fuse_interleaved(W_q, W_k, W_v):
    C, HS = W_q.in_features, W_q.out_features
    fused = nn.Linear(C, 3 * HS, bias=W_q.bias is not None)
    with torch.no_grad():
        fused.weight.copy_(torch.stack([W_q.weight, W_k.weight, W_v.weight], dim=1).reshape(3 * HS, C))  # q0 k0 v0..
        if W_q.bias is not None:
            fused.bias.copy_(torch.stack([W_q.bias, W_k.bias, W_v.bias], dim=1).reshape(3 * HS))
    return fused


def fuse_copy_paste(W_q, W_k, W_v):
    C, HS = W_q.in_features, W_q.out_features
    fused = nn.Linear(C, 3 * HS, bias=W_q.bias is not None)
    with torch.no_grad():
        fused.weight.copy_(torch.cat([W_q.weight, W_k.weight, W_k.weight], dim=0))  # W_k twice, W_v never
        if W_q.bias is not None:
            fused.bias.copy_(torch.cat([W_q.bias, W_k.bias, W_v.bias]))
    return fused


# --- 01.3: two rules by hand -----------------------------------------------------------------------------------------


def projections():
    W_Q, W_K = torch.zeros(4, 4), torch.zeros(4, 4)
    W_Q[1, 0], W_K[0, 0] = 2.0, 3.0  # money asks "water?" in column 0; water answers in column 0
    W_Q[0, 1], W_K[1, 1] = 2.0, 3.0  # water asks "money?" in column 1; money answers in column 1
    return W_Q, W_K


def projections_identity():
    return torch.eye(4), torch.eye(4)  # raw attention: every token looks at itself


def projections_one_rule():
    W_Q, W_K = torch.zeros(4, 4), torch.zeros(4, 4)
    W_Q[1, 0], W_K[0, 0] = 2.0, 3.0  # the narrative's rule only: river does not look for bank
    return W_Q, W_K


def projections_same_column():
    W_Q, W_K = torch.zeros(4, 4), torch.zeros(4, 4)
    W_Q[1, 0], W_K[0, 0] = 2.0, 3.0  # money asks "water?" in column 0
    W_Q[0, 0], W_K[1, 0] = 2.0, 3.0  # water asks "money?" in column 0 too: bank's question finds bank itself
    return W_Q, W_K


def projections_second_rule_too_weak():
    W_Q, W_K = torch.zeros(4, 4), torch.zeros(4, 4)
    W_Q[1, 0], W_K[0, 0] = 2.0, 3.0
    W_Q[0, 1], W_K[1, 1] = 1.0, 1.0  # the right place, too small a score: river gives bank 0.29
    return W_Q, W_K


def projections_as_linear_weights():
    W_Q, W_K = torch.zeros(4, 4), torch.zeros(4, 4)
    W_Q[1, 0], W_K[0, 0] = 2.0, 3.0
    W_Q[0, 2], W_K[1, 2] = 2.0, 3.0  # the second rule in column 2
    return W_Q.T, W_K.T  # nn.Linear's (d, C) layout, as lin_Q.weight in the notebook


def projections_infinite():
    W_Q, W_K = projections()
    W_Q[1, 0] = float("inf")  # "as large as possible": inf times a feature of 0 is NaN
    return W_Q, W_K


def projections_with_values():
    W_Q, W_K = projections()
    return W_Q, W_K, torch.eye(4)  # (W_Q, W_K, W_V): the exercise asks for the pair


def projections_as_layers():
    W_Q, W_K = projections()
    lin_Q, lin_K = nn.Linear(4, 4, bias=False), nn.Linear(4, 4, bias=False)
    with torch.no_grad():
        lin_Q.weight.copy_(W_Q.T)
        lin_K.weight.copy_(W_K.T)
    return lin_Q, lin_K


def projections_two_columns():
    W_Q, W_K = projections()
    return W_Q[:, :2], W_K[:, :2]  # (4, 2): the two columns that are used


SOLUTIONS = {"check_01_1": n_params, "check_01_2": fuse, "check_01_3": projections}

WRONG = {
    "check_01_1": [
        (n_params_full_width, "as wide as the token"),
        (n_params_without_biases, "forgot the biases"),
        (n_params_wo_bias_of_head_size, "its bias has C"),
        (n_params_true_division, "not C / 4"),
        (n_params_bias_by_true_division, "you return 97.5, the layer has 96: a number of parameters is a whole"),
        (n_params_anything, "a number of parameters is an int"),
        (n_params_as_a_tensor, "of type Tensor"),
        (n_params_ignoring_the_flag, "with bias=False the two layers have no biases"),
        (n_params_wqkv_only, "you counted Wqkv only"),
        (n_params_rounded_up, "a head of width 3"),
        (n_params_one_bias_per_head, "Count Wqkv"),
    ],
    "check_01_2": [
        (fuse_along_inputs, "stack the three weights along dim 0"),
        (fuse_in_order_k_q_v, "the order [k | q | v]"),
        (fuse_without_bias, "off by the biases"),
        (fuse_keeping_the_random_bias, "the weight is right, the bias is not"),
        (fuse_always_with_bias, "must have none either"),
        (fuse_returns_the_weight, "return the layer itself"),
        (fuse_returns_weight_and_bias, "should return an nn.Linear, got tuple"),
        (fuse_transposed, "without transposing them"),
        (fuse_into_a_copy_of_W_q, "out_features=3"),
        (fuse_into_W_q, "changed the weights of `W_q` in place"),
        (fuse_interleaved, "interleaved"),
        (fuse_biases_reversed, "the biases are in the order [v | k | q]"),
        (fuse_copy_paste, "differs from [W_q(x) | W_k(x) | W_v(x)]"),
    ],
    "check_01_3": [
        (projections_identity, "'bank' gives 'river' only 0.22"),
        (projections_one_rule, "'river' gives 'bank' only 0.20"),
        (projections_same_column, "looks at itself at least as much"),
        (projections_second_rule_too_weak, "'river' gives 'bank' only 0.29"),
        (projections_as_linear_weights, "work once transposed"),
        (projections_infinite, "NaN weights"),
        (projections_with_values, "a pair (W_Q, W_K)"),
        (projections_as_layers, "not nn.Linear layers"),
        (projections_two_columns, "should be (C, d) = (4, 4)"),
    ],
}
