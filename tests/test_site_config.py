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
