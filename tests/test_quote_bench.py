"""The benchmark tables quoted in README.md and the notebooks are what scripts/quote_bench.py writes from the
recorded run they cite; the script finds the newest run, refuses what it cannot quote and notices an edited table."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("quote_bench", ROOT / "scripts" / "quote_bench.py")
quote_bench = importlib.util.module_from_spec(_spec)
sys.modules["quote_bench"] = quote_bench  # dataclasses look their module up there
_spec.loader.exec_module(quote_bench)


def test_quoted_tables_agree_with_their_recorded_run(capsys):
    assert quote_bench.main(["--check"]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("name", ["README.md", "03_bidirectional.ipynb", "04_causal.ipynb", "05_cross.ipynb"])
def test_readme_and_notebooks_03_to_05_quote_tables(name):
    if name.endswith(".md"):
        text = (ROOT / name).read_text()
    else:
        cells = json.loads((ROOT / "notebooks" / name).read_text())["cells"]
        text = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert quote_bench.MARKER.search(text), f"{name} quotes no benchmark table"


def a_run(date: str, ours: list[float], theirs: list[float], name: str = "causal forward S=8") -> dict:
    ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
    med = sorted(ratios)[len(ratios) // 2]
    return {
        "environment": {"date": date, "commit": "abc", "dirty": False, "torch": "2.13.0+cpu", "python": "3.11.7",
                        "cpu": "test CPU", "logical_cpus": 2, "torch_threads": 2,
                        "load_average_1_5_15_min": [0.1, 0.2, 0.3]},
        "rows": [{"name": name, "rounds": len(ours), "ours_ms": ours, "theirs_ms": theirs,
                  "paired_ratio": med, "paired_ratio_quartiles": [min(ratios), med, max(ratios)],
                  "ratio_of_medians": sorted(ours)[len(ours) // 2] / sorted(theirs)[len(theirs) // 2],
                  "ours_peak_mib": 1.0, "theirs_peak_mib": 2.0, "memory_ratio": 0.5}],
        "errors": [],
    }


@pytest.fixture
def tree(tmp_path):
    """A small project: one recorded run and a README quoting it."""
    (tmp_path / "notebooks").mkdir()
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    (results / "2026-01-01-aaa.json").write_text(json.dumps(a_run("2026-01-01 10:00 UTC", [1.0, 2.0, 3.0],
                                                                    [4.0, 4.0, 4.0])))
    (tmp_path / "README.md").write_text('text\n<!-- bench rows="causal" run=latest -->\n<!-- /bench -->\nmore\n')
    assert quote_bench.main(["--root", str(tmp_path)]) == 0
    return tmp_path


def test_writes_environment_load_and_rows_then_check_passes(tree):
    text = (tree / "README.md").read_text()
    assert "[`2026-01-01-aaa`](benchmarks/results/2026-01-01-aaa.md)" in text
    assert "load average 0.10 over the last minute on 2 logical CPUs)" in text  # no busier spell before it
    assert "| causal forward S=8 | 3 | 2.00 [1.50–2.50] | 4.00 [4.00–4.00] | 0.50 [0.25–0.75] | 0.25–0.75 |" in text
    assert text.startswith("text\n") and text.endswith("<!-- /bench -->\nmore\n")
    assert quote_bench.main(["--root", str(tree), "--check"]) == 0


def test_check_fails_on_an_edited_table(tree):
    readme = tree / "README.md"
    readme.write_text(readme.read_text().replace("0.50 [0.25–0.75]", "0.40 [0.25–0.75]"))
    assert quote_bench.main(["--root", str(tree), "--check"]) == 1
    assert quote_bench.main(["--root", str(tree)]) == 0  # make quote-bench repairs it
    assert quote_bench.main(["--root", str(tree), "--check"]) == 0


def test_latest_is_the_newest_recorded_date_and_a_new_run_is_one_command_away(tree):
    results = tree / "benchmarks" / "results"
    # a stem that sorts first but was recorded later: the recorded date decides
    (results / "2026-01-01-000.json").write_text(json.dumps(a_run("2026-01-01 12:00 UTC", [1.0], [2.0])))
    assert quote_bench.main(["--root", str(tree), "--check"]) == 1  # the README still quotes the older run
    assert quote_bench.main(["--root", str(tree)]) == 0
    text = (tree / "README.md").read_text()
    assert "2026-01-01-000" in text and "2026-01-01-aaa" not in text


def test_a_pinned_run_stays_quoted(tree):
    readme = tree / "README.md"
    readme.write_text(readme.read_text().replace("run=latest", "run=2026-01-01-aaa"))
    (tree / "benchmarks" / "results" / "2026-02-01-bbb.json").write_text(
        json.dumps(a_run("2026-02-01 10:00 UTC", [1.0], [2.0])))
    assert quote_bench.main(["--root", str(tree), "--check"]) == 0


@pytest.mark.parametrize("marker, message", [
    ('<!-- bench rows="cross" run=latest -->', "no recorded run has a row whose name starts with 'cross'"),
    ("<!-- bench run=2020-01-01-nope -->", "not a recorded run"),
    ('<!-- bench rows="causal" -->', "run=<stem or latest>"),
])
def test_refuses_what_it_cannot_quote(tree, capsys, marker, message):
    (tree / "README.md").write_text(f"{marker}\n<!-- /bench -->\n")
    assert quote_bench.main(["--root", str(tree)]) == 1
    assert message in capsys.readouterr().err


def test_notebook_markdown_cells_are_filled_and_code_cells_left_alone(tree):
    marker = '<!-- bench rows="causal" run=latest -->\n<!-- /bench -->'
    nb = {"cells": [{"cell_type": "markdown", "id": "a1", "metadata": {}, "source": ["intro\n", marker]},
                    {"cell_type": "code", "id": "b2", "metadata": {}, "source": [marker], "outputs": [],
                     "execution_count": None}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tree / "notebooks" / "00_x.ipynb"
    path.write_text(json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n")
    assert quote_bench.main(["--root", str(tree)]) == 0
    cells = json.loads(path.read_text())["cells"]
    assert "](../benchmarks/results/2026-01-01-aaa.md)" in "".join(cells[0]["source"])
    assert cells[1]["source"] == [marker]
    shutil.rmtree(tree / "benchmarks")
    assert quote_bench.main(["--root", str(tree), "--check"]) == 1  # nothing recorded: nothing to quote


def test_the_load_sentence_says_when_the_machine_was_busy_just_before():
    env = {"logical_cpus": 2, "load_average_1_5_15_min": [0.78, 2.60, 3.42]}
    sentence = quote_bench._load_sentence(env)
    assert "lightly loaded" in sentence and "after a busier spell: 2.60 over 5 minutes, 3.42 over 15)" in sentence
    env["load_average_1_5_15_min"] = [6.2, 6.3, 5.2]
    assert "heavily loaded" in quote_bench._load_sentence(env) and "busier" not in quote_bench._load_sentence(env)
