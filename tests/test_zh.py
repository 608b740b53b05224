"""The Chinese edition (notebooks/zh/) is kept in step with the English notebooks by scripts/zh.py (`make zh-check`):
every cell translated from the English cell as it is now, code equal but for comments, outputs equal, the glossary's
terms. These tests run the check on the repository, and on small notebooks where each kind of drift is made on
purpose, so that each is caught and named."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("zh_sync", ROOT / "scripts" / "zh.py")
zh = importlib.util.module_from_spec(_spec)
sys.modules["zh_sync"] = zh  # dataclasses look their module up there
_spec.loader.exec_module(zh)

GLOSSARY = """| English | 中文 | 不要写作 | 说明 |
|---|---|---|---|
| mask | 掩码 | 掩蔽、遮罩 | |
| causal mask | 因果掩码 | | |
| KV cache | KV 缓存 | 键值缓存 | |
| grouped-query attention | 分组查询注意力 | 组查询注意力 | |
"""
EN_MD = "# 01 · Masks\n\nA **causal mask** (因果掩码) hides the future: each token sees the tokens before it only."
ZH_MD = "# 01 · 掩码\n\n**因果掩码**（causal mask）遮住未来：每个词元只看见它之前的词元。"
CODE = "#| export\nimport torch\n\n{}\nmask = torch.ones(3, 3).tril().bool()\nmask.sum()"
EN_CODE = CODE.format("# the lower triangle: True where a query may attend to a key")
ZH_CODE = CODE.format("# 下三角：查询可以关注某个键的位置为 True")
OUTPUT = nbformat.v4.new_output("execute_result", data={"text/plain": "tensor(6)"}, execution_count=1)


def write_tree(root: Path) -> None:
    """A repository of one English notebook and its translated twin, stamped: in step."""
    (root / "notebooks" / "zh").mkdir(parents=True)
    (root / "notebooks" / "zh" / "GLOSSARY.md").write_text(GLOSSARY, encoding="utf-8")
    for folder, md, code in (("notebooks", EN_MD, EN_CODE), ("notebooks/zh", ZH_MD, ZH_CODE)):
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_markdown_cell(md, id="title"),
                    nbformat.v4.new_code_cell(code, id="mask", execution_count=1, outputs=[OUTPUT])]
        nbformat.write(nb, root / folder / "01_masks.ipynb")
    assert zh.stamp(root, "01_masks.ipynb", []) == []


def edit(path: Path, cell_id: str, **changes) -> None:
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if c.id == cell_id)
    for key, value in changes.items():
        cell[key] = value(cell[key]) if callable(value) else value
    nbformat.write(nb, path)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    write_tree(tmp_path)
    assert zh.check(tmp_path) == []
    return tmp_path


def test_a_translated_and_stamped_twin_is_in_step(tree):
    assert zh.status(tree) == ["01_masks.ipynb: 2/2 cells translated, 0 stale, 0 not translated"]


def test_an_english_cell_edited_after_its_translation_is_named_stale(tree):
    edit(tree / "notebooks" / "01_masks.ipynb", "title", source=lambda s: s.replace("only", "only, never after"))
    assert zh.check(tree) == ["01_masks.ipynb cell 1 (id title, markdown): stale, the English cell changed after "
                              "its translation"]


def test_a_cell_added_or_removed_on_one_side_is_named(tree):
    path = tree / "notebooks" / "01_masks.ipynb"
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell("## Summary\n\nThe mask is a lower triangle of ones.", id="summary"))
    nbformat.write(nb, path)
    assert zh.check(tree) == ["01_masks.ipynb: cells only in English (add their translations): summary"]
    twin = tree / "notebooks" / "zh" / "01_masks.ipynb"
    nb = nbformat.read(twin, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_markdown_cell("多出来的一段。", id="extra"))
    nbformat.write(nb, twin)
    assert "01_masks.ipynb: cells only in Chinese (remove them): extra" in zh.check(tree)


def test_code_may_differ_in_comments_and_layout_only(tree):
    twin = tree / "notebooks" / "zh" / "01_masks.ipynb"
    edit(twin, "mask", source=lambda s: s.replace("# 下三角", "# 下三角矩阵").replace("tril()", "tril( )"))
    assert zh.check(tree) == []
    edit(twin, "mask", source=lambda s: s.replace("ones(3, 3)", "ones(3, 4)"))
    assert zh.check(tree) == ["01_masks.ipynb cell 2 (id mask, code): the code differs from the English (only "
                              "comments may)"]


def test_a_magic_lines_comment_is_a_comment_and_its_command_is_code():
    english = 'if x:\n    %pip install -q "a # b"  # the wheel alone: its dependencies are not needed\n'
    chinese = 'if x:\n    %pip install -q "a # b"  # 只要这个 wheel：不需要它的依赖\n'
    assert zh.code_tokens(english) == zh.code_tokens(chinese)
    assert zh.comments(chinese) == ["# 只要这个 wheel：不需要它的依赖"]
    assert zh.code_tokens(english) != zh.code_tokens(english.replace("-q ", ""))


def test_a_directive_is_code_not_a_comment(tree):
    edit(tree / "notebooks" / "zh" / "01_masks.ipynb", "mask", source=lambda s: s.replace("#| export\n", ""))
    assert any("the code differs" in p for p in zh.check(tree))


def test_outputs_must_be_the_english_outputs(tree):
    twin = tree / "notebooks" / "zh" / "01_masks.ipynb"
    edit(twin, "mask", outputs=[])
    assert zh.check(tree) == ["01_masks.ipynb cell 2 (id mask, code): the outputs differ from the English (copy them)"]
    assert zh.copy_outputs(tree, "01_masks.ipynb") == 1 and zh.check(tree) == []


def test_the_saved_widget_state_must_be_the_english_one(tree):
    """A widget output names its models by id in the notebook's metadata "widgets": copied outputs without that state
    show no widget (in Jupyter, and on the website's Chinese pages)."""
    english = tree / "notebooks" / "01_masks.ipynb"
    nb = nbformat.read(english, as_version=4)
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {"m1": {"model_name": "X"}}}}
    nbformat.write(nb, english)
    assert zh.check(tree) == ["01_masks.ipynb: the saved widget state differs from the English, which the widget "
                              "outputs draw (copy it with the outputs: python scripts/zh.py outputs)"]
    assert zh.copy_outputs(tree, "01_masks.ipynb") == 1 and zh.check(tree) == []
    twin = nbformat.read(tree / "notebooks" / "zh" / "01_masks.ipynb", as_version=4)
    assert twin.metadata["widgets"] == nb.metadata["widgets"]


def test_english_left_in_markdown_or_a_comment_is_named(tree):
    twin = tree / "notebooks" / "zh" / "01_masks.ipynb"
    edit(twin, "title", source=lambda s: s + "\n\nThe rest of this section is left in English for now.")
    edit(twin, "mask", source=lambda s: s.replace("# 下三角：查询可以关注某个键的位置为 True",
                                                  "# the lower triangle: True where a query may attend"))
    problems = zh.check(tree)
    assert any("(id title, markdown): reads as English: 'The rest of this section is left in English" in p
               for p in problems)
    assert any("(id mask, code): comment reads as English" in p for p in problems)


def test_english_code_math_and_titles_inside_chinese_are_not_english_prose():
    text = zh._prose("见 *Attention Is All You Need* 与 `torch.ones(3, 3).tril()`，$$\\mathrm{softmax}(q k^T)$$。")
    assert zh.english_left(text) == []


def test_a_heading_lost_or_changed_in_level_is_named(tree):
    twin = tree / "notebooks" / "zh" / "01_masks.ipynb"
    edit(twin, "title", source=lambda s: s.replace("# 01 · 掩码", "## 01 · 掩码"))
    assert zh.check(tree) == ["01_masks.ipynb cell 1 (id title, markdown): its headings or exercise numbers differ "
                              "from the English (([1], []) in English, ([2], []) in Chinese)"]


def test_a_glossary_variant_is_named_with_the_glossary_term(tree):
    edit(tree / "notebooks" / "zh" / "01_masks.ipynb", "title", source=lambda s: s.replace("遮住", "用遮罩遮住"))
    assert zh.check(tree) == ["01_masks.ipynb cell 1 (id title, markdown): '遮罩' for 'mask': the glossary writes "
                              "'掩码'"]


def test_a_variant_inside_the_glossary_term_is_not_a_variant(tree):
    twin = tree / "notebooks" / "zh" / "01_masks.ipynb"
    edit(twin, "title", source=lambda s: s + "\n\n分组查询注意力也用这个掩码。")
    zh.stamp(tree, "01_masks.ipynb", ["title"])
    assert zh.check(tree) == []
    edit(twin, "title", source=lambda s: s + "\n\n组查询注意力也用。")
    assert zh.check(tree) == ["01_masks.ipynb cell 1 (id title, markdown): '组查询注意力' for 'grouped-query "
                              "attention': the glossary writes '分组查询注意力'"]


def test_a_chinese_term_in_an_english_notebook_must_be_the_glossary_term(tree):
    edit(tree / "notebooks" / "01_masks.ipynb", "title", source=lambda s: s.replace("(因果掩码)", "(因果遮罩)"))
    problems = zh.check(tree)
    unknown = "01_masks.ipynb cell 1 (id title): the Chinese '因果遮罩' is not a glossary term"
    assert f"{unknown} (notebooks/zh/GLOSSARY.md)" in problems


def test_a_notebook_without_a_twin_is_named(tree):
    shutil.copy(tree / "notebooks" / "01_masks.ipynb", tree / "notebooks" / "02_more.ipynb")
    assert zh.check(tree)[0].startswith("02_more.ipynb: no Chinese twin in notebooks/zh/")


def test_stamp_without_ids_leaves_a_stale_cell_stale(tree):
    edit(tree / "notebooks" / "01_masks.ipynb", "title", source=lambda s: s.replace("only", "only, never after"))
    assert zh.stamp(tree, "01_masks.ipynb", []) == []
    assert "stale" in zh.check(tree)[0]  # the translation was not updated: stamping by id is a decision
    zh.stamp(tree, "01_masks.ipynb", ["title"])
    assert zh.check(tree) == []


def test_stamp_refuses_a_cell_that_is_not_translated(tree):
    twin = tree / "notebooks" / "zh" / "01_masks.ipynb"
    edit(twin, "title", source=EN_MD, metadata={})
    refused = zh.stamp(tree, "01_masks.ipynb", [])
    assert refused and all("(id title, markdown): reads as English" in r for r in refused)
    assert "not translated yet" in zh.check(tree)[0]


def test_the_badge_and_quoted_tables_do_not_make_a_translation_stale(tree):
    table = "<!-- bench rows=x run=latest -->\n| a | b |\n<!-- /bench -->"
    for path in (tree / "notebooks" / "01_masks.ipynb", tree / "notebooks" / "zh" / "01_masks.ipynb"):
        edit(path, "title", source=lambda s: s + "\n\n" + table)
    zh.stamp(tree, "01_masks.ipynb", ["title"])
    for path in (tree / "notebooks" / "01_masks.ipynb", tree / "notebooks" / "zh" / "01_masks.ipynb"):
        edit(path, "title", source=lambda s: s.replace("| a | b |", "| a | c |"))
    assert zh.check(tree) == []  # a new run quoted in both: nothing to translate again
    edit(tree / "notebooks" / "zh" / "01_masks.ipynb", "title", source=lambda s: s.replace("| a | c |", "| a | d |"))
    assert zh.check(tree) == ["01_masks.ipynb cell 1 (id title, markdown): its quoted benchmark table differs from "
                              "the English: run `make quote-bench`"]


def test_the_repository_glossary_gives_one_term_per_concept():
    terms = zh.glossary(ROOT)
    assert len(terms) >= 40
    english = [t.english for t in terms]
    assert len(english) == len(set(english))
    for term in terms:
        assert term.chinese not in term.avoid
        assert not any(v == t.chinese for t in terms for v in term.avoid), term  # a variant is nobody's term


def test_the_chinese_edition_is_in_step_with_the_english():
    twins = sorted((ROOT / "notebooks" / "zh").glob("[0-9]*.ipynb"))
    assert [p.name for p in zh.english_notebooks(ROOT)] == [p.name for p in twins]
    assert zh.check(ROOT) == []


def test_editing_an_english_cell_of_the_series_names_the_chinese_cell_to_update(tmp_path):
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks")
    shutil.copytree(ROOT / "benchmarks" / "results", tmp_path / "benchmarks" / "results")  # the tables' links
    path = tmp_path / "notebooks" / "03_bidirectional.ipynb"
    nb = nbformat.read(path, as_version=4)
    number, cell = next((n, c) for n, c in enumerate(nb.cells, 1) if c.cell_type == "markdown" and n > 3)
    cell.source += "\n\nOne more sentence."
    code_number, code = next((n, c) for n, c in enumerate(nb.cells, 1) if c.cell_type == "code" and n > number)
    code.source = code.source.replace("\n", "\n\n", 1) + "\nprint('one more line')"
    nbformat.write(nb, path)
    assert zh.check(tmp_path) == [
        f"03_bidirectional.ipynb cell {number} (id {cell.id}, markdown): stale, the English cell changed after its "
        "translation",
        f"03_bidirectional.ipynb cell {code_number} (id {code.id}, code): stale, the English cell changed after its "
        "translation",
        f"03_bidirectional.ipynb cell {code_number} (id {code.id}, code): the code differs from the English (only "
        "comments may)"]
