"""Graders for the exercises at the end of every notebook.

    from attention_lib.exercises import check_00_1
    check_00_1(my_function)   # as the last line of a cell: says what is wrong, or that it is right

The graders of notebook NN live in `attention_lib/exercises/nbNN.py` and are found by name, so a notebook's
exercises need no change here. These modules are written by hand (they are not exported from the notebooks);
the solutions are kept apart, in the repository's `solutions/` folder.
"""

from __future__ import annotations

import importlib
import pkgutil
import re

from ._grading import Grade, Hint, grader

__all__ = ["Grade", "Hint", "grader", "graders"]


def __getattr__(name: str):
    match = re.fullmatch(r"check_(\d{2})_\d+", name)
    if match is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        module = importlib.import_module(f".nb{match[1]}", __name__)
        return getattr(module, name)
    except (ModuleNotFoundError, AttributeError):
        raise AttributeError(f"there is no exercise {name!r}; the graders are {graders()}") from None


def graders() -> list[str]:
    """The names of every grader, `check_NN_k`, in notebook order."""
    names = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if re.fullmatch(r"nb\d{2}", info.name):
            module = importlib.import_module(f".{info.name}", __name__)
            names += sorted(n for n in vars(module) if re.fullmatch(r"check_\d{2}_\d+", n))
    return names
