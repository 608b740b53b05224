"""End to end in a real browser: JupyterLab and Notebook 7 serve a notebook with the explorer; headless Chromium
runs it.

The explorer runs a stack of three seeded random layers on 16 tokens (S = 16, the longest it shows), so that every
view and the layer selector are there. In JupyterLab the test switches the layer, the head, the view (all heads,
lines, compare), the kind, the padding (keyboard on the slider) and the tokens (typing), and after each change checks
that the page shows the picture the same explorer draws in this process for the same settings (its digest), then
hovers tokens in the lines view and checks with the browser's computed styles that only the hovered token's lines
are visible; it switches once to a kind registered by notebook 08 (sliding window). Bad input (a 17th token) must
leave a message and the last picture, faded. In Notebook 7 it runs the notebook again and drives every view there
too, each checked against the picture drawn in this process: the layer and the head in the single-head view, the
compare view with head B in another layer, and cross attention in the lines (hover included) and all-heads views.
Then recorded weights, bertviz's route: `head_view` on an encoder-decoder's three attentions, in JupyterLab and in
Notebook 7, each picture checked against this process's and the weights table cell by cell against the tensors.
Each change's latency (from the input event to the painted picture) goes to test-artifacts/browser-latency.json,
screenshots to test-artifacts/ (a record, not a timed test: the benchmark is benchmarks/explorer.py).

Without /usr/bin/chromium the test is skipped, unless ATTENTION_REQUIRE_BROWSER=1 (CI), which makes it fail.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from browser import (
    act,
    choose,
    chromium,
    control,
    jupyter_lab,
    need_browser,
    open_notebook,
    press,
    slide,
    type_text,
    wait_for_picture,
)

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
TOKENS = "the quick brown fox jumps over the lazy dog while the cat sleeps on a mat"  # 16 tokens
KINDS = ("bidirectional", "causal", "cross", "sliding window")
SOURCE = f"""import torch
from attention_lib import BidirectionalAttention
from attention_lib.viz import explore_attention

torch.manual_seed(0)
layers = [BidirectionalAttention(16, 4) for _ in range(3)]
explorer = explore_attention(layers, tokens={TOKENS!r}, hidden_size=16, num_heads=4, kinds={KINDS!r})
explorer"""

# Which lines are visible, by the browser's own CSS, in each token group of the lines picture.
VISIBLE_LINES = """() => {
  const count = (sel) => Array.from(document.querySelectorAll(sel)).map(
    (g) => Array.from(g.querySelectorAll('line')).filter((l) => l.checkVisibility({visibilityProperty: true})).length);
  return {queries: count('.attn-lines .by-q > g'), keys: count('.attn-lines .by-k > g'),
          values: Array.from(document.querySelectorAll('.attn-lines .val')).filter(
            (t) => t.checkVisibility({visibilityProperty: true})).length};
}"""


RECORDED = """import torch
from attention_lib.viz import head_view

g = torch.Generator().manual_seed(0)
enc, dec, cross = ([(torch.randn(1, 4, S, S_kv, generator=g) * 2 + mask).softmax(-1) for _ in range(2)]
                   for S, S_kv, mask in ((7, 7, 0), (5, 5, torch.full((5, 5), -torch.inf).triu(1)), (5, 7, 0)))
explorer = head_view(encoder_attention=enc, decoder_attention=dec, cross_attention=cross,
                     encoder_tokens="le chat dort sur le tapis .", decoder_tokens="the cat sleeps . </s>")"""


def recorded(**settings):
    """The recorded-weights explorer of RECORDED in this process, set as given: (explorer, its namespace)."""
    namespace: dict = {}
    exec(RECORDED, namespace)
    namespace["explorer"].set(**settings)
    return namespace["explorer"], namespace


def expected_digest(**settings) -> str:
    """The digest of the picture this explorer draws for these settings, in this process."""
    import torch

    from attention_lib import BidirectionalAttention
    from attention_lib.viz import explore_attention

    torch.manual_seed(0)
    layers = [BidirectionalAttention(16, 4) for _ in range(3)]
    explorer = explore_attention(layers, tokens=TOKENS, hidden_size=16, num_heads=4, kinds=KINDS)
    explorer.set(**settings)
    digest = explorer._attrs["digest"]
    explorer.close()
    return digest


def check_lines_hover(page, shot: str) -> None:
    """Hover a query, then a key: only that token's lines stay visible (and their values appear)."""
    lines = page.locator(".attn-lines")
    still = page.evaluate(VISIBLE_LINES)
    assert sum(still["queries"]) > 0 and sum(still["keys"]) == 0 and still["values"] == 0
    lines.locator(".by-q > g .tok").nth(3).hover()
    hovered = page.evaluate(VISIBLE_LINES)
    assert hovered["queries"][3] == still["queries"][3] > 0 and sum(hovered["queries"]) == hovered["queries"][3]
    assert hovered["values"] == hovered["queries"][3]
    page.locator(".attn-picture").screenshot(path=str(ARTIFACTS / f"{shot}-hover-query.png"))
    lines.locator(".by-k > g .tok").nth(1).hover()
    hovered = page.evaluate(VISIBLE_LINES)
    assert sum(hovered["queries"]) == 0 and sum(hovered["keys"]) == hovered["keys"][1] > 0
    page.locator(".attn-picture").screenshot(path=str(ARTIFACTS / f"{shot}-hover-key.png"))
    page.mouse.move(0, 0)


class Reader:
    """Acts on the explorer of one page and records how long each change took to be painted."""

    def __init__(self, page):
        self.page, self.latencies = page, {}

    def step(self, name: str, action, condition, settings: dict) -> dict:
        """Do `action`; the page must then show exactly the picture this process draws for `settings`."""
        state = act(self.page, action, condition)
        assert state["stale"] == "0" and state["message"] == "", state
        assert state["digest"] == expected_digest(**settings), f"{name}: the page does not show the expected picture"
        self.latencies.setdefault(name, []).append(state["latency_ms"])
        return state


def in_jupyterlab(reader: Reader) -> dict:
    """Every view, the layer and head selectors, hover in the lines view, the kind, typing, the padding slider, and bad
    input; returns the first picture's state."""
    page, step = reader.page, reader.step
    start = wait_for_picture(page, lambda s: s["view"] == "weights")
    explorer = page.locator(".attn-explorer")
    explorer.screenshot(path=str(ARTIFACTS / "lab-1-weights-S16.png"))
    assert start["seqLen"] == "16" and start["layer"] == "0" and start["digest"] == expected_digest()
    assert not control(page, "context").is_visible() and not control(page, "pad side").is_visible()
    assert start["width"] < 1000  # shown at its natural size, inside the notebook, nothing scaled or clipped
    step("layer", lambda: choose(page, "layer", "2"), lambda s: s["layer"] == "2", {"layer": 2})
    step("head", lambda: choose(page, "head", "3"), lambda s: s["head"] == "3", {"layer": 2, "head": 3})
    base = {"layer": 2, "head": 3}
    step("view", lambda: press(page, "view", "all heads"), lambda s: s["view"] == "all heads",
         {**base, "view": "all heads"})
    assert not control(page, "head").is_visible()  # it does not apply: every head is shown
    page.locator(".attn-picture").screenshot(path=str(ARTIFACTS / "lab-2-all-heads-S16.png"))
    step("view", lambda: press(page, "view", "lines"), lambda s: s["view"] == "lines", {**base, "view": "lines"})
    check_lines_hover(page, "lab-3-lines-S16")
    step("view", lambda: press(page, "view", "compare"), lambda s: s["view"] == "compare", {**base, "view": "compare"})
    base["head_b"] = 1
    step("head", lambda: choose(page, "B: head", "1"), lambda s: s["headB"] == "1", {**base, "view": "compare"})
    page.locator(".attn-picture").screenshot(path=str(ARTIFACTS / "lab-4-compare-S16.png"))
    step("view", lambda: press(page, "view", "weights"), lambda s: s["view"] == "weights", base)
    base["kind"] = "causal"
    step("kind", lambda: choose(page, "kind", "causal"), lambda s: s["kind"] == "causal", base)
    base["tokens"] = "a short causal sentence"
    step("tokens", lambda: type_text(page, "tokens", base["tokens"]), lambda s: s["seqLen"] == "4", base)
    step("padding", lambda: slide(page, "padding"), lambda s: s["pad"] == "1", {**base, "pad": 1})
    state = step("padding", lambda: slide(page, "padding"), lambda s: s["pad"] == "2", {**base, "pad": 2})
    assert state["mask"] == "100000/110000/111000/111100/111100/111100" and control(page, "pad side").is_visible()
    explorer.screenshot(path=str(ARTIFACTS / "lab-5-causal-padding.png"))
    base |= {"kind": "sliding window", "pad": 2}  # notebook 08's kind: the band of the last 3 keys, the padding hidden
    state = step("kind", lambda: choose(page, "kind", "sliding window"), lambda s: s["kind"] == "sliding window", base)
    assert state["mask"] == "100000/110000/111000/011100/001100/000100"
    explorer.screenshot(path=str(ARTIFACTS / "lab-6-sliding-window.png"))
    bad = act(page, lambda: type_text(page, "tokens", TOKENS + " again"), lambda s: s["stale"] == "1")
    assert "at most max_len = 16" in bad["message"] and bad["digest"] == state["digest"]  # the last picture, faded
    explorer.screenshot(path=str(ARTIFACTS / "lab-7-bad-input.png"))
    return start


def in_notebook_7(reader: Reader, start: dict) -> None:
    """The same notebook run again in Notebook 7: a fresh explorer; the layer and the head in the single-head view;
    the compare view with head B in another layer; then cross attention in the lines and all-heads views."""
    page, step = reader.page, reader.step
    fresh = wait_for_picture(page, lambda s: s["pad"] == "0" and s["kind"] == "bidirectional")
    assert fresh["digest"] == start["digest"]
    step("layer", lambda: choose(page, "layer", "1"), lambda s: s["layer"] == "1", {"layer": 1})
    step("head", lambda: choose(page, "head", "2"), lambda s: s["head"] == "2", {"layer": 1, "head": 2})
    page.locator(".attn-explorer").screenshot(path=str(ARTIFACTS / "notebook7-1-weights-layer1-head2.png"))
    base = {"layer": 1, "head": 2, "view": "compare"}
    step("view", lambda: press(page, "view", "compare"), lambda s: s["view"] == "compare", base)
    step("layer", lambda: choose(page, "B: layer", "2"), lambda s: s["layerB"] == "2", {**base, "layer_b": 2})
    state = step("head", lambda: choose(page, "B: head", "3"), lambda s: s["headB"] == "3",
                 {**base, "layer_b": 2, "head_b": 3})
    assert (state["layer"], state["head"]) == ("1", "2")
    page.locator(".attn-explorer").screenshot(path=str(ARTIFACTS / "notebook7-2-compare-layer1-head2-layer2-head3.png"))
    step("view", lambda: press(page, "view", "weights"), lambda s: s["view"] == "weights",
         {"layer": 1, "head": 2, "layer_b": 2, "head_b": 3})
    cross = {"kind": "cross", "head": 2, "head_b": 3}  # one cross layer: both layer selectors go back to 0
    step("kind", lambda: choose(page, "kind", "cross"), lambda s: s["kind"] == "cross", cross)
    assert control(page, "context").is_visible() and not control(page, "layer").is_visible()  # one cross layer
    step("view", lambda: press(page, "view", "lines"), lambda s: s["view"] == "lines", {**cross, "view": "lines"})
    check_lines_hover(page, "notebook7-3-cross-lines")
    state = step("view", lambda: press(page, "view", "all heads"), lambda s: s["view"] == "all heads",
                 {**cross, "view": "all heads"})
    page.locator(".attn-explorer").screenshot(path=str(ARTIFACTS / "notebook7-4-cross-all-heads.png"))
    assert state["kvLen"] == "7"


def recorded_weights(page, shot: str) -> None:
    """head_view's explorer: opens on the encoder's lines; the head, the kind (by its label), the layer and the view
    change it, each picture the one this process draws; the weights table holds the tensors' numbers."""
    def check(state: dict, **settings) -> None:
        explorer, _ = recorded(**settings)
        assert state["stale"] == "0" and state["message"] == "" and state["digest"] == explorer._attrs["digest"]
        explorer.close()

    check(wait_for_picture(page, lambda s: s["view"] == "lines" and s["kind"] == "bidirectional"))
    check(act(page, lambda: choose(page, "head", "2"), lambda s: s["head"] == "2"), head=2)
    check_lines_hover(page, f"{shot}-encoder-lines")
    base = {"head": 2, "kind": "cross"}
    check(act(page, lambda: choose(page, "kind", "cross (decoder → encoder)"), lambda s: s["kind"] == "cross"), **base)
    check(act(page, lambda: choose(page, "layer", "1"), lambda s: s["layer"] == "1"), **base, layer=1)
    state = act(page, lambda: press(page, "view", "weights"), lambda s: s["view"] == "weights")
    check(state, **base, layer=1, view="weights")
    assert (state["seqLen"], state["kvLen"]) == ("5", "7")
    _, namespace = recorded()
    titles = page.locator(".attn-picture rect.cell title").all_text_contents()
    expected = [round(float(w), 3) for w in namespace["cross"][1][0, 2].flatten()]  # layer 1, head 2
    assert [float(t.split(": ")[1]) for t in titles] == expected
    check(act(page, lambda: choose(page, "kind", "decoder"), lambda s: s["kind"] == "causal"),
          **{**base, "kind": "causal"}, layer=1, view="weights")
    page.locator(".attn-explorer").screenshot(path=str(ARTIFACTS / f"{shot}-decoder-weights.png"))


def test_every_view_in_jupyterlab_and_notebook_7(tmp_path):
    need_browser(pytest)
    ARTIFACTS.mkdir(exist_ok=True)
    notebooks = {"explorer.ipynb": SOURCE, "recorded.ipynb": RECORDED + "\nexplorer"}
    with jupyter_lab(tmp_path, notebooks) as lab, chromium() as browser:
        reader = Reader(open_notebook(browser, lab, "explorer.ipynb"))
        try:
            start = in_jupyterlab(reader)
            open_notebook(browser, lab, "explorer.ipynb", ui="notebooks", page=reader.page)
            in_notebook_7(reader, start)
            recorded_weights(open_notebook(browser, lab, "recorded.ipynb", ui="notebooks", page=reader.page),
                             "notebook7-recorded")
            reader.page.close()
            reader.page = open_notebook(browser, lab, "recorded.ipynb", workspace="recorded")  # one explorer in it
            recorded_weights(reader.page, "lab-recorded")
        except BaseException:
            reader.page.screenshot(path=str(ARTIFACTS / "browser-failure.png"), full_page=True)
            raise
    record = {name: [round(ms, 1) for ms in values] for name, values in reader.latencies.items()}
    (ARTIFACTS / "browser-latency.json").write_text(json.dumps(record, indent=1))
    assert all(ms > 0 for values in reader.latencies.values() for ms in values)
