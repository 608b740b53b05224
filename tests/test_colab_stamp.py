"""The Colab stamp of scripts/colab.py (`make colab`): every notebook opens with the badge and the setup cell of the
repository named in pyproject.toml, the README's table has the badges, and a stale copy is caught."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("colab_stamp", ROOT / "scripts" / "colab.py")
colab = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(colab)

NOTEBOOKS = colab.notebooks(ROOT)
TWINS = colab.twins(ROOT)
FORK = "https://github.com/someone-else/attention-fork"
STALE = "notebooks/{} lacks the current Colab badge or setup cell: run `make colab`"


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """pyproject.toml, README.md and the notebooks, copied."""
    for name in ("pyproject.toml", "README.md", "README.zh.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks")
    return tmp_path


def setup_cell(nb) -> nbformat.NotebookNode:
    return next(c for c in nb.cells if c.cell_type == "code")


def test_every_notebook_and_the_readme_carry_the_current_stamp():
    assert len(NOTEBOOKS) >= 7
    assert colab.run(ROOT, check=True) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_notebook_opens_with_the_badge_and_the_setup_cell(path):
    nb = nbformat.read(path, as_version=4)
    repo = colab.repository(ROOT)
    title = next(c for c in nb.cells if c.cell_type == "markdown")
    assert colab.badge(repo, path.name) in title.source.split("\n\n")[:2]
    assert colab.colab_link(repo, path.name) in title.source
    setup = setup_cell(nb)
    assert "colab-setup" in setup.metadata["tags"] and setup.source == colab.setup_source(repo)
    assert setup.outputs == []  # a normal run prints nothing, so nbval stays strict


@pytest.mark.parametrize("path", TWINS, ids=lambda p: "zh-" + p.stem)
def test_a_chinese_notebook_opens_with_its_own_badge_and_its_setup_cell(path):
    nb = nbformat.read(path, as_version=4)
    repo = colab.repository(ROOT)
    title = next(c for c in nb.cells if c.cell_type == "markdown")
    assert colab.badge(repo, "zh/" + path.name) in title.source.split("\n\n")[:2]
    assert colab.colab_link(repo, path.name) not in title.source  # not the English notebook's
    setup = setup_cell(nb)
    assert setup.source == colab.setup_source(repo, chinese=True) and setup.outputs == []
    assert "# Colab 只能通过它的自定义小部件管理器" in setup.source  # the same code, its comments in Chinese


def test_the_badge_links_to_the_notebook_in_colab():
    assert colab.badge("https://github.com/o/r", "00_x.ipynb") == (
        "[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
        "(https://colab.research.google.com/github/o/r/blob/main/notebooks/00_x.ipynb)"
    )


def test_the_setup_cell_reads_in_a_glance_and_keeps_its_order():
    source = colab.setup_source("https://github.com/o/r")
    lines = source.splitlines()
    assert len(lines) <= 12
    seed, install, widgets = (next(i for i, line in enumerate(lines) if key in line)
                              for key in ("manual_seed", "%pip install", "enable_custom_widget_manager"))  # fmt: skip
    assert seed < install < widgets  # seeds before anything else can draw a random number
    pip = lines[install]
    assert "ATTENTION_LIB_SOURCE" in pip and "attention-lib[colab] @ git+https://github.com/o/r" in pip
    assert not re.search(r"torch|ipywidgets|--upgrade|-U\b", pip.split("#")[0])


def test_a_stale_notebook_and_a_new_url_are_caught_then_stamped(copy):
    path = copy / "notebooks" / NOTEBOOKS[2].name
    nb = nbformat.read(path, as_version=4)
    ids = [c.id for c in nb.cells]
    setup_cell(nb).source = setup_cell(nb).source.replace("manual_seed(0)", "manual_seed(1)")
    nbformat.write(nb, path)
    assert colab.run(copy, check=True) == [STALE.format(path.name)]

    # Publishing a fork: change the URL in one place, run the command.
    pyproject = copy / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(colab.repository(ROOT), FORK))
    problems = colab.run(copy, check=True)
    total = len(NOTEBOOKS) + len(TWINS) + 2  # the notebooks, their Chinese twins, the two READMEs
    assert len(problems) == total and problems[-2].startswith("README.md") and problems[-1].startswith("README.zh.md")
    assert len(colab.run(copy)) == total
    assert colab.run(copy, check=True) == [] and colab.run(copy) == []  # stamped, and a second run changes nothing
    fresh = nbformat.read(path, as_version=4)
    assert [c.id for c in fresh.cells] == ids  # cell ids stay put
    assert "git+" + FORK in setup_cell(fresh).source
    assert "colab.research.google.com/github/someone-else/attention-fork/blob/main" in fresh.cells[0].source
    readme = (copy / "README.md").read_text()
    assert readme.count("github/someone-else/attention-fork/blob/main/notebooks/") == len(NOTEBOOKS)
    assert "colab.research.google.com/github/attention-from-scratch" not in readme
    chinese = (copy / "README.zh.md").read_text(encoding="utf-8")
    assert chinese.count("github/someone-else/attention-fork/blob/main/notebooks/zh/") == len(TWINS)


def test_a_notebook_added_later_gets_the_stamp(copy):
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# 99 · A new topic\n\nWhat we build.", id="title"),
        nbformat.v4.new_code_cell("#| default_exp topic", id="exp"),
        nbformat.v4.new_code_cell("import torch", id="imports"),
    ])  # fmt: skip
    nbformat.write(nb, copy / "notebooks" / "99_topic.ipynb")
    assert colab.run(copy, check=True) == [STALE.format("99_topic.ipynb")]
    colab.run(copy)
    stamped = nbformat.read(copy / "notebooks" / "99_topic.ipynb", as_version=4)
    assert [c.id for c in stamped.cells] == ["title", "colab-setup", "exp", "imports"]
    assert stamped.cells[0].source.split("\n\n")[0] == "# 99 · A new topic"
    assert "99_topic.ipynb" in stamped.cells[0].source.split("\n\n")[1]


def test_the_setup_cell_survives_the_readmes_jupytext_round_trip(copy):
    """README: edit a notebook as text with jupytext --to py:percent, back with --update. The indented %pip line
    must come back as a magic, not as a comment (pyproject.toml: [tool.jupytext] comment_magics = false)."""
    jupytext = Path(sys.executable).parent / "jupytext"
    if not jupytext.exists():
        pytest.skip("jupytext is not installed (test extra)")
    path = copy / "notebooks" / NOTEBOOKS[0].name
    before = path.read_bytes()
    subprocess.run([str(jupytext), "-q", "--to", "py:percent", str(path)], check=True, cwd=copy)
    text = path.with_suffix(".py").read_text()
    assert '\n    %pip install -q "' in text
    back = [str(jupytext), "-q", "--update", "--to", "ipynb", str(path.with_suffix(".py"))]
    subprocess.run(back, check=True, cwd=copy)
    assert json.loads(path.read_bytes()) == json.loads(before)
