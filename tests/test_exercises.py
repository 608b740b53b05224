"""Every grader passes its solution, fails each typical wrong answer with a helpful hint, and treats the notebooks'
placeholder as "not attempted yet"; every notebook ships its exercises unsolved and calls each of its graders."""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path

import pytest

from attention_lib import exercises
from attention_lib.exercises import Grade, Hint, grader

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the solutions/ folder is not part of the installed package

GRADERS = exercises.graders()


def solutions_of(name: str):
    return importlib.import_module(f"solutions.nb{name.split('_')[1]}")


def wrong_answers():
    return [(name, i) for name in GRADERS for i in range(len(solutions_of(name).WRONG.get(name, [])))]


@pytest.mark.parametrize("name", GRADERS)
def test_the_solution_passes(name):
    grade = getattr(exercises, name)(solutions_of(name).SOLUTIONS[name])
    assert isinstance(grade, Grade) and grade.passed and grade.attempted, grade.message
    assert grade.message.startswith("✅")


@pytest.mark.parametrize("name", GRADERS)
def test_each_grader_has_at_least_one_wrong_answer_that_fails(name):
    assert solutions_of(name).WRONG.get(name), f"{name} has no wrong answer in solutions/: it could be vacuous"


@pytest.mark.parametrize("name,index", wrong_answers())
def test_a_typical_wrong_answer_fails_with_its_hint(name, index):
    answer, fragment = solutions_of(name).WRONG[name][index]
    grade = getattr(exercises, name)(answer)
    assert not grade.passed and grade.attempted, grade.message
    assert fragment in grade.message, f"the hint {grade.message!r} does not mention {fragment!r}"


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
    broken = check(lambda n: n / 0)
    assert not broken and "your code raised ZeroDivisionError" in broken.message
    with pytest.raises(AttributeError, match="there is no exercise"):
        exercises.check_99_7  # noqa: B018


def test_00_3_accepts_either_choice_for_the_rows_of_padded_queries():
    """The task says a padded query's row may follow the rule of a real row or see nothing; the grader agrees."""
    nb00 = solutions_of("check_00_3")
    assert exercises.check_00_3(nb00.decoder_mask).passed
    assert exercises.check_00_3(nb00.decoder_mask_hiding_padded_rows).passed
