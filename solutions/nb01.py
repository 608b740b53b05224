"""Solutions to the exercises of notebook 01, and typical wrong answers with the hint each must get."""

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


# --- 01.2: fuse three projections -----------------------------------------------------------------------------------


def fuse(W_q, W_k, W_v):
    C, HS = W_q.in_features, W_q.out_features
    fused = nn.Linear(C, 3 * HS, bias=W_q.bias is not None)
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


SOLUTIONS = {"check_01_1": n_params, "check_01_2": fuse, "check_01_3": projections}

WRONG = {
    "check_01_1": [
        (n_params_full_width, "as wide as the token"),
        (n_params_without_biases, "forgot the biases"),
        (n_params_wo_bias_of_head_size, "its bias has C"),
        (n_params_true_division, "not C / 4"),
    ],
    "check_01_2": [
        (fuse_along_inputs, "stack the three weights along dim 0"),
        (fuse_in_order_k_q_v, "wrong order"),
        (fuse_without_bias, "off by the biases"),
        (fuse_keeping_the_random_bias, "the weight is right, the bias is not"),
    ],
    "check_01_3": [
        (projections_identity, "'bank' gives 'river' only 0.22"),
        (projections_one_rule, "'river' gives 'bank' only 0.20"),
    ],
}
