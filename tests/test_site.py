"""The website in a real browser: `scripts/build_site.py` builds it (as `make site` does) into build/site, a local
HTTP server serves it on 127.0.0.1, and headless Chromium visits every page once, every request to another host
refused, as a reader without a network would. The site has two editions, English and Chinese (zh/: the same pages at
the same paths, from notebooks/zh/), and every check below is made on the pages of both.

On every page: HTTP 200; no console error or uncaught exception; no request to another host; every image loaded
(naturalWidth > 0), and each PNG output of a notebook among them; math typeset by the site's own MathJax, without an
error, and no raw TeX left (`$$`, `\\frac`, `\\sqrt`, `\\begin{` outside rendered math and code); no widget left as its
Python repr; every internal link and anchor resolving. Then, page by page: the left table of contents, the in-page
outline, the previous/next chain in reading order, code copy buttons, "Open in Colab" and "Download notebook" (which
serves the committed notebook, byte for byte), the appendices folded under their headings (a link into one opens it),
the exercises visible with their graders' calls; each explorer live (its standalone page in a frame) with its saved
picture kept for readers without scripts, and one of them following a change of head, layer and view, with hover;
and "KV cache" typed into the search field finds notebooks 04 and 08, "KV 缓存" and "因果掩码" on a Chinese page the
Chinese ones; the language switch in each page's header leads to the same page in the other edition. A screenshot of
each page goes to test-artifacts/site/, with the build time and the pages in build.json there.

Without /usr/bin/chromium the test is skipped, unless ATTENTION_REQUIRE_BROWSER=1 (CI), which makes it fail.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import threading
import tomllib
import urllib.parse
from decimal import ROUND_HALF_UP, Decimal
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from browser import chromium, need_browser

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.site

OUT = ROOT / "build" / "site"
ARTIFACTS = ROOT / "test-artifacts" / "site"
NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9]*.ipynb"))
# Each edition: where its pages are in the site, where its notebooks are in the repository, and the titles of the
# sections every notebook has (Summary, Exercises) and of its appendices.
EDITIONS = {
    "en": {"prefix": "", "notebooks": ROOT / "notebooks", "summary": "Summary", "exercises": "Exercises",
           "appendix": "Appendix", "optional": '"optional"', "other": "zh/"},
    "zh": {"prefix": "zh/", "notebooks": ROOT / "notebooks" / "zh", "summary": "小结", "exercises": "练习",
           "appendix": "附录", "optional": '"选读"', "other": ""},
}
REPOSITORY = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
RAW_TEX = re.compile(r"\$\$|\\frac|\\sqrt|\\begin\{")
WIDGET_REPR = re.compile(r"\b[VH]Box\(children=")


def _build_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("site_build", ROOT / "scripts" / "build_site.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # the test reports what matters
        pass


@pytest.fixture(scope="module")
def served():
    """Build the site, serve it on 127.0.0.1; yield its base URL."""
    need_browser(pytest)
    seconds = _build_module().build(OUT)
    pages = sorted(p.relative_to(OUT).as_posix() for p in OUT.glob("**/*.html")
                   if not {"_static", "_sources"} & set(p.relative_to(OUT).parts))
    shutil.rmtree(ARTIFACTS, ignore_errors=True)  # no screenshot of an earlier run is left to mislead
    ARTIFACTS.mkdir(parents=True)
    (ARTIFACTS / "build.json").write_text(json.dumps({"build_seconds": round(seconds, 1), "pages": pages}, indent=1))
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(OUT)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", pages
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def browser(served):
    with chromium() as launched:
        yield launched


class Offline:
    """A browser context that answers only requests to `base`'s host, and records every other one."""

    def __init__(self, browser, base: str):
        self.host = urllib.parse.urlsplit(base).netloc
        self.foreign: list[str] = []
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.context.route("**/*", self._route)

    def _route(self, route) -> None:
        url = route.request.url
        if url.startswith(("data:", "blob:")) or urllib.parse.urlsplit(url).netloc == self.host:
            route.continue_()
        else:
            self.foreign.append(url)
            route.abort()


# Resolves once MathJax has typeset the page (at once on a page without math).
TYPESET = "async () => { if (window.MathJax?.startup?.promise) await MathJax.startup.promise; }"

# What a page holds, read once it has loaded and MathJax has typeset it; last, every <details> is opened (folded
# appendices, the setup cell) and the explorers' pictures are measured.
READ_PAGE = """async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  await Promise.all([...document.images].map((img) => img.complete ? null :
    new Promise((done) => { img.addEventListener('load', done); img.addEventListener('error', done); })));
  const skip = 'mjx-container, script, style, pre, code, textarea, noscript';
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const texts = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode())
    if (!node.parentElement.closest(skip)) texts.push(node.textContent);
  const hrefs = (selector) => [...document.querySelectorAll(selector)].map((a) => a.getAttribute('href'));
  const paths = (selector) => [...document.querySelectorAll(selector)].map((a) => new URL(a.href).pathname);
  const sections = [...document.querySelectorAll('section')].filter((s) => s.querySelector(':scope > h2'))
    .map((s) => {
      const h2 = s.querySelector(':scope > h2'), folded = s.querySelector(':scope > details.appendix-body');
      return {title: h2.textContent.replace('#', '').trim(), folded: folded ? !folded.open : null,
              badge: getComputedStyle(h2, '::after').content,
              summary: folded ? folded.querySelector('summary').textContent : null,
              in_details: !!s.closest('details'), visible: h2.getBoundingClientRect().height > 0,
              code: [...s.querySelectorAll('.cell_input pre')].map((p) => p.textContent).join('\\n')};
    });
  const found = {
    text: texts.join(' '),
    images: [...document.images].map((img) => ({src: img.currentSrc || img.src, width: img.naturalWidth})),
    links: [...document.querySelectorAll('a[href]')].map((a) => a.href),
    ids: [...document.querySelectorAll('[id]')].map((e) => e.id)
      .concat([...document.querySelectorAll('a[name]')].map((a) => a.name)),
    math: document.querySelectorAll('mjx-container').length,
    math_errors: [...document.querySelectorAll('mjx-merror')].map((e) => e.textContent),
    math_source: document.querySelectorAll('.math').length,
    sidebar: paths('.bd-sidenav a'),
    outline: [...document.querySelectorAll('nav.page-toc a')].map((a) => a.textContent.trim()),
    previous: paths('.prev-next-area a.left-prev')[0] ?? null,
    next: paths('.prev-next-area a.right-next')[0] ?? null,
    hrefs: hrefs('a[href]'),
    downloads: [...document.querySelectorAll("a[href$='.ipynb']:not([href^='http'])")].map((a) => a.href),
    code_blocks: document.querySelectorAll('.cell_input div.highlight').length,
    copy_buttons: document.querySelectorAll('.cell_input button.copybtn').length,
    sections,
    launch: hrefs('.dropdown-launch-buttons a'),
    switch: [...document.querySelectorAll('.series-language-switch a')].map((a) => ({
      path: new URL(a.href).pathname, label: a.textContent.trim(),
      visible: a.getBoundingClientRect().height > 0 && a.getBoundingClientRect().top >= 0
        && !!a.closest('.bd-header-article')})),
    lang: document.documentElement.lang,
  };
  document.querySelectorAll('details').forEach((d) => { d.open = true; });
  const frames = [...document.querySelectorAll('iframe.explorer-frame')];
  const drawn = (f) => f.contentDocument?.querySelector('#attn-picture svg');
  for (let t = 0; t < 100 && !frames.every(drawn); t++) await new Promise((done) => setTimeout(done, 100));
  await new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)));  // frames fitted, opened
  found.explorers = [...document.querySelectorAll('.widget-static-explorer')].map((e) => {
    const svg = e.querySelector('.attn-picture svg'), frame = e.closest('.explorer')?.querySelector('iframe');
    const picture = frame?.contentDocument?.getElementById('attn-picture'), live = picture?.querySelector('svg');
    return {width: svg ? svg.width.baseVal.value : 0, shown: e.getBoundingClientRect().height > 0,
            controls: e.querySelectorAll('.widget-static-control').length,
            live: frame ? {width: live ? live.getBoundingClientRect().width : 0, render: +picture.dataset.render,
                           frame: frame.getBoundingClientRect().height,
                           page: frame.contentDocument.documentElement.scrollHeight} : null};
  });
  return found;
}"""


@pytest.fixture(scope="module")
def crawl(served, browser):
    """Visit every page once, offline; return {page: what it held and what went wrong}."""
    base, pages = served
    offline = Offline(browser, base)
    found = {}
    for name in pages:
        page = offline.context.new_page()
        errors: list[str] = []
        page.on("console", lambda m, errors=errors: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
        before = len(offline.foreign)
        response = page.goto(base + name, wait_until="load")
        page.evaluate(TYPESET)
        page.screenshot(path=str(ARTIFACTS / (name.replace("/", "_").removesuffix(".html") + ".png")))
        info = page.evaluate(READ_PAGE)
        if name.removeprefix("zh/").startswith("notebooks/"):  # the notebook the download button serves
            info["download"] = page.request.get(info["downloads"][0]).body() if info["downloads"] else None
        info.update(status=response.status, errors=errors, foreign=offline.foreign[before:])
        found[name] = info
        page.close()
    offline.context.close()
    return found


def notebook_pages(crawl, edition: str = "en") -> dict[str, dict]:
    prefix = EDITIONS[edition]["prefix"]
    return {name: crawl[f"{prefix}notebooks/{name}.html"] for name in NOTEBOOKS}


def notebook(name: str, edition: str = "en") -> Path:
    return EDITIONS[edition]["notebooks"] / f"{name}.ipynb"


def test_every_page_loads_offline_without_errors(crawl):
    for e in EDITIONS.values():
        assert {f"{e['prefix']}{p}" for p in [*(f"notebooks/{n}.html" for n in NOTEBOOKS), "index.html",
                                               "search.html"]} <= set(crawl)
    problems = {}
    for name, info in crawl.items():
        wrong = []
        if info["status"] != 200:
            wrong.append(f"HTTP {info['status']}")
        wrong += [f"console: {e}" for e in info["errors"]]
        wrong += [f"request to another host: {u}" for u in info["foreign"]]
        wrong += [f"image not loaded: {i['src']}" for i in info["images"] if i["width"] == 0]
        if wrong:
            problems[name] = wrong
    assert not problems, json.dumps(problems, indent=1)
    pictures = {}  # every PNG output of a notebook is a loaded picture on its page, and none is dropped
    for edition in EDITIONS:
        for name, info in notebook_pages(crawl, edition).items():
            nb = json.loads(notebook(name, edition).read_text())
            outputs = sum("image/png" in o.get("data", {}) for c in nb["cells"] for o in c.get("outputs", []))
            pictures[edition, name] = (outputs, sum("/_images/" in i["src"] for i in info["images"]))
    assert all(n > 0 and n == shown for n, shown in pictures.values()), pictures


def test_math_is_typeset_and_no_raw_tex_is_left(crawl):
    problems = {}
    for name, info in crawl.items():
        wrong = [f"MathJax error: {e}" for e in info["math_errors"]]
        if info["math"] < info["math_source"]:
            wrong.append(f"{info['math_source']} formulas, {info['math']} typeset")
        wrong += [f"raw TeX: ...{info['text'][max(m.start() - 40, 0):m.end() + 40]}..."
                  for m in RAW_TEX.finditer(info["text"])]
        wrong += [f"widget repr: ...{info['text'][m.start():m.end() + 60]}..."
                  for m in WIDGET_REPR.finditer(info["text"])]
        if wrong:
            problems[name] = wrong
    assert not problems, json.dumps(problems, indent=1)
    for prefix in ["", "zh/"]:
        for name in ["index.html"] + [f"notebooks/{n}.html" for n in NOTEBOOKS]:
            assert crawl[prefix + name]["math"] > 0, f"{prefix}{name}: no math typeset"


def test_every_internal_link_and_anchor_resolves(served, crawl):
    base, _ = served
    broken = []
    for name, info in crawl.items():
        for link in info["links"]:
            if not link.startswith(base):
                continue
            path, _, anchor = link[len(base):].partition("#")
            path = urllib.parse.unquote(path.partition("?")[0]) or "index.html"
            if path.endswith("/"):
                path += "index.html"
            if not (OUT / path).is_file():
                broken.append(f"{name}: {link} (no such file)")
            elif anchor and path in crawl and urllib.parse.unquote(anchor) not in crawl[path]["ids"]:
                broken.append(f"{name}: {link} (no such anchor)")
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("edition", EDITIONS)
def test_table_of_contents_outline_and_previous_next_in_reading_order(crawl, edition):
    e = EDITIONS[edition]
    order = ["index"] + NOTEBOOKS
    for name, info in [("index", crawl[f"{e['prefix']}index.html"])] + list(notebook_pages(crawl, edition).items()):
        listed = [h.rsplit("/", 1)[-1].removesuffix(".html") for h in info["sidebar"] if "/notebooks/" in h]
        assert listed == NOTEBOOKS, (name, info["sidebar"])
        assert all(h.startswith(f"/{e['prefix']}") for h in info["sidebar"]), (name, info["sidebar"])
        n = order.index(name)
        following = info["next"] and info["next"].rsplit("/", 1)[-1].removesuffix(".html")
        assert following == (order[n + 1] if n + 1 < len(order) else None), (name, info["next"])
        if n:
            assert info["previous"].rsplit("/", 1)[-1].removesuffix(".html") == order[n - 1], (name, info["previous"])
            assert {e["summary"], e["exercises"]} <= set(info["outline"]), (name, info["outline"])


@pytest.mark.parametrize("edition", EDITIONS)
def test_colab_download_and_copy_buttons(crawl, edition):
    """The header's Colab button and the link under the title open this edition's notebook (notebooks/zh/NN.ipynb
    for a Chinese page); the download button serves it, byte for byte."""
    colab = f"https://colab.research.google.com/github/{REPOSITORY.removeprefix('https://github.com/')}/blob/main"
    for name, info in notebook_pages(crawl, edition).items():
        path = notebook(name, edition).relative_to(ROOT).as_posix()
        assert info["launch"] == [f"{colab}/{path}"], f"{name}: the Colab button opens {info['launch']}"
        assert f"{colab}/{path}" in info["hrefs"], f"{name}: no Open in Colab link"
        assert info["download"] == notebook(name, edition).read_bytes(), f"{name}: download differs"
        assert info["code_blocks"] > 0 and info["copy_buttons"] == info["code_blocks"], name


@pytest.mark.parametrize("edition", EDITIONS)
def test_appendices_are_folded_and_exercises_are_visible(crawl, edition):
    e = EDITIONS[edition]
    for name, info in notebook_pages(crawl, edition).items():
        sections = info["sections"]
        appendices = [s for s in sections if s["title"].startswith(e["appendix"])]
        assert appendices, f"{name}: no appendix"
        assert all(s["folded"] is True and s["visible"] for s in appendices), (name, appendices)
        assert all(s["badge"] == e["optional"] for s in appendices), (name, appendices)  # in the page's language
        assert all(s["summary"] == appendices[0]["summary"] for s in appendices), (name, appendices)
        main = sections[: sections.index(appendices[0])]
        assert all(s["folded"] is None and not s["in_details"] for s in main), (name, [s["title"] for s in main])
        (exercises,) = [s for s in main if s["title"] == e["exercises"]]
        assert exercises["visible"] and re.search(r"check_\d\d_\d\(", exercises["code"]), (name, exercises)


def test_a_link_into_an_appendix_opens_it(served, browser):
    base, _ = served
    offline = Offline(browser, base)
    page = offline.context.new_page()
    url = f"{base}notebooks/{NOTEBOOKS[0]}.html"
    page.goto(url, wait_until="load")
    last = page.eval_on_selector_all("section.appendix", "s => s.map((e) => e.id)")[-1]
    page.click(f"nav.page-toc a[href='#{last}']")  # the outline
    page.wait_for_function(f"() => document.getElementById('{last}').querySelector('details').open")
    first = page.eval_on_selector("section.appendix", "s => s.id")
    page.goto(f"{url}#{first}", wait_until="load")  # a link from another page
    page.wait_for_function(f"() => document.getElementById('{first}').querySelector('details').open")
    offline.context.close()


def test_the_pages_speak_their_edition_s_language(crawl):
    """Sphinx's and the theme's words, and what series.py writes, are Chinese on the Chinese pages."""
    for name, info in crawl.items():
        zh = name.startswith("zh/")
        assert info["lang"] == ("zh-CN" if zh else "en"), (name, info["lang"])
    summaries = {edition: {s["summary"] for i in notebook_pages(crawl, edition).values() for s in i["sections"]
                           if s["summary"]} for edition in EDITIONS}
    assert summaries == {"en": {"Optional appendix: show or hide"}, "zh": {"选读附录：展开或折叠"}}, summaries
    assert "搜索" in crawl["zh/index.html"]["text"] and "从零实现注意力" in crawl["zh/index.html"]["text"]
    assert "显示代码单元格" in crawl["zh/notebooks/00_recap.html"]["text"]  # the folded setup cell


def test_the_language_switch_leads_to_the_same_page_in_the_other_edition(crawl):
    """On every page of both editions, in the header: one link (no script needed) to the same page of the other."""
    wrong = {}
    for name, info in crawl.items():
        edition = "zh" if name.startswith("zh/") else "en"
        other = EDITIONS[edition]["other"] + name.removeprefix(EDITIONS[edition]["prefix"])
        label = "English" if edition == "zh" else "中文"
        if info["switch"] != [{"path": f"/{other}", "label": label, "visible": True}] or other not in crawl:
            wrong[name] = info["switch"]
    assert not wrong, json.dumps(wrong, indent=1, ensure_ascii=False)
    assert sum(n.startswith("zh/") for n in crawl) == sum(not n.startswith("zh/") for n in crawl)


def test_following_the_switch_there_and_back(served, browser):
    base, _ = served
    offline = Offline(browser, base)
    page = offline.context.new_page()
    page.goto(f"{base}zh/notebooks/04_causal.html", wait_until="load")
    with page.expect_navigation():
        page.click(".bd-header-article .series-language-switch a")
    assert page.url == f"{base}notebooks/04_causal.html", page.url
    with page.expect_navigation():
        page.click(".bd-header-article .series-language-switch a")
    assert page.url == f"{base}zh/notebooks/04_causal.html", page.url
    assert not offline.foreign, offline.foreign
    offline.context.close()


def _explorer_count(name: str, edition: str = "en") -> int:
    """The cells of notebook `name` that open an explorer and show it."""
    nb = json.loads(notebook(name, edition).read_text())
    return sum(bool(re.search(r"\b(explore_attention|head_view|model_view)\(", "".join(c["source"]))) and any(
        "application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in c.get("outputs", []))
        for c in nb["cells"])


@pytest.mark.parametrize("edition", EDITIONS)
def test_explorers_are_live_and_keep_their_saved_picture(crawl, edition):
    """Each explorer runs its standalone page in a frame as tall as the page, in place of its saved picture, which
    is still there (with its controls' values) for readers without scripts."""
    shown = {}
    for name, info in notebook_pages(crawl, edition).items():
        shown[name] = info["explorers"]
        assert len(info["explorers"]) == _explorer_count(name, edition), (name, info["explorers"])
        for e in info["explorers"]:
            assert e["width"] > 100 and e["controls"] >= 3 and not e["shown"], (name, e)
            live = e["live"]
            assert live and live["render"] >= 1 and live["width"] > 100, (name, e)
            assert live["page"] <= live["frame"] + 1, (name, e)  # nothing cut off, no scroll bar inside
    assert sum(len(e) for e in shown.values()) >= 8, shown


@pytest.mark.parametrize("edition", EDITIONS)
def test_without_scripts_each_explorer_is_its_saved_picture(served, browser, crawl, edition):
    base, _ = served
    prefix = EDITIONS[edition]["prefix"]
    context = browser.new_context(viewport={"width": 1280, "height": 900}, java_script_enabled=False)
    names = [name for name, info in notebook_pages(crawl, edition).items() if info["explorers"]]
    for name in names:
        page = context.new_page()
        page.goto(f"{base}{prefix}notebooks/{name}.html", wait_until="load")
        switch = page.eval_on_selector_all(".series-language-switch a", "links => links.map((a) => a.href)")
        assert switch == [f"{base}{EDITIONS[edition]['other']}notebooks/{name}.html"], (name, switch)
        page.eval_on_selector_all("details", "ds => ds.forEach((d) => { d.open = true; })")
        found = page.eval_on_selector_all(".explorer", """boxes => boxes.map((b) => ({
          frames: b.querySelectorAll('iframe').length,
          live: b.querySelector('.explorer-live').getBoundingClientRect().height,
          picture: b.querySelector('.widget-static-explorer svg')?.getBoundingClientRect().width ?? 0}))""")
        assert len(found) == _explorer_count(name, edition), (name, found)
        assert all(f["frames"] == 0 and f["live"] == 0 and f["picture"] > 100 for f in found), (name, found)
        page.close()
    context.close()
    assert len(names) >= 6, names


def _saved_page_data(name: str, index: int, edition: str = "en") -> dict:
    """The numbers of the `index`-th explorer page saved in notebook `name`'s outputs (the attn-data JSON)."""
    nb = json.loads(notebook(name, edition).read_text())
    pages = [o["metadata"]["attention_lib/explorer-page"] for c in nb["cells"] for o in c.get("outputs", [])
             if "attention_lib/explorer-page" in o.get("metadata", {})]
    payload = re.search(r'<script type="application/json" id="attn-data">(.*?)</script>', pages[index], re.S)
    return json.loads(payload.group(1))


def _cell_values(data: dict, layer: int, head: int) -> list[str]:
    """What the table's cells of `layer`, `head` say on hover: each weight to 3 decimals as JavaScript's toFixed
    rounds (a tie upwards), or "hidden"."""
    weights, mask = data["weights"][layer][head], data["masks"][layer]
    return [str(Decimal(w).quantize(Decimal("0.001"), ROUND_HALF_UP)) if m == "1" else "hidden"
            for w, m in zip(weights, mask, strict=True)]


@pytest.mark.parametrize("edition", EDITIONS)
def test_an_embedded_explorer_follows_the_reader(served, browser, edition):
    """On notebook 06's page (of each edition), the explorer of MiniLM's layers: another head, another layer, the
    lines view; each picture holds the numbers the notebook saved for that layer and head, and hovering shows a cell's
    or a token's values. Offline, without a console error."""
    base, _ = served
    offline = Offline(browser, base)
    page = offline.context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{base}{EDITIONS[edition]['prefix']}notebooks/06_visualisation.html", wait_until="load")
    page.wait_for_function("""() => [...document.querySelectorAll('iframe.explorer-frame')]
      .every((f) => f.contentDocument?.querySelector('#attn-picture svg'))""")
    frames = [h.content_frame() for h in page.query_selector_all("iframe.explorer-frame")]
    datas = [json.loads(f.eval_on_selector("#attn-data", "e => e.textContent")) for f in frames]
    index = next(i for i, d in enumerate(datas) if len(d["layers"]) > 1 and len(d["weights"][0]) > 1)
    frame, data = frames[index], datas[index]
    assert data == _saved_page_data("06_visualisation", index, edition)  # the numbers the notebook saved, whole

    def picture() -> dict:
        return frame.eval_on_selector("#attn-picture", """p => ({...p.dataset,
          title: p.querySelector('.title').textContent,
          cells: [...p.querySelectorAll('rect.cell title')].map((t) => t.textContent.split(': ').pop())})""")

    page.eval_on_selector_all("details", "ds => ds.forEach((d) => { d.open = true; })")  # an explorer may be folded
    frame.select_option("#attn-view", "weights")  # the table, whichever view the explorer was saved in
    before = picture()
    head = (int(before["head"]) + 1) % len(data["weights"][0])
    frame.select_option("#attn-head", str(head))
    after = picture()
    layer = data["layers"].index(int(after["layer"]))
    assert (after["head"], after["view"], int(after["render"])) == (str(head), "weights", int(before["render"]) + 1)
    assert after["title"].endswith(f"head {head}") and after["cells"] != before["cells"], (before, after)
    assert after["cells"] == _cell_values(data, layer, head)

    frame.select_option("#attn-layer", "1")
    other = picture()
    assert (other["layer"], other["head"]) == (str(data["layers"][1]), str(head)), other
    assert other["cells"] == _cell_values(data, 1, head)

    cell = frame.locator("rect.cell").first  # hover: the cell is outlined, its <title> holds its value
    assert cell.evaluate("c => getComputedStyle(c).strokeWidth") != "2px"
    cell.hover()
    assert cell.evaluate("c => getComputedStyle(c).strokeWidth") == "2px"

    frame.select_option("#attn-view", "lines")
    assert picture()["view"] == "lines"
    token = frame.locator(".by-k > g:has(line)").first  # hover a key: its lines and their values appear
    visibility = """g => [...g.querySelectorAll('line, .val')].map((e) => {
      const style = getComputedStyle(e);  // hidden by display: none, or (pages saved before) by visibility
      return style.display === 'none' || style.visibility === 'hidden' ? 'hidden' : 'visible'; })"""
    hidden = token.evaluate(visibility)
    assert hidden and set(hidden) == {"hidden"}, hidden
    token.locator(".tok").hover()
    assert set(token.evaluate(visibility)) == {"visible"}
    page.screenshot(path=str(ARTIFACTS / f"explorer_live_lines_{edition}.png"))
    assert not errors and not offline.foreign, (errors, offline.foreign)
    offline.context.close()


@pytest.mark.parametrize(("prefix", "query", "found"), [
    ("", "KV cache", {"04_causal", "08_variants"}),
    ("zh/", "KV 缓存", {"04_causal", "08_variants"}),
    ("zh/", "因果掩码", {"04_causal"}),  # one word of the glossary, which jieba is told (build_site.py)
])
def test_search_finds_kv_cache(served, browser, prefix, query, found):
    """Typed into the sidebar's search field of a page, as a reader does; the Chinese edition searches its own
    pages, its words segmented by jieba."""
    base, _ = served
    offline = Offline(browser, base)
    page = offline.context.new_page()
    page.goto(f"{base}{prefix}notebooks/{NOTEBOOKS[0]}.html", wait_until="load")
    page.click(".bd-sidebar-primary .search-button-field")
    page.keyboard.type(query)
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert page.url == f"{base}{prefix}search.html?{urllib.parse.urlencode({'q': query})}", page.url
    page.wait_for_function("() => /Search finished|搜索完成/.test(document.body.textContent)", timeout=30_000)
    hits = page.eval_on_selector_all("#search-results ul.search li a", "links => links.map(a => a.href)")
    pages = {h.rsplit("/", 1)[-1].split(".")[0] for h in hits}
    assert found <= pages and all(h.startswith(f"{base}{prefix}") for h in hits), hits
    page.screenshot(path=str(ARTIFACTS / f"search_{prefix.strip('/') or 'en'}_{query.replace(' ', '_')}.png"))
    assert not offline.foreign, offline.foreign
    offline.context.close()
