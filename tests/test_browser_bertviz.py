"""bertviz's route end to end in a real browser: `model_view` and the head view on the output_attentions of a
BERT-style model (a seeded random transformers BertModel, a sentence pair), and `model_view` on an encoder-decoder's
(a seeded random BartModel) encoder, decoder and cross attentions, each in JupyterLab and in Notebook 7.

In each: the explorer opens on the model view, a thumbnail per layer and head, each a PNG; a click on one opens that
layer and head in the weights view, whose cells hold the tensor passed in (checked value by value); for BERT, the
"sentences" menu keeps the block A → B of the same tensor, the lines view (bertviz's head view) shows the picture this
process draws for the same settings, and the "save SVG" button offers the picture shown as a download, the SVG this
process writes for those settings. Skipped without /usr/bin/chromium, unless ATTENTION_REQUIRE_BROWSER=1."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest
from browser import act, choose, chromium, jupyter_lab, need_browser, open_notebook, press, wait_for_picture

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
BERT = """import torch
from transformers import BertConfig, BertModel
from attention_lib.viz import model_view

torch.manual_seed(0)
bert = BertModel(BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                            intermediate_size=64)).eval()
bert.set_attn_implementation("eager")  # the attention that returns its weights
tokens = "[CLS] the cat sat [SEP] it was warm [SEP]".split()  # sentence B starts at 5
with torch.no_grad():
    attention = bert(input_ids=torch.arange(1, 10)[None], token_type_ids=torch.tensor([[0] * 5 + [1] * 4]),
                     output_attentions=True).attentions  # 3 x (1, 4, 9, 9)
explorer = model_view(attention, tokens, sentence_b_start=5)"""
BART = """import torch
from transformers import BartConfig, BartModel
from attention_lib.viz import model_view

torch.manual_seed(0)
config = BartConfig(vocab_size=64, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                    decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=32)
bart = BartModel(config).eval()
bart.set_attn_implementation("eager")
with torch.no_grad():
    out = bart(input_ids=torch.arange(3, 10)[None], decoder_input_ids=torch.arange(20, 24)[None],
               output_attentions=True)
explorer = model_view(encoder_attention=out.encoder_attentions, decoder_attention=out.decoder_attentions,
                      cross_attention=out.cross_attentions, encoder_tokens="<s> le chat dort sur le tapis".split(),
                      decoder_tokens="</s> the cat sleeps".split())"""
THUMBS = "() => Array.from(document.querySelectorAll('.attn-thumb')).map((b) => getComputedStyle(b).backgroundImage)"


def made(source: str, **settings):
    """The explorer of `source`, made in this process and set as given: (explorer, its namespace)."""
    namespace: dict = {}
    exec(source, namespace)
    if settings:
        namespace["explorer"].set(**settings)
    return namespace["explorer"], namespace


def cell_values(page, n: int) -> list[str]:
    """The values in the hover titles of the weights table's n cells (drawn after the mask's table, if there is one)."""
    titles = page.locator(".attn-picture rect.cell title").all_text_contents()
    return [t.split(": ")[1] for t in titles[-n:]]


def rounded(weights) -> list[str]:
    """What the table's titles say of these weights: 3 decimals, "hidden" for a key the mask hides (weight 0)."""
    return [f"{float(w):.3f}" if w > 0 else "hidden" for w in weights.flatten()]


def check_model_view(page, layers: int, heads: int) -> None:
    """The model view: one thumbnail per layer and head, each button painted with a PNG."""
    wait_for_picture(page, lambda s: s["view"] == "model")
    backgrounds = page.evaluate(THUMBS)
    assert len(backgrounds) == layers * heads and all(b.startswith('url("data:image/png;base64,') for b in backgrounds)


def bert(page, shot: str, tmp_path: Path) -> None:
    _, ns = made(BERT)
    attention = ns["attention"]
    check_model_view(page, 3, 4)
    page.locator(".attn-explorer").screenshot(path=str(ARTIFACTS / f"{shot}-model-view.png"))
    state = act(page, lambda: page.locator(".attn-thumb-2-1").click(), lambda s: s["view"] == "weights")
    assert (state["layer"], state["head"], state["message"]) == ("2", "1", "")
    assert cell_values(page, attention[2][0, 1].numel()) == rounded(attention[2][0, 1])
    state = act(page, lambda: choose(page, "sentences", "Sentence A → Sentence B"), lambda s: s["kvLen"] == "4")
    block = attention[2][0, 1, :5, 5:]  # queries of sentence A, keys of sentence B
    assert state["seqLen"] == "5" and cell_values(page, block.numel()) == rounded(block)
    state = act(page, lambda: press(page, "view", "lines"), lambda s: s["view"] == "lines")
    explorer, _ = made(BERT, layer=2, head=1, pair="A → B", view="lines")
    assert state["digest"] == explorer._attrs["digest"]
    page.locator(".attn-explorer").screenshot(path=str(ARTIFACTS / f"{shot}-lines-A-to-B.png"))
    page.locator(".attn-save").click()
    link = page.locator("a.attn-download")
    link.wait_for(timeout=30_000)
    assert link.get_attribute("download") == "attention-bidirectional-lines-layer2-head1.svg"
    saved = base64.b64decode(re.sub("^data:image/svg\\+xml;base64,", "", link.get_attribute("href"))).decode()
    assert saved == explorer.save_image(tmp_path / f"{shot}.svg").read_text()
    explorer.close()


def bart(page, shot: str) -> None:
    _, ns = made(BART)
    out = ns["out"]
    check_model_view(page, 2, 4)  # the encoder's layers first
    state = act(page, lambda: choose(page, "kind", "cross (decoder → encoder)"), lambda s: s["kind"] == "cross")
    assert state["view"] == "model" and (state["seqLen"], state["kvLen"]) == ("4", "7")
    page.locator(".attn-explorer").screenshot(path=str(ARTIFACTS / f"{shot}-cross-model-view.png"))
    state = act(page, lambda: page.locator(".attn-thumb-1-3").click(), lambda s: s["view"] == "weights")
    assert (state["kind"], state["layer"], state["head"]) == ("cross", "1", "3")
    assert cell_values(page, out.cross_attentions[1][0, 3].numel()) == rounded(out.cross_attentions[1][0, 3])
    for label, kind, weights in (("decoder", "causal", out.decoder_attentions),
                                 ("encoder", "bidirectional", out.encoder_attentions)):
        state = act(page, lambda label=label: choose(page, "kind", label), lambda s, kind=kind: s["kind"] == kind)
        assert (state["layer"], state["head"]) == ("1", "3")
        assert cell_values(page, weights[1][0, 3].numel()) == rounded(weights[1][0, 3])


def test_model_view_and_head_view_of_hugging_face_attentions_in_jupyterlab_and_notebook_7(tmp_path):
    need_browser(pytest)
    ARTIFACTS.mkdir(exist_ok=True)
    notebooks = {"bert.ipynb": BERT + "\nexplorer", "bart.ipynb": BART + "\nexplorer"}
    with jupyter_lab(tmp_path / "lab", notebooks) as lab, chromium() as browser:
        page = None
        try:
            page = open_notebook(browser, lab, "bert.ipynb", workspace="bert")
            bert(page, "lab-bert", tmp_path)
            page.close()
            page = open_notebook(browser, lab, "bart.ipynb", workspace="bart")
            bart(page, "lab-bart")
            page = open_notebook(browser, lab, "bert.ipynb", ui="notebooks", page=page)
            bert(page, "notebook7-bert", tmp_path)
            page = open_notebook(browser, lab, "bart.ipynb", ui="notebooks", page=page)
            bart(page, "notebook7-bart")
        except BaseException:
            if page is not None:
                page.screenshot(path=str(ARTIFACTS / "browser-bertviz-failure.png"), full_page=True)
            raise
