"""The machinery behind the graders: run a learner's answer, and say in a sentence what is wrong with it.

A grader is a function `check_NN_k(answer)` decorated with `@grader("NN.k")`. Its body calls the answer on inputs
of its own and raises `Hint("...")` at the first thing that is wrong; the decorator turns the outcome into a
`Grade`, which a notebook shows as one short message. An answer that still raises `NotImplementedError` (the
placeholder the notebooks ship with) is "not attempted yet", which never fails a notebook.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["Grade", "Hint", "grader", "expect_tensor", "expect_shape", "expect_close", "expect_equal"]


class Hint(Exception):
    """What is wrong with an answer, and how to see it for yourself: raised by a grader's checks."""


@dataclass(frozen=True)
class Grade:
    """The outcome of grading one answer; shown in a notebook as its message."""

    exercise: str  # "NN.k"
    passed: bool
    attempted: bool
    message: str

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        return self.message

    __str__ = __repr__


def grader(exercise: str) -> Callable[[Callable[..., str]], Callable[..., Grade]]:
    """Turn `check(answer, ...) -> str` (what a right answer has shown) into `check(answer, ...) -> Grade`."""

    def wrap(check: Callable[..., str]) -> Callable[..., Grade]:
        @functools.wraps(check)
        def run(answer, *args, **kwargs) -> Grade:
            try:
                # the grader's random numbers come from seed 0 and leave the reader's global generator as it was
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(0)
                    confirmed = check(answer, *args, **kwargs)
            except NotImplementedError:
                return Grade(exercise, False, False, f"⏳ Exercise {exercise}: not attempted yet. Replace "
                             "`raise NotImplementedError` with your code, then run the cell again.")
            except Hint as hint:
                return Grade(exercise, False, True, f"❌ Exercise {exercise}, not yet: {hint}")
            except Exception as err:  # the learner's code itself failed: say where, not a traceback
                return Grade(exercise, False, True, f"❌ Exercise {exercise}: your code raised "
                             f"{type(err).__name__}: {err}")
            return Grade(exercise, True, True, f"✅ Exercise {exercise} passed: {confirmed}")

        return run

    return wrap


def expect_tensor(got, what: str) -> Tensor:
    """`got` must be a tensor; returns it."""
    if not isinstance(got, Tensor):
        raise Hint(f"{what} should be a torch.Tensor, got {type(got).__name__}.")
    return got


def expect_shape(got, shape: tuple[int, ...], what: str) -> Tensor:
    """`got` must be a tensor of exactly `shape`; returns it."""
    got = expect_tensor(got, what)
    if tuple(got.shape) != tuple(shape):
        raise Hint(f"{what} should have shape {tuple(shape)}, got {tuple(got.shape)}.")
    return got


def expect_close(got, expected: Tensor, what: str, atol: float = 1e-5, why: str = "") -> Tensor:
    """`got` must have `expected`'s shape and values (to `atol`); `why` names the usual cause of a mismatch."""
    got = expect_shape(got, tuple(expected.shape), what)
    if got.isnan().any():
        raise Hint(f"{what} contains NaN. {why}".strip())
    if not torch.allclose(got.to(expected.dtype), expected, atol=atol, rtol=0):
        worst = (got.to(expected.dtype) - expected).abs().max().item()
        raise Hint(f"{what} is off by up to {worst:.3g}. {why}".strip())
    return got


def expect_equal(got, expected, what: str, why: str = ""):
    """`got` must equal `expected` (tensors: same shape and values; anything else: ==)."""
    if isinstance(expected, Tensor):
        got = expect_shape(got, tuple(expected.shape), what)
        if not torch.equal(got, expected):
            raise Hint(f"{what} is not right. {why}".strip())
    elif got != expected:
        raise Hint(f"{what} should be {expected!r}, got {got!r}. {why}".strip())
    return got
