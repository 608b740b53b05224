"""Every notebook keeps the series' order and its main path is one sitting.

The order: the main path, then Summary, Exercises, Further reading (with the pointer to the next notebook), and
only then the appendices. The budget of a main path, from the title to the Summary (the setup cell excluded):
about 2,000 words of prose and 180 non-blank code lines for notebooks 00-06, 2,600 and 250 from 07 on."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
TAIL = ["Summary", "Exercises", "Further reading"]  # in this order, after the main path, before the appendices


def budget(path: Path) -> tuple[int, int]:
    """(words, code lines) the main path may hold."""
    return (2000, 180) if int(path.name[:2]) <= 6 else (2600, 250)


def headings(cells: list[dict]) -> list[tuple[int, str]]:
    """(cell index, title) of every level-2 heading."""
    found = []
    for i, cell in enumerate(cells):
        if cell["cell_type"] == "markdown":
            found += [(i, m[1].strip()) for m in re.finditer(r"^## (.+)$", "".join(cell["source"]), re.M)]
    return found


def prose_words(markdown: str) -> int:
    """Words a reader reads: fenced code, HTML comments and display maths left out, inline code counted."""
    text = re.sub(r"```.*?```|<!--.*?-->|\$\$.*?\$\$", " ", markdown, flags=re.S)
    return len(re.findall(r"[^\W_][\w'’.-]*", text))


def main_path(cells: list[dict]) -> tuple[int, int]:
    """(words, non-blank code lines) from the title to the Summary heading, the setup cell excluded."""
    words = lines = 0
    for cell in cells:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            before, summary, _ = source.partition("## Summary")
            words += prose_words(before)
            if summary:
                break
        elif cell.get("id") != "colab-setup":
            lines += sum(1 for line in source.splitlines() if line.strip())
    return words, lines


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_notebook_keeps_the_series_order(path):
    cells = json.loads(path.read_text())["cells"]
    titles = [title for _, title in headings(cells)]
    tail = [t for t in titles if t in TAIL]
    assert tail == TAIL, f"{path.name}: the sections {TAIL} must each appear once, in this order; found {tail}"
    first_tail = titles.index("Summary")
    appendices = [i for i, t in enumerate(titles) if t.startswith("Appendix")]
    assert all(i > titles.index("Further reading") for i in appendices), (
        f"{path.name}: an appendix comes before the Summary, Exercises and Further reading"
    )
    assert not any(t.startswith("Appendix") for t in titles[:first_tail])
    reading = next(i for i, t in headings(cells) if t == "Further reading")
    end = next((i for i, t in headings(cells) if t.startswith("Appendix")), len(cells))
    assert any("**Next:**" in "".join(c["source"]) for c in cells[reading:end] if c["cell_type"] == "markdown"), (
        f"{path.name}: the pointer to the next notebook (**Next:**) belongs after Further reading, before the "
        "appendices"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_main_path_is_one_sitting(path):
    words, lines = main_path(json.loads(path.read_text())["cells"])
    max_words, max_lines = budget(path)
    assert words <= max_words and lines <= max_lines, (
        f"{path.name}: the main path holds {words} words and {lines} code lines; its budget is {max_words} words and "
        f"{max_lines} lines: move validation, registries, benchmarks, interop and plumbing to the appendices"
    )
