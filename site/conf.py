"""Sphinx configuration of the series' website (`make site`): the committed, executed notebooks rendered by myst-nb
with sphinx-book-theme, without re-executing them and without loading anything from another host.

Sphinx reads a copy of this folder with the notebooks of the series under notebooks/ (scripts/build_site.py lays it
out). The site has two editions, built one after the other from this file: English (the default) and Chinese
(ATTENTION_SITE_LANGUAGE=zh: the landing page of site/zh/, the notebooks of notebooks/zh/, written to zh/ of the
English site, with Sphinx's and the theme's words in Chinese and a search that segments Chinese words with jieba).
series.py (in _ext/) adapts the notebooks to a page without a kernel; see its docstring.
"""

import os
import sys
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The repository: scripts/build_site.py names it (Sphinx reads a copy of this folder, which may lie anywhere).
ROOT = Path(os.environ.get("ATTENTION_REPOSITORY", HERE.parent))
sys.path.insert(0, str(HERE / "_ext"))

# The repository's address lives in pyproject.toml ([project.urls] Repository), as for the Colab badges.
REPOSITORY = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
# Which edition this build writes: "en" or "zh" (scripts/build_site.py sets it).
SITE_LANGUAGE = os.environ.get("ATTENTION_SITE_LANGUAGE", "en")
if SITE_LANGUAGE not in {"en", "zh"}:
    raise ValueError(f"ATTENTION_SITE_LANGUAGE must be 'en' or 'zh', not {SITE_LANGUAGE!r}")
ZH = SITE_LANGUAGE == "zh"

project = "Attention from scratch"
author = "the attention-from-scratch authors"
copyright = "the attention-from-scratch authors, MIT License"

extensions = [
    "myst_nb",
    "sphinx_copybutton",
    "series",  # _ext/series.py
]

root_doc = "index"
exclude_patterns = ["**/.ipynb_checkpoints"]

# --- the notebooks: rendered from their committed outputs, never executed ---------------------------------------
nb_execution_mode = "off"
# No ipywidgets JavaScript from a CDN: widget outputs become static HTML in series.py.
nb_ipywidgets_js = {}
nb_merge_streams = True
if ZH:  # the button of a folded cell (the setup cell's code), in the page's language
    nb_code_prompt_show = "显示代码单元格"
    nb_code_prompt_hide = "隐藏代码单元格"
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist", "substitution"]
# Links of the landing page, from the repository's address.
_COLAB = "https://colab.research.google.com/github/" + REPOSITORY.removeprefix("https://github.com/")
# Where this edition's notebooks are in the repository: the Colab button and links to other files point there.
series_notebooks = "notebooks/zh" if ZH else "notebooks"
if ZH:
    myst_substitutions = {
        "repository": f"[本仓库]({REPOSITORY})",
        "colab_first": f"[在 Colab 中打开笔记本 00]({_COLAB}/blob/main/notebooks/zh/00_recap.ipynb)",
        "glossary": f"[术语表]({REPOSITORY}/blob/main/notebooks/zh/GLOSSARY.md)",
    }
else:
    myst_substitutions = {
        "repository": f"[the repository]({REPOSITORY})",
        "colab_first": f"[open notebook 00 in Colab]({_COLAB}/blob/main/notebooks/00_recap.ipynb)",
    }
myst_heading_anchors = 3
# The notebooks' markdown writes math as $...$ and $$...$$; MathJax then only typesets what Sphinx marked as math.
myst_dmath_double_inline = True

# --- math: MathJax 3 served from this site (_static/mathjax, copied by series.py), never from a CDN -----------------
mathjax_path = "mathjax/tex-chtml.js"
mathjax3_config = {
    "tex": {"inlineMath": [["\\(", "\\)"]], "displayMath": [["\\[", "\\]"]]},
    "options": {"processHtmlClass": "tex2jax_process|mathjax_process|math|output_area"},
}

# --- the pages -------------------------------------------------------------------------------------------------
html_theme = "sphinx_book_theme"
html_title = "从零实现注意力" if ZH else "Attention from scratch"
# zh_CN: Sphinx's words (search, "next", ...) and sphinx-book-theme's in Chinese, and Sphinx's Chinese search, which
# segments words with jieba (a dev dependency). Its dictionary is told the glossary's terms (search_zh.txt, written by
# scripts/build_site.py), so that a term like 因果掩码 is indexed whole as well as in its parts.
language = "zh_CN" if ZH else "en"
if ZH:
    html_search_options = {"dict": str(HERE / "search_zh.txt")}
    try:
        import jieba
    except ImportError as missing:  # without it Sphinx would silently index no Chinese word
        raise RuntimeError("The Chinese site's search needs jieba: pip install jieba (the site extra)") from missing
    import logging

    jieba.setLogLevel(logging.WARNING)  # not its INFO lines about building its dictionary at every build
templates_path = ["_templates"]  # language-switch.html
html_static_path = ["_static"]
html_css_files = ["series.css"]
html_js_files = ["series.js"]
html_context = {"default_mode": "auto"}  # light or dark as the reader's system says (empty: a console error)
html_use_index = False  # the series has no index entries: no empty genindex page
html_copy_source = True  # _sources/notebooks/NN.ipynb: the "Download notebook" button serves the notebook itself
html_show_sourcelink = False
html_last_updated_fmt = None
html_theme_options = {
    "repository_url": REPOSITORY,
    "repository_branch": "main",
    "path_to_docs": "",  # notebooks/NN.ipynb is the same path in the repository and here
    "use_repository_button": True,
    "use_download_button": True,
    "use_fullscreen_button": False,
    "launch_buttons": {"colab_url": "https://colab.research.google.com"},
    "show_toc_level": 2,
    "home_page_in_toc": True,
    "navigation_with_keys": False,
    "show_navbar_depth": 1,
    "article_header_start": ["toggle-primary-sidebar.html"],
    # English | 中文, to the same page in the other edition (series.py), beside the Colab and download buttons.
    "article_header_end": ["language-switch.html", "article-header-buttons.html"],
    "navbar_persistent": [],  # one search field, the sidebar's, not a second one in an otherwise empty top bar
}
series_repository = REPOSITORY  # _ext/series.py points links to files outside the site there
series_language = SITE_LANGUAGE
copybutton_exclude = ".linenos, .gp, .go"
