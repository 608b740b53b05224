"""The website's parts that need no browser: how site/_ext/series.py adapts a notebook for a page without a kernel,
the GitHub Pages workflow, and the README's link to where the site lives (tests/test_site.py builds and visits it)."""

from __future__ import annotations

import html
import importlib.util
import json
import re
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
REPOSITORY = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


@pytest.fixture(scope="module")
def series():
    pytest.importorskip("docutils")
    spec = importlib.util.spec_from_file_location("series", ROOT / "site" / "_ext" / "series.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _model(name: str, **state) -> dict:
    return {"model_name": name, "model_module": "@jupyter-widgets/controls", "state": state}


def _explorer_notebook() -> dict:
    """A notebook whose one output is an explorer-like widget: a box holding a shown dropdown, a hidden one, a slider
    and the picture."""
    models = {
        "box": _model("VBoxModel", children=["IPY_MODEL_kind", "IPY_MODEL_hidden", "IPY_MODEL_pad", "IPY_MODEL_pic"]),
        "kind": _model("DropdownModel", description="kind", index=1, _options_labels=["bidirectional", "causal"],
                       layout="IPY_MODEL_shown"),
        "hidden": _model("DropdownModel", description="B: head", index=0, _options_labels=["0"],
                         layout="IPY_MODEL_gone"),
        "pad": _model("IntSliderModel", description="padding", value=2),
        "pic": _model("HTMLModel", value='<div class="attn-picture"><svg width="300"><rect/></svg></div>'),
        "shown": _model("LayoutModel", display="flex"),
        "gone": _model("LayoutModel", display="none"),
    }
    badge = ("[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
             f"({REPOSITORY}/blob/main/notebooks/00_recap.ipynb)")
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": f"# Title\n\n{badge}\n\nSee [the run](../benchmarks/r.md)"
                                                            " and [notebook 01](01_next.ipynb#top)."},
        {"cell_type": "code", "metadata": {"tags": ["colab-setup"]}, "outputs": [], "execution_count": 1,
         "source": ["import torch\n"]},
        {"cell_type": "code", "metadata": {}, "execution_count": 2, "source": "# NBVAL_IGNORE_OUTPUT\nexplorer",
         "outputs": [{"output_type": "display_data", "metadata": {},
                      "data": {WIDGET_VIEW: {"model_id": "box", "version_major": 2, "version_minor": 0},
                               "text/plain": ["VBox(children=(Dropdown(...),))"]}}]},
    ]
    state = {"application/vnd.jupyter.widget-state+json": {"state": models, "version_major": 2, "version_minor": 0}}
    return {"cells": cells, "metadata": {"widgets": state}, "nbformat": 4, "nbformat_minor": 5}


def test_a_widget_output_becomes_its_saved_picture_and_controls(series):
    nb = json.loads(series.adapt_notebook(json.dumps(_explorer_notebook()), "notebooks/00_recap", REPOSITORY))
    (output,) = nb["cells"][2]["outputs"]
    assert list(output["data"]) == ["text/html"]  # no widget view left for a widget manager to fetch
    markup = output["data"]["text/html"]
    assert '<svg width="300"><rect/></svg>' in markup and "widget-static-explorer" in markup
    assert "<span>kind</span> causal" in markup and "<span>padding</span> 2" in markup
    assert "B: head" not in markup  # hidden when the notebook was saved
    assert "widgets" not in nb["metadata"]


def test_an_explorer_saved_with_its_page_becomes_live_beside_its_static_copy(series):
    """The page in the output's metadata (AttentionExplorer.html) is kept whole, escaped in a data- attribute that
    series.js turns into a frame; the static copy stays for readers whose scripts are off."""
    page = ('<!DOCTYPE html>\n<html><head><style>body { font: 13px "sans" }</style></head><body>'
            '<script type="application/json" id="attn-data">{"queries":["a & b","<\\/s>"]}</script></body></html>\n')
    notebook = _explorer_notebook()
    (output,) = notebook["cells"][2]["outputs"]
    output["metadata"] = {series.EXPLORER_PAGE: page}
    nb = json.loads(series.adapt_notebook(json.dumps(notebook), "notebooks/00_recap", REPOSITORY))
    (output,) = nb["cells"][2]["outputs"]
    assert list(output["data"]) == ["text/html"] and series.EXPLORER_PAGE not in output["metadata"]
    markup = output["data"]["text/html"]
    live = re.search(r'<div class="explorer-live" hidden data-page="([^"]*)">', markup)
    assert live and html.unescape(live.group(1)) == page
    assert markup.index("explorer-live") < markup.index("widget-static-explorer")  # the frame first, then the copy
    assert '<svg width="300"><rect/></svg>' in markup and "<span>padding</span> 2" in markup


def test_an_explorer_without_its_page_and_a_widget_that_is_no_explorer_stay_static(series):
    models = _explorer_notebook()["metadata"]["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    assert "explorer-live" not in series.explorer_output({"model_id": "box"}, models, None)
    models["pic"]["state"]["value"] = "<b>a progress bar's text</b>"  # no attn-picture: not an explorer
    assert "explorer-live" not in series.explorer_output({"model_id": "box"}, models, "<!DOCTYPE html>")


def test_badge_links_markers_and_setup_cell(series):
    nb = json.loads(series.adapt_notebook(json.dumps(_explorer_notebook()), "notebooks/00_recap", REPOSITORY))
    title, setup, explorer = nb["cells"]
    assert "colab-badge.svg" not in title["source"]  # an image from another host
    assert f'<a class="colab-link" href="{REPOSITORY}/blob/main/notebooks/00_recap.ipynb">' in title["source"]
    assert f"]({REPOSITORY}/blob/main/benchmarks/r.md)" in title["source"]  # a file that is not on the site
    assert "](01_next.ipynb#top)" in title["source"]  # another notebook: a page of the site
    assert "hide-input" in setup["metadata"]["tags"]
    assert explorer["source"] == "explorer"


def test_a_progress_bar_keeps_its_text_and_value(series):
    models = {
        "row": _model("HBoxModel", children=["IPY_MODEL_label", "IPY_MODEL_bar"]),
        "label": _model("HTMLModel", value="Loading weights: 100%"),
        "bar": _model("FloatProgressModel", value=272.0, max=272.0),
    }
    markup = series.widget_html("row", models)
    assert markup.startswith('<div class="widget-static widget-static-row">')
    assert "Loading weights: 100%" in markup
    assert '<progress class="widget-static-progress" value="272" max="272">' in markup


def test_the_pages_workflow_builds_with_make_site_and_deploys_with_the_standard_actions():
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "pages.yml").read_text())
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as True
    assert "push" in triggers and workflow["permissions"] == {"contents": "read", "pages": "write", "id-token": "write"}
    build, deploy = workflow["jobs"]["build"]["steps"], workflow["jobs"]["deploy"]["steps"]
    uses = [s.get("uses", "").split("@")[0] for s in build + deploy]
    assert ["actions/configure-pages", "actions/upload-pages-artifact", "actions/deploy-pages"] == [
        u for u in uses if u.startswith(("actions/configure", "actions/upload", "actions/deploy"))]
    assert any(s.get("run", "").startswith("make site") for s in build)
    (upload,) = [s for s in build if s.get("uses", "").startswith("actions/upload-pages-artifact")]
    spec = importlib.util.spec_from_file_location("build_site", ROOT / "scripts" / "build_site.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert ROOT / upload["with"]["path"] == module.DEFAULT_OUT  # the folder make site writes
    assert workflow["jobs"]["deploy"]["needs"] == "build"


def test_the_readme_links_to_where_the_site_lives():
    owner, name = re.fullmatch(r"https://github\.com/([\w.-]+)/([\w.-]+)", REPOSITORY).groups()
    assert f"https://{owner.lower()}.github.io/{name}/" in (ROOT / "README.md").read_text()


# --- the Chinese edition ---------------------------------------------------------------------------------------


def test_a_chinese_notebook_is_adapted_in_chinese_and_its_links_start_from_notebooks_zh(series):
    notebook = _explorer_notebook()
    notebook["cells"][0]["source"] = notebook["cells"][0]["source"].replace("../benchmarks", "../../benchmarks")
    notebook["cells"][2]["outputs"][0]["metadata"] = {series.EXPLORER_PAGE: "<!DOCTYPE html><html></html>"}
    nb = json.loads(series.adapt_notebook(json.dumps(notebook), "notebooks/zh/00_recap", REPOSITORY, "zh"))
    title, _, explorer = nb["cells"]
    assert '">在 Colab 中打开</a>' in title["source"]
    assert f"]({REPOSITORY}/blob/main/benchmarks/r.md)" in title["source"]  # ../../ from notebooks/zh/
    assert "](01_next.ipynb#top)" in title["source"]  # the Chinese page of notebook 01, beside this one
    markup = explorer["outputs"][0]["data"]["text/html"]
    assert series.TEXTS["zh"]["static_note"] in markup and series.TEXTS["zh"]["live_note"] in markup
    assert "The explorer" not in markup
    assert set(series.TEXTS["zh"]) == set(series.TEXTS["en"])  # every text in both languages


def test_appendix_headings_of_both_languages_are_folded(series):
    assert series.APPENDIX.match("Appendix A: saturation") and series.APPENDIX.match("附录 A：再谈为什么要除以 √d")
    assert not series.APPENDIX.match("Appendices elsewhere") and not series.APPENDIX.match("练习")


def test_the_colab_button_of_a_chinese_page_opens_the_chinese_notebook(series):
    colab = f"https://colab.research.google.com/github/{REPOSITORY.removeprefix('https://github.com/')}/blob/main"
    theme = f"{colab}/notebooks/04_causal.ipynb"  # what sphinx-book-theme builds from path_to_docs + pagename
    assert series.colab_url(theme, "notebooks/04_causal", "notebooks/zh") == f"{colab}/notebooks/zh/04_causal.ipynb"
    assert series.colab_url(theme, "notebooks/04_causal", "notebooks") == theme
    assert series.colab_url("https://example.org/x", "notebooks/04_causal", "notebooks/zh") == "https://example.org/x"


@pytest.mark.parametrize(("page", "language", "other"), [
    ("index", "en", "zh/index.html"),
    ("notebooks/04_causal", "en", "../zh/notebooks/04_causal.html"),
    ("search", "en", "zh/search.html"),
    ("index", "zh", "../index.html"),
    ("notebooks/04_causal", "zh", "../../notebooks/04_causal.html"),
])
def test_the_language_switch_links_to_the_same_page_in_the_other_edition(series, page, language, other):
    links = series.language_switch(page, language)
    assert [link["label"] for link in links] == ["English", "中文"]
    (current,) = [link for link in links if link["current"]]
    (target,) = [link for link in links if not link["current"]]
    assert current["label"] == series.EDITIONS[language][0] and target["href"] == other


def _conf(monkeypatch, language: str | None) -> dict:
    import runpy

    if language is None:
        monkeypatch.delenv("ATTENTION_SITE_LANGUAGE", raising=False)
    else:
        monkeypatch.setenv("ATTENTION_SITE_LANGUAGE", language)
    monkeypatch.setenv("ATTENTION_REPOSITORY", str(ROOT))
    return runpy.run_path(str(ROOT / "site" / "conf.py"))


def test_the_configuration_of_each_edition(monkeypatch):
    en, zh = _conf(monkeypatch, None), _conf(monkeypatch, "zh")
    assert (en["language"], en["series_language"], en["series_notebooks"]) == ("en", "en", "notebooks")
    assert (zh["language"], zh["series_language"], zh["series_notebooks"]) == ("zh_CN", "zh", "notebooks/zh")
    assert zh["html_title"] == "从零实现注意力" and en["html_title"] == "Attention from scratch"
    assert zh["nb_code_prompt_show"] == "显示代码单元格" and "nb_code_prompt_show" not in en  # myst-nb's English
    assert zh["html_search_options"]["dict"].endswith("search_zh.txt")  # build_site.py writes it beside conf.py
    for conf in (en, zh):
        assert conf["html_theme_options"]["article_header_end"][0] == "language-switch.html"
        assert (ROOT / "site" / conf["templates_path"][0] / "language-switch.html").is_file()
    assert "notebooks/zh/00_recap.ipynb" in zh["myst_substitutions"]["colab_first"]
    # every substitution each landing page uses is defined for its edition
    for conf, landing in ((en, ROOT / "site" / "index.md"), (zh, ROOT / "site" / "zh" / "index.md")):
        used = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", landing.read_text()))
        assert used and used <= set(conf["myst_substitutions"]), (landing, used)
    with pytest.raises(ValueError, match="'en' or 'zh'"):
        _conf(monkeypatch, "fr")


def test_the_chinese_search_knows_the_glossary_s_terms_and_jieba_is_a_pinned_dependency():
    spec = importlib.util.spec_from_file_location("build_site", ROOT / "scripts" / "build_site.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    words = module.glossary_words(module.GLOSSARY.read_text(encoding="utf-8"))
    assert {"因果掩码", "填充掩码", "多头注意力", "交叉注意力"} <= set(words)
    assert not [w for w in words if re.search(r"[\sA-Za-z]", w)]  # jieba's dictionary holds no space
    table = "| English | 中文 |\n|---|---|\n| a | 中文词 |\n| KV cache | KV 缓存 |\n\n| 不是 | 表格 |"
    assert module.glossary_words(table) == ["中文词"]  # not the heading row, nor a row of no table's body
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert any(r.startswith("jieba") for r in pyproject["project"]["optional-dependencies"]["site"])
    assert "jieba==0.42.1" in (ROOT / "constraints.txt").read_text().splitlines()


def test_both_readmes_say_where_the_chinese_pages_are():
    owner, name = re.fullmatch(r"https://github\.com/([\w.-]+)/([\w.-]+)", REPOSITORY).groups()
    site = f"https://{owner.lower()}.github.io/{name}/zh/"
    assert site in (ROOT / "README.md").read_text() and site in (ROOT / "README.zh.md").read_text()


def test_the_chinese_search_uses_the_javascript_stemmer_sphinx_ships_for_it(series):
    """language_data.js ends with `window.Stemmer = <language_name>Stemmer`; for Chinese, Sphinx ships the English
    stemmer (english-stemmer.js): the name must be EnglishStemmer, or every Chinese page logs an error."""
    from sphinx.search import languages

    search = series.chinese_search() or languages["zh"]
    if isinstance(search, str):  # Sphinx names its own classes by import path
        module, _, name = search.rpartition(".")
        search = getattr(importlib.import_module(module), name)
    assert search.lang == "zh" and search.js_stemmer_rawcode == f"{search.language_name.lower()}-stemmer.js"
