"""Every grader passes its solution and fails each wrong answer of the bank in `solutions/` with the hint that names
its mistake, in float32 and in float64; every hint of every grader is reached by some wrong answer; a grader blames
only the learner's code, tells an answer that changes its inputs, and leaves the random generator and the package's
globals alone; the notebooks' placeholder is "not attempted yet", and every notebook ships its exercises unsolved and
calls each of its graders."""

from __future__ import annotations

import ast
import importlib
import json
import re
import sys
from pathlib import Path

import pytest
import torch

from attention_lib import exercises
from attention_lib.exercises import Grade, Hint, grader
from attention_lib.exercises._grading import call

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the solutions/ folder is not part of the installed package

GRADERS = exercises.graders()
DTYPES = [pytest.param(torch.float32, id="float32"), pytest.param(torch.float64, id="float64")]
MORE_WRONG = 4  # wrong answers per exercise at least: the holes a learner finds, and more plausible mistakes


def solutions_of(name: str):
    return importlib.import_module(f"solutions.nb{name.split('_')[1]}")


def wrong_answers():
    return [(name, i) for name in GRADERS for i in range(len(solutions_of(name).WRONG.get(name, [])))]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", GRADERS)
def test_the_solution_passes(name, dtype):
    grade = getattr(exercises, name)(solutions_of(name).SOLUTIONS[name], dtype=dtype)
    assert isinstance(grade, Grade) and grade.passed and grade.attempted, grade.message
    assert grade.message.startswith("✅")


@pytest.mark.parametrize("name", GRADERS)
def test_each_grader_has_a_bank_of_wrong_answers(name):
    wrong = solutions_of(name).WRONG.get(name, [])
    assert len(wrong) >= MORE_WRONG, f"{name} has {len(wrong)} wrong answers in solutions/, fewer than {MORE_WRONG}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name,index", wrong_answers())
def test_a_typical_wrong_answer_fails_with_its_hint(name, index, dtype):
    answer, fragment = solutions_of(name).WRONG[name][index]
    grade = getattr(exercises, name)(answer, dtype=dtype)
    assert not grade.passed and grade.attempted, grade.message
    assert fragment in grade.message, f"the hint {grade.message!r} does not mention {fragment!r}"


def hint_lines(path: Path) -> set[int]:
    """The lines of `path` that raise a Hint written in that file (not the generic ones of _grading)."""
    lines = set()
    for node in ast.walk(ast.parse(path.read_text())):
        exc = getattr(node, "exc", None)
        if isinstance(node, ast.Raise) and isinstance(exc, ast.Call) and getattr(exc.func, "id", "") == "Hint":
            lines.add(node.lineno)
    return lines


@pytest.mark.parametrize("nn", sorted({name.split("_")[1] for name in GRADERS}))
def test_every_hint_is_reached_by_a_wrong_answer_of_the_bank(nn):
    """A hint that no wrong answer reaches is a defect: it cannot fire, or nothing shows that it is right."""
    module = importlib.import_module(f"attention_lib.exercises.nb{nn}")
    path = Path(module.__file__)
    reached: set[int] = set()

    def tracer(frame, event, arg):
        if frame.f_code.co_filename != str(path):
            return None
        if event == "line":
            reached.add(frame.f_lineno)
        return tracer

    names = [name for name in GRADERS if name.split("_")[1] == nn]
    sys.settrace(tracer)
    try:
        for name in names:
            for answer, _ in solutions_of(name).WRONG.get(name, []):
                getattr(exercises, name)(answer)
    finally:
        sys.settrace(None)
    source = path.read_text().splitlines()
    missing = sorted(hint_lines(path) - reached)
    assert not missing, "hints no wrong answer reaches:\n" + "\n".join(f"{path.name}:{n}: {source[n - 1].strip()}"
                                                                        for n in missing)


def package_state() -> dict:
    """What a grader must leave alone: the random generator, and every global of every loaded attention_lib module
    (by identity), with the contents of the registries."""
    from attention_lib import functional

    state = {"rng": torch.random.get_rng_state(), "impls": dict(functional._ATTENTION_IMPLS),
             "no-dropout": set(functional._WITHOUT_DROPOUT), "sdpa": torch.nn.functional.scaled_dot_product_attention}
    for name, module in list(sys.modules.items()):
        if name.startswith("attention_lib") and module is not None:
            state[name] = {k: id(v) for k, v in vars(module).items() if not k.startswith("__")}
    if "attention_lib.viz.views" in sys.modules:
        state["kinds"] = dict(sys.modules["attention_lib.viz.views"].KINDS)
    return state


@pytest.mark.parametrize("name", GRADERS)
def test_a_grader_leaves_the_random_generator_and_the_package_alone(name):
    grade = getattr(exercises, name)
    grade(solutions_of(name).SOLUTIONS[name])  # the first call may import modules: compare from the second on
    torch.manual_seed(1234)
    before = package_state()
    for answer in [solutions_of(name).SOLUTIONS[name]] + [a for a, _ in solutions_of(name).WRONG.get(name, [])]:
        grade(answer)
    after = package_state()
    assert torch.equal(before.pop("rng"), after.pop("rng")), "a grader changed the global random generator"
    assert before == after, "a grader changed a global of attention_lib"


@pytest.mark.parametrize("name", GRADERS)
def test_the_placeholder_is_not_attempted_yet(name):
    def placeholder(*args, **kwargs):
        raise NotImplementedError

    grade = getattr(exercises, name)(placeholder)
    assert not grade.passed and not grade.attempted and "not attempted yet" in grade.message


def notebook_cells(nn: str) -> list[dict]:
    (path,) = (ROOT / "notebooks").glob(f"{nn}_*.ipynb")
    return json.loads(path.read_text())["cells"]


@pytest.mark.parametrize("nn", sorted({name.split("_")[1] for name in GRADERS}))
def test_the_notebook_ships_its_exercises_unsolved_and_calls_every_grader(nn):
    mine = [name for name in GRADERS if name.split("_")[1] == nn]
    assert 2 <= len(mine) <= 4, f"notebook {nn} has {len(mine)} exercises; the series asks for 2 to 4"
    for name in mine:
        code = [c for c in notebook_cells(nn) if c["cell_type"] == "code"]
        calls = [c for c in code if re.search(rf"\b{name}\(", "".join(c["source"]))]
        assert calls, f"notebook {nn} never calls {name}"
        shown = "".join(
            "".join(out.get("data", {}).get("text/plain", "")) + "".join(out.get("text", ""))
            for cell in calls
            for out in cell.get("outputs", [])
        )
        assert f"Exercise {nn}." in shown and "not attempted yet" in shown, f"{name}'s cell should ship unsolved"


def test_the_grading_machinery():
    @grader("99.1")
    def check(answer):
        if answer(2) != 4:
            raise Hint("square the number")
        return "2 squared is 4"

    assert check(lambda n: n * n).passed and "2 squared is 4" in repr(check(lambda n: n * n))
    wrong = check(lambda n: n + 3)
    assert not wrong and wrong.attempted and "square the number" in wrong.message
    with pytest.raises(ZeroDivisionError):  # without `call`, an error is the grader's own: never blamed on the learner
        check(lambda n: n / 0)
    with pytest.raises(AttributeError, match="there is no exercise"):
        exercises.check_99_7  # noqa: B018


def test_only_the_learners_code_is_blamed_and_changed_inputs_are_named():
    @grader("99.2")
    def check(answer):
        x = torch.arange(4.0)
        got = call(answer, x)
        return f"{got.tolist()}"

    assert "your code raised ZeroDivisionError" in check(lambda x: 1 / 0).message
    assert "your code raised NotImplementedError: not for tensors" in check(lambda x: _raise("not for tensors")).message
    assert not check(lambda x: _raise()).attempted  # the bare placeholder

    def in_place(scores):
        return scores.mul_(2)

    assert "changed its input `scores` in place" in check(in_place).message

    @grader("99.3")
    def buggy(answer):
        call(answer, torch.ones(2))
        return torch.ones(2) @ torch.ones(3)  # the grader's own mistake

    with pytest.raises(RuntimeError):
        buggy(lambda x: x)

    @grader("99.4")
    def weights(answer):
        layer = torch.nn.Linear(2, 2)
        call(answer, layer)
        return "ok"

    def zeroes(layer):
        with torch.no_grad():
            layer.weight.zero_()

    assert "changed the weights of `layer`" in weights(zeroes).message


def _raise(message: str | None = None):
    raise NotImplementedError(*(() if message is None else (message,)))


def test_00_3_accepts_either_choice_for_the_rows_of_padded_queries():
    """The task says a padded query's row may follow the rule of a real row or see nothing; the grader agrees."""
    nb00 = solutions_of("check_00_3")
    assert exercises.check_00_3(nb00.decoder_mask).passed
    assert exercises.check_00_3(nb00.decoder_mask_hiding_padded_rows).passed


ODD = {  # what a learner's answer may return instead of an ordinary tensor
    "on another device": lambda t: t.to("meta"),
    "sparse": lambda t: t.to_sparse() if t.dim() > 0 else t.to("meta"),
    "in half precision": lambda t: t.half() if t.is_floating_point() else t.to("meta"),
}


def _odd(result, how):
    """`result` with every tensor in it made odd by `how`; None when there is no tensor to change."""
    if isinstance(result, torch.Tensor):
        return how(result.detach())
    if isinstance(result, tuple | list):
        parts = [_odd(r, how) for r in result]
        if all(p is None for p in parts):
            return None
        return type(result)(p if p is not None else r for p, r in zip(parts, result, strict=True))
    return None


@pytest.mark.parametrize("how", sorted(ODD))
@pytest.mark.parametrize("name", GRADERS)
def test_an_odd_tensor_gets_a_message_never_a_traceback(name, how):
    solution = solutions_of(name).SOLUTIONS[name]
    changed = []

    def answer(*args, **kwargs):
        result = solution(*args, **kwargs)
        odd = _odd(result, ODD[how])
        changed.append(odd is not None)
        return result if odd is None else odd

    grade = getattr(exercises, name)(answer)  # a traceback out of the grader fails this test
    assert isinstance(grade, Grade)
    if any(changed):
        assert not grade.passed, f"{name} accepted an answer {how}: {grade.message}"


@pytest.mark.parametrize("name", ["check_00_2", "check_04_1", "check_06_3"])
def test_an_answer_computed_in_float32_is_told_so_in_a_float64_grading(name):
    solution = solutions_of(name).SOLUTIONS[name]

    def in_float32(*args):
        return solution(*[a.float() if isinstance(a, torch.Tensor) else a for a in args]).double()

    assert getattr(exercises, name)(in_float32).passed  # float32 grading: right
    grade = getattr(exercises, name)(in_float32, dtype=torch.float64)
    assert not grade.passed and "right to float32 precision only" in grade.message, grade.message

    def off_by_a_little(*args):  # a float64 answer off by 1e-5 is not a float32 answer
        return solution(*args) + 1e-5

    grade = getattr(exercises, name)(off_by_a_little, dtype=torch.float64)
    assert not grade.passed and "float32 precision" not in grade.message, grade.message
