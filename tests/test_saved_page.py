"""A saved explorer page opened from disk in headless Chromium, the network blocked: it loads nothing, its script
runs without error, a head change and a layer change redraw it with the numbers of the weights passed in (checked
cell by cell), the lines view answers a hover on a token by showing only that token's lines, and a view change
draws the lines; a saved model view opens a head on a click and its "save SVG" button downloads the
picture shown. Skipped without /usr/bin/chromium, unless ATTENTION_REQUIRE_BROWSER=1."""

from __future__ import annotations

import pytest
import torch
from browser import chromium, need_browser

from attention_lib.viz import head_view, model_view

pytestmark = pytest.mark.browser
TOKENS = "the cat sat on the warm mat".split()
STATE = "() => ({...document.getElementById('attn-picture').dataset})"
TITLES = "() => Array.from(document.querySelectorAll('#attn-picture rect.cell title')).map((t) => t.textContent)"
VISIBLE = """() => Array.from(document.querySelectorAll('.attn-lines .by-q > g')).map((g) =>
  Array.from(g.querySelectorAll('line')).filter((l) => l.checkVisibility({visibilityProperty: true})).length)"""


def test_a_saved_page_works_from_disk_offline(tmp_path):
    need_browser(pytest)
    g = torch.Generator().manual_seed(0)
    att = tuple((torch.randn(1, 4, 7, 7, generator=g) * 2).softmax(-1) for _ in range(3))
    explorer = head_view(att, TOKENS, layer=1, heads=[2])
    path = explorer.save_html(tmp_path / "attention.html")
    requests, errors = [], []
    with chromium() as browser:
        page = browser.new_page()
        page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort())
        page.on("request", lambda request: requests.append(request.url))
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(path.as_uri())
        assert page.evaluate(STATE) | {"render": None} == {"layer": "1", "head": "2", "view": "lines", "render": None}
        still = page.evaluate(VISIBLE)
        page.locator(".attn-lines .by-q > g .tok").nth(4).hover()
        hovered = page.evaluate(VISIBLE)
        assert hovered[4] == still[4] > 0 and sum(hovered) == hovered[4]  # only the hovered query's lines
        page.mouse.move(0, 0)
        for layer, head in ((1, 3), (2, 0)):
            page.select_option("#attn-view", "weights")
            page.select_option("#attn-layer", str(layer))
            page.select_option("#attn-head", str(head))
            state = page.evaluate(STATE)
            assert (state["layer"], state["head"], state["view"]) == (str(layer), str(head), "weights")
            shown = [float(t.split(": ")[1]) for t in page.evaluate(TITLES)]
            assert shown == [round(float(w), 3) for w in att[layer][0, head].flatten()]
        page.select_option("#attn-view", "lines")
        assert page.evaluate(STATE)["view"] == "lines" and sum(page.evaluate(VISIBLE)) > 0
    assert requests == [path.as_uri()] and errors == []


def test_a_saved_model_view_opens_a_head_on_a_click_and_saves_its_svg(tmp_path):
    """model_view's page: a thumbnail per layer and head; a click on one draws that head's weights (checked cell by
    cell); the "save SVG" button downloads the picture shown, the series' CSS inside it."""
    need_browser(pytest)
    g = torch.Generator().manual_seed(1)
    att = tuple((torch.randn(1, 3, 5, 5, generator=g) * 2).softmax(-1) for _ in range(2))
    path = tmp_path / "model.html"
    path.write_text(model_view(att, "a b c d e", html_action="return").data, encoding="utf-8")
    errors = []
    with chromium() as browser:
        page = browser.new_page(accept_downloads=True)
        page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort())
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(path.as_uri())
        assert page.evaluate(STATE)["view"] == "model"
        thumbs = page.locator("#attn-picture g.thumb")
        assert thumbs.count() == 6 and page.locator("#attn-picture g.thumb image").count() == 6
        page.locator('#attn-picture g.thumb[data-layer="1"][data-head="2"]').click()
        state = page.evaluate(STATE)
        assert (state["layer"], state["head"], state["view"]) == ("1", "2", "weights")
        shown = [float(t.split(": ")[1]) for t in page.evaluate(TITLES)]
        assert shown == [round(float(w), 3) for w in att[1][0, 2].flatten()]
        drawn = page.evaluate("() => document.querySelector('#attn-picture svg').outerHTML")
        with page.expect_download() as download:
            page.click("#attn-save")
        saved = tmp_path / download.value.suggested_filename
        download.value.save_as(saved)
    text = saved.read_text()
    assert saved.name == "attention-bidirectional-weights-layer1-head2.svg" and text.startswith("<svg")
    assert "<style>" in text and text.replace(text[text.index("<style>"):text.index("</style>") + 8], "") == drawn
    assert errors == []
