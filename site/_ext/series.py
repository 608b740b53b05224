"""What the website needs beyond myst-nb and sphinx-book-theme, for notebooks read without a kernel or a network.

- Each notebook is adapted as Sphinx reads it (the file on disk, which "Download notebook" serves, is untouched):
  - an ipywidgets output becomes static HTML drawn from the widget state the notebook saved: the explorer's picture
    (its SVG, as the last run left it), its controls' values as text, a progress bar as its text. Without this a page
    would show the widget's Python repr, or an empty box waiting for a kernel (`widget_html`).
  - an explorer whose output carries its standalone page (`AttentionExplorer.html`, which the explorer puts in its
    output's metadata when displayed) becomes live: the page is kept in a data- attribute, and _static/series.js
    shows it in an <iframe srcdoc> (its own styles, its own script) in place of the static picture, which stays for
    readers whose scripts are off (`explorer_output`).
  - the "Open In Colab" badge, an image served by Colab, becomes a plain link (the page header has Colab's button too);
  - a link to a file of the repository that is not on the site (a recorded benchmark run) points to the repository;
  - the setup cell's code is folded (it installs the package in Colab; a reader of the site needs its output only);
  - nbval's `# NBVAL_IGNORE_OUTPUT` markers, which tell the test suite what to skip, are left out of the code shown.
- Every "Appendix ..." section ("附录 A：..." in Chinese) is folded into a <details> element under its heading and
  marked optional, so the main path reads as one sitting; the heading stays in the outline, and following a link into
  it opens it.
- Both editions, English and Chinese (`series_language`), are built from the same code: what this file writes into a
  page is in the page's language (`TEXTS`); the Colab button of a Chinese page opens the Chinese notebook
  (`fix_colab_button`), and every page links to the same page of the other edition (the template
  _templates/language-switch.html, in the header of each page).
- MathJax 3 (from the sphinx-mathjax-offline wheel) is copied into _static/mathjax, which conf.py's mathjax_path
  names: math is typeset by the site itself.
"""

from __future__ import annotations

import hashlib
import html
import importlib.util
import json
import posixpath
import re
import shutil
from pathlib import Path

from docutils import nodes

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
# attention_lib.viz.explorer.PAGE_METADATA: where a displayed explorer's output keeps its standalone page. Written
# out here, as the site is built from the notebooks alone.
EXPLORER_PAGE = "attention_lib/explorer-page"
COLAB_BADGE = re.compile(r"\[!\[Open In Colab\]\(https://colab\.research\.google\.com/assets/colab-badge\.svg\)\]\(([^)]+)\)")
APPENDIX = re.compile(r"^(Appendix\b|附录)")
# A Markdown link whose target is a relative path (no scheme, no anchor of this page).
RELATIVE_LINK = re.compile(r"\]\((?![a-z][a-z0-9+.-]*:|#)([^)\s]+)\)")

# The editions of the site: each one's name in the language switch, its language tag, and where its pages are
# inside the site (scripts/build_site.py's EDITIONS writes them there).
EDITIONS = {"en": ("English", "en", ""), "zh": ("中文", "zh-CN", "zh/")}
# What this file writes into a page, in each edition's language.
TEXTS = {
    "en": {
        "colab": "Open in Colab",
        "static_note": "The explorer as the notebook saved it, with the controls' values above the picture. Run the "
                       "notebook (Jupyter, or Colab with the button at the top of this page) to change them.",
        "live_note": "The explorer runs in this page on the numbers the notebook computed: change the layer, the head "
                     "or the view (weights, lines; hover a cell or a token for its values). Its other controls (kind, "
                     "tokens, padding, temperature) need the notebook: Jupyter, or Colab with the button at the top "
                     "of this page.",
        "appendix": "Optional appendix: show or hide",
        "switch": "Read this page in English",
    },
    "zh": {
        "colab": "在 Colab 中打开",
        "static_note": "这是笔记本保存时的探索器，图上方是各个控件当时的取值。要改变它们，请运行笔记本（Jupyter，"
                       "或者用本页顶部的按钮在 Colab 中打开）。",
        "live_note": "探索器就在本页中运行，用的是笔记本算出的数值：可以切换层、头或视图（权重表、连线；把鼠标停在"
                     "一个格子或一个词元上可以看到它的数值）。其余控件（注意力种类、词元、填充、温度）需要笔记本："
                     "Jupyter，或者用本页顶部的按钮在 Colab 中打开。",
        "appendix": "选读附录：展开或折叠",
        "switch": "阅读本页的中文版",
    },
}


# --- notebooks -------------------------------------------------------------------------------------------------


def _options(state: dict) -> list[str]:
    return state.get("_options_labels") or [str(o) for o in state.get("options", [])]


def _control_value(model: dict) -> str | None:
    """The value a control showed when the notebook was saved, as text (None for a model that is no control)."""
    name, state = model["model_name"], model["state"]
    if name in {"DropdownModel", "ToggleButtonsModel", "SelectionSliderModel", "RadioButtonsModel", "SelectModel"}:
        index, options = state.get("index"), _options(state)
        return options[index] if isinstance(index, int) and 0 <= index < len(options) else ""
    if name in {"IntSliderModel", "FloatSliderModel", "IntTextModel", "FloatTextModel", "BoundedIntTextModel",
                "BoundedFloatTextModel", "TextModel", "TextareaModel", "CheckboxModel", "ToggleButtonModel"}:
        return str(state.get("value", ""))
    return None


def _hidden(state: dict, models: dict) -> bool:
    """Whether the widget was hidden (its layout's display "none", or visibility "hidden") in the saved state."""
    layout = models.get(str(state.get("layout", "")).removeprefix("IPY_MODEL_"), {}).get("state", {})
    return layout.get("display") == "none" or layout.get("visibility") == "hidden"


def widget_html(model_id: str, models: dict) -> str:
    """Static HTML for the widget `model_id` as the notebook saved it: boxes become <div>s, HTML and Label widgets
    their content, a progress bar a <progress>, a control a line "description: value"; hidden widgets are left out."""
    model = models.get(model_id)
    if model is None or _hidden(model["state"], models):
        return ""
    name, state = model["model_name"], model["state"]
    if name.endswith("BoxModel"):
        children = [widget_html(ref.removeprefix("IPY_MODEL_"), models) for ref in state.get("children", [])]
        kind = "row" if name == "HBoxModel" else "column"
        return f'<div class="widget-static widget-static-{kind}">{"".join(c for c in children if c)}</div>'
    if name in {"HTMLModel", "HTMLMathModel"}:
        return f'<div class="widget-static-html">{state.get("value", "")}</div>' if state.get("value") else ""
    if name == "LabelModel":
        return f'<span class="widget-static-label">{html.escape(str(state.get("value", "")))}</span>'
    if name in {"FloatProgressModel", "IntProgressModel"}:
        value, top = float(state.get("value", 0)), float(state.get("max", 100))
        return f'<progress class="widget-static-progress" value="{value:g}" max="{top:g}"></progress>'
    value = _control_value(model)
    if value is None:
        return ""
    label = html.escape(str(state.get("description", "")).strip() or name.removesuffix("Model"))
    return f'<span class="widget-static-control"><span>{label}</span> {html.escape(value)}</span>'


def _is_explorer(markup: str) -> bool:
    return 'class="attn-picture"' in markup


def static_widget_output(view: dict, models: dict, language: str = "en") -> str:
    markup = widget_html(view["model_id"], models)
    if _is_explorer(markup):
        note = f'<p class="widget-static-note">{html.escape(TEXTS[language]["static_note"])}</p>'
        return f'<div class="widget-static-explorer">{note}{markup}</div>'
    return markup


def explorer_output(view: dict, models: dict, page: str | None, language: str = "en") -> str:
    """The HTML of a widget output: its static copy (`static_widget_output`), and for an explorer whose standalone
    `page` the notebook saved, that page too, held escaped in a data- attribute (hidden: series.js makes it a live
    <iframe> and hides the static copy; without scripts the static copy is what a reader sees)."""
    markup = static_widget_output(view, models, language)
    if not page or not _is_explorer(markup):
        return markup
    note = f'<p class="explorer-live-note">{html.escape(TEXTS[language]["live_note"])}</p>'
    live = f'<div class="explorer-live" hidden data-page="{html.escape(page, quote=True)}">{note}</div>'
    return f'<div class="explorer">{live}{markup}</div>'


def repository_link(target: str, notebook: str, repository: str) -> str:
    """The address in the repository of `target`, a path relative to the notebook whose path in the repository is
    `notebook` (a file outside the site; links between notebooks stay as they are)."""
    path, _, anchor = target.partition("#")
    if path.endswith(".ipynb") and "/" not in path:
        return target
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(notebook), path))
    return f"{repository}/blob/main/{resolved}" + (f"#{anchor}" if anchor else "")


def adapt_notebook(text: str, notebook: str = "notebooks/notebook", repository: str = "", language: str = "en") -> str:
    """The notebook JSON `text`, at `notebook` in the repository (without its suffix: notebooks/zh/00_recap for a
    Chinese one), adapted for a page without a kernel in `language` (see the module's docstring); relative links to
    other files of the repository point into `repository`."""
    nb = json.loads(text)
    models = nb.get("metadata", {}).pop("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    colab = html.escape(TEXTS[language]["colab"])
    for cell in nb["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "markdown":
            source = COLAB_BADGE.sub(lambda m: f'<a class="colab-link" href="{m.group(1)}">{colab}</a>', source)
            source = RELATIVE_LINK.sub(lambda m: f"]({repository_link(m.group(1), notebook, repository)})", source)
        elif cell["cell_type"] == "code":
            source = "\n".join(line for line in source.split("\n") if line.strip() != "# NBVAL_IGNORE_OUTPUT")
            tags = cell.setdefault("metadata", {}).setdefault("tags", [])
            if "colab-setup" in tags and "hide-input" not in tags:
                tags.append("hide-input")
            for output in cell.get("outputs", []):
                data = output.get("data", {})
                if WIDGET_VIEW in data:
                    page = output.get("metadata", {}).pop(EXPLORER_PAGE, None)
                    markup = explorer_output(data[WIDGET_VIEW], models, page, language)
                    output["data"] = {"text/html": markup} if markup else {"text/plain": ""}
        cell["source"] = source
    return json.dumps(nb)


def repository_path(docname: str, notebooks: str) -> str:
    """Where the notebook of the page `docname` (notebooks/NN_name) is in the repository, for an edition whose
    notebooks are in the folder `notebooks` (notebooks, or notebooks/zh)."""
    return posixpath.join(notebooks, docname.removeprefix("notebooks/"))


def on_source_read(app, docname: str, source: list[str]) -> None:
    if app.env.doc2path(docname).suffix == ".ipynb":
        notebook = repository_path(docname, app.config.series_notebooks)
        source[0] = adapt_notebook(source[0], notebook, app.config.series_repository, app.config.series_language)


# --- the page's header: the Colab button, the language switch ---------------------------------------------------


def colab_url(url: str, docname: str, notebooks: str) -> str:
    """The theme's Colab address for the page `docname`, which names the notebook's path on the site
    (.../blob/BRANCH/notebooks/NN.ipynb), made to name its path in the repository (.../notebooks/zh/NN.ipynb for a
    Chinese page). An address that does not end with the page's path is returned as it is."""
    page = f"/{docname}.ipynb"
    if not url.endswith(page):
        return url
    return url.removesuffix(page) + f"/{repository_path(docname, notebooks)}.ipynb"


def language_switch(pagename: str, language: str) -> list[dict]:
    """The editions' links of the page `pagename` in the edition `language`: for each edition its name, language
    tag, and the address of the same page in it, relative to this page; `current` marks this page's own."""
    here = EDITIONS[language][2] + pagename
    links = []
    for code, (label, tag, prefix) in EDITIONS.items():
        target = posixpath.relpath(prefix + pagename + ".html", posixpath.dirname(here) or ".")
        links.append({"label": label, "lang": tag, "href": target, "current": code == language,
                      "title": TEXTS[code]["switch"]})
    return links


def add_language_switch(app, pagename: str, templatename: str, context: dict, doctree) -> None:
    """The editions' links for the template language-switch.html. Runs before the theme drops the header's templates
    that render empty (pydata-sphinx-theme's update_and_remove_templates, priority 500), which renders them then."""
    context["series_editions"] = language_switch(pagename, app.config.series_language)


def fix_colab_button(app, pagename: str, templatename: str, context: dict, doctree) -> None:
    """The Colab button of a page opens this edition's notebook. Runs after the theme has made the header's buttons
    (sphinx-book-theme's add_launch_buttons, priority 501)."""
    for group in context.get("header_buttons", []):
        for button in group.get("buttons", []) if group.get("label") == "launch-buttons" else []:
            if button.get("text") == "Colab":
                button["url"] = colab_url(button["url"], pagename, app.config.series_notebooks)


# --- appendices ------------------------------------------------------------------------------------------------


class appendix_body(nodes.General, nodes.Element):  # noqa: N801 (docutils names nodes in lower case)
    """The content of an appendix section, below its heading: a <details> element, folded."""


def visit_appendix_body(self, node) -> None:
    self.body.append(f'<details class="appendix-body"><summary>{html.escape(node["summary"])}</summary>')


def depart_appendix_body(self, node) -> None:
    self.body.append("</details>")


def fold_appendices(app, doctree, docname: str) -> None:
    for section in list(doctree.findall(nodes.section)):
        title = section.next_node(nodes.title)
        if title is None or title.parent is not section or not APPENDIX.match(title.astext()):
            continue
        if any(isinstance(a, nodes.section) and "appendix" in a["classes"] for a in _ancestors(section)):
            continue
        section["classes"].append("appendix")
        body = appendix_body(summary=TEXTS[app.config.series_language]["appendix"])
        body.extend(section.children[1:])
        section.children = section.children[:1]
        section.append(body)
        body.parent = section


def _ancestors(node):
    node = node.parent
    while node is not None:
        yield node
        node = node.parent


# --- MathJax ---------------------------------------------------------------------------------------------------


def copy_mathjax(app, exception) -> None:
    """tex-chtml.js and the components it loads on demand (TeX extensions, fonts, the menu's accessibility code)."""
    if exception is not None or app.builder.format != "html":
        return
    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    if spec is None or spec.origin is None:
        raise RuntimeError("MathJax is missing: pip install sphinx-mathjax-offline (the site extra)")
    source = Path(spec.origin).parent / "static" / "mathjax"
    target = Path(app.outdir) / "_static" / "mathjax"
    stamp = target / ".copied-from"  # the copy is done once per MathJax installation, not at every build
    if stamp.exists() and stamp.read_text() == f"{source} {(source / 'tex-chtml.js').stat().st_mtime_ns}":
        return
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source / "tex-chtml.js", target / "tex-chtml.js")
    for folder in source.iterdir():
        if folder.is_dir():
            shutil.copytree(folder, target / folder.name, dirs_exist_ok=True)
    stamp.write_text(f"{source} {(source / 'tex-chtml.js').stat().st_mtime_ns}")


def chinese_search():
    """Sphinx's Chinese search, its stemmer's JavaScript name made to match the stemmer it ships, or None when that
    is already so. Sphinx 9's SearchChinese stems Latin words with the English Snowball stemmer
    (js_stemmer_rawcode english-stemmer.js, which defines EnglishStemmer) but ends language_data.js with
    `window.Stemmer = ChineseStemmer` (from its language_name): every Chinese page then logs "ChineseStemmer is not
    defined" and its search finds nothing. The JavaScript stemmer must be the one the index was stemmed with."""
    from sphinx.search.zh import SearchChinese

    if SearchChinese.js_stemmer_rawcode != "english-stemmer.js" or SearchChinese.language_name == "English":
        return None

    class SearchChineseEnglishStemmer(SearchChinese):
        language_name = "English"  # names only the JavaScript stemmer, EnglishStemmer

    return SearchChineseEnglishStemmer


def check_language(app, config) -> None:
    if config.series_language not in TEXTS:
        raise ValueError(f"series_language must be one of {sorted(TEXTS)}, not {config.series_language!r}")


def setup(app):
    app.add_config_value("series_repository", "", "env", types=[str])
    app.add_config_value("series_language", "en", "env", types=[str])
    app.add_config_value("series_notebooks", "notebooks", "env", types=[str])
    # This file's digest: a change here re-reads every page, as a change of conf.py does.
    app.add_config_value("series_digest", hashlib.sha256(Path(__file__).read_bytes()).hexdigest(), "env", types=[str])
    app.add_node(appendix_body, html=(visit_appendix_body, depart_appendix_body))
    app.connect("config-inited", check_language)
    if (search := chinese_search()) is not None:
        app.add_search_language(search)
    app.connect("source-read", on_source_read)
    app.connect("doctree-resolved", fold_appendices)
    app.connect("html-page-context", add_language_switch, priority=400)
    app.connect("html-page-context", fix_colab_button, priority=600)
    app.connect("build-finished", copy_mathjax)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
