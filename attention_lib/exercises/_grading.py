"""The machinery behind the graders: run a learner's answer, and say in a sentence what is wrong with it.

A grader is a function `check_NN_k(answer)` decorated with `@grader("NN.k")`. Its body builds its own inputs (in the
dtype `dtype()`, float32 unless the grader is called with `dtype=torch.float64`), computes what a right answer gives
before any of the learner's code runs, calls the learner's code only through `call(...)`, and raises
`Hint("...")` at the first thing that is wrong; the decorator turns the outcome into a `Grade`, which a notebook
shows as one short message. An answer that still raises `NotImplementedError` (the placeholder the notebooks ship
with) is "not attempted yet", which never fails a notebook.

`call` is what makes a grader fair to the learner: an exception raised inside the learner's code is reported as
"your code raised ...", an exception anywhere else is the grader's own bug and propagates (a test catches it); and
an answer that changes one of its inputs in place (a tensor, or a module's weights) gets a hint that says so.
The grader's random numbers come from seed 0 inside a forked generator: the reader's generator is left as it was.
"""

from __future__ import annotations

import contextvars
import copy
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

__all__ = ["Grade", "Hint", "grader", "call", "detached", "dtype", "tolerance", "close", "fmt", "float32_only",
           "requiring_grad", "expect_tensor", "expect_shape", "expect_close", "expect_precision", "expect_gradients",
           "expect_equal", "expect_bool_mask", "first_wrong_row"]


class Hint(Exception):
    """What is wrong with an answer, and how to see it for yourself: raised by a grader's checks."""


class _LearnerRaised(Exception):
    """The learner's code raised `error` (wrapped by `call`, reported by the decorator)."""

    def __init__(self, error: BaseException):
        super().__init__(error)
        self.error = error


class _NotAttempted(Exception):
    """The learner's code raised NotImplementedError: the notebook's placeholder."""


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


_DTYPE: contextvars.ContextVar[torch.dtype] = contextvars.ContextVar("grading_dtype", default=torch.float32)


def dtype() -> torch.dtype:
    """The floating-point dtype of the grader's inputs (float32 unless the grader was called with dtype=...)."""
    return _DTYPE.get()


def grader(exercise: str) -> Callable[[Callable[..., str]], Callable[..., Grade]]:
    """Turn `check(answer, ...) -> str` (what a right answer has shown) into `check(answer, ..., dtype=float32)
    -> Grade`."""

    def wrap(check: Callable[..., str]) -> Callable[..., Grade]:
        @functools.wraps(check)
        def run(answer, *args, dtype: torch.dtype = torch.float32, **kwargs) -> Grade:
            token = _DTYPE.set(dtype)
            try:
                # the grader's random numbers come from seed 0 and leave the reader's global generator as it was
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(0)
                    confirmed = check(answer, *args, **kwargs)
            except _NotAttempted:
                return Grade(exercise, False, False, f"⏳ Exercise {exercise}: not attempted yet. Replace "
                             "`raise NotImplementedError` with your code, then run the cell again.")
            except Hint as hint:
                return Grade(exercise, False, True, f"❌ Exercise {exercise}, not yet: {hint}")
            except _LearnerRaised as raised:  # the learner's code itself failed: say what, not a traceback
                err = raised.error
                return Grade(exercise, False, True, f"❌ Exercise {exercise}: your code raised "
                             f"{type(err).__name__}: {err}")
            finally:
                _DTYPE.reset(token)
            return Grade(exercise, True, True, f"✅ Exercise {exercise} passed: {confirmed}")

        return run

    return wrap


# --- calling the learner's code ------------------------------------------------------------------------------------


_PLAIN = (int, float, complex, str, bytes, bool, type(None))


def _snapshot(value):
    """A copy of everything in `value` that an answer could change in place: tensors, the state and the train/eval
    mode of modules, and the plain values inside lists, tuples and dicts (a list of lengths sorted in place)."""
    if isinstance(value, Tensor):
        return value.detach().clone()
    if isinstance(value, nn.Module):
        state = {name: t.detach().clone() for name, t in value.state_dict(keep_vars=True).items()}
        return state, [m.training for m in value.modules()]
    if isinstance(value, list | tuple):
        return [_snapshot(v) for v in value]
    if isinstance(value, dict):
        return {k: _snapshot(v) for k, v in value.items()}
    if isinstance(value, _PLAIN):
        return value
    return None


def _changed(value, before) -> bool:
    if isinstance(value, Tensor):
        now = value.detach()
        if now.shape != before.shape or now.dtype != before.dtype:
            return True
        if now.is_floating_point() or now.is_complex():  # a NaN left where it was is no change
            return not bool(((now == before) | (now.isnan() & before.isnan())).all())
        return not torch.equal(now, before)
    if isinstance(value, nn.Module):
        state, modes = before
        now = value.state_dict(keep_vars=True)
        if now.keys() != state.keys() or any(_changed(now[k], state[k]) for k in now):
            return True
        return bool(modes) and [m.training for m in value.modules()] != modes  # modes [] : the weights only
    if isinstance(value, list | tuple):
        return len(value) != len(before) or any(_changed(v, b) for v, b in zip(value, before, strict=False))
    if isinstance(value, dict):
        return value.keys() != before.keys() or any(_changed(value[k], before[k]) for k in value)
    if isinstance(value, _PLAIN):
        return value != before and not (value != value and before != before)  # NaN stays NaN
    return False


def _names(fn, args: tuple, kwargs: dict) -> list[str]:
    """The learner's names for the arguments, where their signature tells them."""
    try:
        bound = inspect.signature(fn).bind_partial(*args, **kwargs)
        return list(bound.arguments)
    except (TypeError, ValueError):
        return [f"argument {i + 1}" for i in range(len(args))] + list(kwargs)


def call(fn, *args, **kwargs):
    """Run the learner's `fn(*args, **kwargs)` and return its result.

    An exception raised inside it is the learner's ("your code raised ..."), except a `Hint` (a grader's refusal
    hook fires inside the learner's code) and NotImplementedError ("not attempted yet"). Afterwards every tensor
    argument and every module argument's weights must be as they were: an answer that changes its inputs in place
    gets a hint naming the input."""
    values = list(args) + list(kwargs.values())
    before = [_snapshot(v) for v in values]
    try:
        result = fn(*args, **kwargs)
    except (Hint, _LearnerRaised, _NotAttempted):
        raise
    except NotImplementedError as err:
        if not err.args:  # the placeholder's bare `raise NotImplementedError`; torch's own carry a message
            raise _NotAttempted from None
        raise _LearnerRaised(err) from err
    except Exception as err:
        raise _LearnerRaised(err) from err
    names = _names(fn, args, kwargs)
    for i, (value, snap) in enumerate(zip(values, before, strict=True)):
        if snap is not None and _changed(value, snap):
            name = names[i] if i < len(names) else f"argument {i + 1}"
            what = "its input"
            if isinstance(value, nn.Module):
                what = "the train/eval mode of" if _changed(value, (snap[0], [])) is False else "the weights of"
            raise Hint(f"your code changed {what} `{name}` in place. The caller still needs it as it was: work on a "
                       "copy, or use the out-of-place operation (masked_fill rather than masked_fill_, x = x + y "
                       "rather than x += y, sorted(xs) rather than xs.sort()).")
    return result


def detached(module: nn.Module) -> nn.Module:
    """A deep copy of `module` for the grader's reference: whatever the answer does to the original, not this."""
    return copy.deepcopy(module)


# --- comparing -----------------------------------------------------------------------------------------------------


def tolerance(*tensors: Tensor) -> tuple[float, float]:
    """(atol, rtol) for comparing `tensors`, from the least precise of their dtypes and the grading dtype: float64
    1e-9 / 1e-7, float32 (and anything less precise: an answer in half precision is held to float32's tolerance, not
    given a looser one) 2e-5 / 1e-4."""
    bits = min((torch.finfo(t.dtype).bits for t in tensors if t.is_floating_point()), default=32)
    bits = min(bits, torch.finfo(dtype()).bits)  # inputs in float32: no answer is held to more than float32 gives
    return (1e-9, 1e-7) if bits >= 64 else (2e-5, 1e-4)


def close(got, expected: Tensor, atol: float | None = None) -> bool:
    """Whether `got` is a tensor of `expected`'s shape and values, compared in float64 with `tolerance` (NaN where
    NaN is expected counts as equal). Never raises: a grader asks it about wrong answers too."""
    if not isinstance(got, Tensor) or got.layout != torch.strided or got.is_nested or got.device.type != "cpu":
        return False
    if tuple(got.shape) != tuple(expected.shape) or got.is_complex() != expected.is_complex():
        return False
    a_tol, r_tol = tolerance(got, expected)
    a_tol = a_tol if atol is None else atol
    return torch.allclose(got.detach().to(torch.float64 if not got.is_complex() else torch.complex128),
                          expected.detach().to(torch.float64 if not expected.is_complex() else torch.complex128),
                          atol=a_tol, rtol=r_tol, equal_nan=True)


def fmt(t) -> str:
    """A tensor's values, rounded to 3 significant digits, as a short list (for messages)."""
    if isinstance(t, Tensor):
        t = t.detach().double().tolist()
    if isinstance(t, list):
        return "[" + ", ".join(fmt(v) for v in t) + "]"
    return f"{t:.3g}" if isinstance(t, float) else repr(t)


def expect_tensor(got, what: str) -> Tensor:
    """`got` must be an ordinary tensor (dense, on the CPU, not in half precision); returns it."""
    if not isinstance(got, Tensor):
        raise Hint(f"{what} should be a torch.Tensor, got {type(got).__name__}.")
    if got.layout != torch.strided or got.is_nested or got.device.type != "cpu":
        raise Hint(f"{what} should be an ordinary dense tensor on the CPU, like the inputs; got layout {got.layout} "
                   f"on {got.device}.")
    if got.is_floating_point() and torch.finfo(got.dtype).bits < 32:
        raise Hint(f"{what} is in {got.dtype}, which keeps about 3 significant digits: compute in the dtype of the "
                   f"inputs ({dtype()}) and return that.")
    return got


def expect_shape(got, shape: tuple[int, ...], what: str) -> Tensor:
    """`got` must be a tensor of exactly `shape`; returns it."""
    got = expect_tensor(got, what)
    if tuple(got.shape) != tuple(shape):
        raise Hint(f"{what} should have shape {tuple(shape)}, got {tuple(got.shape)}.")
    return got


def expect_bool_mask(got, shape: tuple[int, ...], what: str, example: str) -> Tensor:
    """`got` must be a bool mask (True = may attend) of exactly `shape`; returns it. `example` is the comparison that
    builds the right mask, quoted when the dtype is wrong; an additive mask (0 and -inf) is named as such."""
    got = expect_tensor(got, what)
    if got.dtype != torch.bool:
        additive = got.is_floating_point() and bool(got.isinf().any())
        raise Hint(f"a mask is a bool tensor (True = may attend), got dtype {got.dtype}"
                   + (": 0 and -inf make an additive mask, a bias to add to the scores. " if additive else ". ")
                   + f"Build it from comparisons, such as {example}.")
    return expect_shape(got, shape, what)


def first_wrong_row(got: Tensor, expected: Tensor, where: str) -> str:
    """For two different bool (S, S) masks: the first query whose row differs, as the keys it should see and sees."""

    def keys(mask: Tensor, i: int) -> str:
        return "{" + ", ".join(str(j) for j in mask[i].nonzero().flatten().tolist()) + "}"

    r = int((got != expected).any(dim=-1).nonzero()[0])
    return f"{where}: token {r} should see tokens {keys(expected, r)}, yours sees {keys(got, r)}"


def expect_close(got, expected: Tensor, what: str, atol: float | None = None, why: str = "") -> Tensor:
    """`got` must have `expected`'s shape and values (`close`); `why` names the usual cause of a mismatch."""
    got = expect_shape(got, tuple(expected.shape), what)
    if not got.is_floating_point() and not got.is_complex():
        got = got.double()
    if bool(got.isnan().any()) and not bool(expected.isnan().any()):
        raise Hint(f"{what} contains NaN. {why}".strip())
    if not close(got, expected, atol):
        expect_precision(got, expected, what)
        worst = (got.detach().double() - expected.detach().double()).abs().nan_to_num(float("inf")).max().item()
        raise Hint(f"{what} is off by up to {worst:.3g}. {why}".strip())
    return got


def float32_only(got, expected: Tensor) -> bool:
    """Whether `got` misses `expected` at float64's tolerance but meets float32's: an answer computed in float32
    somewhere (a tensor made without dtype=..., a .float()) while the grader runs in float64."""
    if dtype() != torch.float64 or not isinstance(got, Tensor) or close(got, expected):
        return False
    through_float32 = got.dtype == torch.float32 or torch.equal(got.detach().double(),
                                                                  got.detach().float().double())
    return through_float32 and close(got.float(), expected.float())  # its values are float32 numbers, and right


def expect_precision(got, expected: Tensor, what: str) -> None:
    """A Hint when `got` is right only to float32's precision in a float64 grading (see `float32_only`)."""
    if float32_only(got, expected):
        worst = (got.detach().double() - expected.detach().double()).abs().max().item()
        raise Hint(f"{what} is right to float32 precision only (off by up to {worst:.2g} in float64): part of your "
                   "computation runs in float32. Make new tensors with dtype=x.dtype (or torch.*_like) and do not "
                   "call .float(), so that the inputs' dtype is kept.")


def requiring_grad(t: Tensor) -> tuple[Tensor, Tensor]:
    """(leaf, given): a leaf that requires grad, and what the answer gets, `leaf * 1`, a tensor in a graph as the
    inputs of a layer are (an in-place change of it is then allowed by autograd and seen by `call`)."""
    leaf = t.detach().clone().requires_grad_()
    return leaf, leaf * 1


def expect_gradients(got: Tensor, leaves: list[Tensor], expected: list[Tensor], probe: Tensor, what: str) -> None:
    """The gradients of sum(got · probe) with respect to `leaves` must be finite and equal `expected` (the same
    gradients of the reference, computed before the answer ran); an output without a gradient gets a hint."""
    if not got.requires_grad:
        raise Hint(f"{what} carries no gradient: compute it from the inputs with torch operations (no .detach(), "
                   ".numpy() or torch.no_grad()), so that a model can learn through it.")
    grads = torch.autograd.grad((got * probe.to(got.dtype)).sum(), leaves, allow_unused=True)
    for leaf, grad, want in zip(leaves, grads, expected, strict=True):
        grad = torch.zeros_like(leaf) if grad is None else grad
        if not bool(torch.isfinite(grad).all()) and bool(torch.isfinite(want).all()):
            raise Hint(f"{what} is right, but its gradient has NaN or inf: some step of your computation is not "
                       "finite on the way back (a softmax over -inf only, a NaN replaced after the fact).")
        if not close(grad, want):
            worst = (grad.double() - want.double()).abs().max().item()
            raise Hint(f"{what} is right, but its gradient is off by up to {worst:.3g}: part of your computation "
                       "is cut from the graph (detach, .data, torch.no_grad) or differs where it is differentiated.")


def expect_equal(got, expected, what: str, why: str = ""):
    """`got` must equal `expected` (tensors: same shape and values; anything else: ==)."""
    if isinstance(expected, Tensor):
        got = expect_shape(got, tuple(expected.shape), what)
        if not torch.equal(got, expected):
            raise Hint(f"{what} is not right. {why}".strip())
    elif got != expected:
        raise Hint(f"{what} should be {expected!r}, got {got!r}. {why}".strip())
    return got
