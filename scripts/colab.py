"""Stamp the "Open in Colab" badge and the setup cell into every notebook, and the badges into the README's table.

    python scripts/colab.py          # write the stamps (make colab)
    python scripts/colab.py --check  # exit 1 if a notebook or the README lacks the current stamp

Everything derives from one address, pyproject.toml's [project.urls] Repository: a fork changes it there and runs
`make colab`. In each notebook the stamp is
- the badge, a paragraph of its own right after the title of the first markdown cell, linking to the notebook in
  Colab (https://colab.research.google.com/github/<owner>/<repo>/blob/main/notebooks/<file>; the Chinese edition's
  notebooks/zh/<file> link to themselves);
- the setup cell, the first code cell, tagged "colab-setup" (cell metadata) so that a new stamp replaces it:
  seeds and print options, then `%pip install` of attention_lib when it cannot be imported (Colab, or any bare
  kernel) from ATTENTION_LIB_SOURCE or else from the repository, then Colab's widget manager when in Colab. It
  never installs torch or ipywidgets. In a normal run it prints nothing.
A notebook added later gets both from `make colab`. The cell ids of existing cells never change; a new setup cell
gets the id "colab-setup".
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
import tomllib
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
TAG = "colab-setup"
BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"
BADGE = re.compile(r"\[!\[Open In Colab\]\([^)\s]*\)\]\([^)\s]*\)")
SETUP = """\
import importlib.util
import os  # noqa: F401 (read by the %pip line)
import sys

import torch

torch.manual_seed(0)
torch.set_printoptions(precision=3, sci_mode=False)
if importlib.util.find_spec("attention_lib") is None:  # Colab or a bare kernel: install it (never torch, ipywidgets)
    %pip install -q "{{os.environ.get('ATTENTION_LIB_SOURCE', 'attention-lib[colab] @ git+{repository}')}}"
if "google.colab" in sys.modules:  # Colab draws ipywidgets 8 only through its custom widget manager
    importlib.import_module("google.colab.output").enable_custom_widget_manager()"""


# The Chinese edition's setup cell: the same code, its two comments in Chinese (scripts/zh.py checks the code equal).
SETUP_COMMENTS_ZH = {
    "# Colab or a bare kernel: install it (never torch, ipywidgets)":
        "# Colab 或没有本包的内核：安装它（从不安装 torch、ipywidgets）",
    "# Colab draws ipywidgets 8 only through its custom widget manager":
        "# Colab 只能通过它的自定义小部件管理器显示 ipywidgets 8",
}


def repository(root: Path = ROOT) -> str:
    """The repository's address, from pyproject.toml [project.urls] Repository (a GitHub URL)."""
    url = tomllib.loads((root / "pyproject.toml").read_text())["project"]["urls"]["Repository"].rstrip("/")
    if not re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", url):
        raise ValueError(f"[project.urls] Repository must be https://github.com/<owner>/<repo>, got {url!r}")
    return url.removesuffix(".git")


def colab_link(repo: str, notebook: str) -> str:
    return f"https://colab.research.google.com/github/{repo.removeprefix('https://github.com/')}/blob/main/notebooks/{notebook}"


def badge(repo: str, notebook: str) -> str:
    return f"[![Open In Colab]({BADGE_IMAGE})]({colab_link(repo, notebook)})"


def setup_source(repo: str, chinese: bool = False) -> str:
    source = SETUP.format(repository=repo)
    for english, translated in SETUP_COMMENTS_ZH.items() if chinese else ():
        source = source.replace(english, translated)
    return source


def _with_badge(markdown: str, line: str) -> str:
    """The markdown with `line` as its own paragraph after the title (the first paragraph, if a heading)."""
    paragraphs = [p for p in markdown.split("\n\n") if not BADGE.fullmatch(p.strip())]
    at = 1 if paragraphs and paragraphs[0].startswith("#") else 0
    return "\n\n".join([*paragraphs[:at], line, *paragraphs[at:]])


def stamp_notebook(nb: nbformat.NotebookNode, name: str, repo: str) -> nbformat.NotebookNode:
    """A stamped copy of `nb` (named `name` in notebooks/)."""
    nb = copy.deepcopy(nb)
    cells = nb.cells
    first_md = next((c for c in cells if c.cell_type == "markdown"), None)
    if first_md is None:
        first_md = nbformat.v4.new_markdown_cell("", id="colab-badge")
        cells.insert(0, first_md)
    first_md.source = _with_badge(first_md.source, badge(repo, name))

    stamped = [c for c in cells if c.cell_type == "code" and TAG in c.get("metadata", {}).get("tags", [])]
    if stamped:
        setup = stamped[0]
    else:
        setup = nbformat.v4.new_code_cell(id=TAG)
    for cell in stamped:
        cells.remove(cell)
    source = setup_source(repo, chinese=name.startswith("zh/"))
    if setup.source != source:
        setup.source, setup.outputs, setup.execution_count = source, [], None
    setup.metadata["tags"] = [TAG, *(t for t in setup.metadata.get("tags", []) if t != TAG)]
    first_code = next((i for i, c in enumerate(cells) if c.cell_type == "code"), len(cells))
    cells.insert(first_code, setup)
    return nb


def stamp_readme(text: str, repo: str, folder: str = "") -> str:
    """The README with a badge after the link of every notebook in its table of notebooks (folder "zh/": the
    Chinese README's table of notebooks/zh/)."""

    def row(match: re.Match) -> str:
        name = f"{folder}{match['stem']}.ipynb"
        return f"| [{match['stem']}](notebooks/{name}) {badge(repo, name)} |"

    pattern = (r"^\| \[(?P<stem>\d\d_\w+)\]\(notebooks/" + re.escape(folder) + r"(?P=stem)\.ipynb\)(?: "
               + BADGE.pattern + r")? \|")
    return re.sub(pattern, row, text, flags=re.M)


def notebooks(root: Path) -> list[Path]:
    return sorted((root / "notebooks").glob("[0-9]*.ipynb"))


def twins(root: Path) -> list[Path]:
    """The Chinese edition's notebooks (notebooks/zh/): each gets the badge of its own file, in Colab too."""
    return sorted((root / "notebooks" / "zh").glob("[0-9]*.ipynb"))


def run(root: Path = ROOT, check: bool = False) -> list[str]:
    """Stamp (or with check=True only compare) every notebook and the README; returns the stale files' messages."""
    repo = repository(root)
    problems = []
    for path in [*notebooks(root), *twins(root)]:
        name = path.relative_to(root / "notebooks").as_posix()  # "03_x.ipynb", or "zh/03_x.ipynb"
        nb = nbformat.read(path, as_version=4)
        stamped = stamp_notebook(nb, name, repo)
        if stamped != nb:
            problems.append(f"notebooks/{name} lacks the current Colab badge or setup cell: run `make colab`")
            if not check:
                nbformat.write(stamped, path)
    readme = root / "README.md"
    text = readme.read_text()
    stamped_text = stamp_readme(text, repo)
    rows = {m for m in re.findall(r"\(notebooks/(\d\d_\w+\.ipynb)\) " + BADGE.pattern, stamped_text)}
    missing = [p.name for p in notebooks(root) if p.name not in rows]
    if stamped_text != text:
        problems.append("README.md lacks the current Colab badges in its table of notebooks: run `make colab`")
        if not check:
            readme.write_text(stamped_text)
    for name in missing:
        print(f"note: README.md's table of notebooks has no row for notebooks/{name}", file=sys.stderr)
    chinese = root / "README.zh.md"
    if chinese.exists():
        text = chinese.read_text(encoding="utf-8")
        if stamp_readme(text, repo, "zh/") != text:
            problems.append("README.zh.md lacks the current Colab badges in its table of notebooks: run `make colab`")
            if not check:
                chinese.write_text(stamp_readme(text, repo, "zh/"), encoding="utf-8")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 when stale")
    check = parser.parse_args().check
    problems = run(check=check)
    if check:
        for line in problems:
            print(line, file=sys.stderr)
        if not problems:
            print(f"every notebook and the README carry the current Colab stamp ({repository()})")
        return 1 if problems else 0
    print(f"stamped {len(problems)} file(s) with the Colab badge and setup cell of {repository()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
