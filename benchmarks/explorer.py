"""`make bench-explorer`: how fast the attention explorer answers, in Python and in a browser. A record, not a test.

    .venv/bin/python benchmarks/explorer.py                 # both parts; the report goes to benchmarks/results/
    .venv/bin/python benchmarks/explorer.py --no-browser    # the Python part only
    .venv/bin/python benchmarks/explorer.py --repeats 10    # fewer changes per row

Python: one redraw of the explorer, `explorer.set(...)` from the call to the new picture in its widget, at S = 12
(12 tokens; cross attention: 12 queries over 12 context tokens), in every view. "recompute" rows change the
temperature with the explorer's cache emptied first, so the layer runs again (the embedding included); "draw" rows
change the head, whose weights are already computed. Seeded random layers (C = 32, NH = 4, as the explorer's
default) and, when the pretrained model is installed, MiniLM (C = 384, NH = 12, its tokenizer and all six layers).

Browser: JupyterLab from this environment in headless Chromium, a notebook with the explorer on a stack of three
random layers and 12 tokens. Each control is changed `repeats` times as a reader changes it (a dropdown option, a
toggle button, a slider step with the keyboard, a sentence typed and Enter), and each change is timed in the page from
the input event to the first animation frame after the new picture reached the page.

Long inputs: recorded weights (`explore_attention(attentions=...)`, seeded random softmax weights, 12 heads, 2
layers) at S = 64 and S = 512. Python: the time to open the explorer (its first picture drawn), each view's HTML size
and a head change in each view. Browser: a notebook per length, each in a JupyterLab of its own; the explorer's
opening, from the call of explore_attention (the weights already made) to its first picture painted, and from "run
all" to the same picture (the kernel's start excluded: it runs after the kernel is idle; the import of torch and
attention_lib included); then a head change in the weights and lines views, timed as above.

Times are medians with the 25th-75th percentiles and the maximum, in milliseconds; the environment is printed first.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests"))  # the browser driver and the MiniLM loader are shared with the tests

WORDS = "the quick brown fox jumps over the lazy dog near the river".split()  # 12 tokens
CONTEXT = "le renard brun saute par dessus le chien paresseux près du fleuve".split()  # 12 tokens
OTHER = "a small cat sat on a warm mat while the rain fell".split()  # 12 tokens


def summary(times_ms: list[float]) -> str:
    q = statistics.quantiles(times_ms, n=4) if len(times_ms) > 1 else [times_ms[0]] * 3
    return f"median {statistics.median(times_ms):7.1f}   p25-p75 {q[0]:6.1f}-{q[2]:6.1f}   max {max(times_ms):7.1f}"


def environment() -> list[str]:
    import ipywidgets
    import jupyterlab
    import matplotlib
    import torch
    from browser import CHROMIUM

    def run(*command: str) -> str:
        try:
            return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return "unknown"

    info = Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []
    cpu = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), platform.processor())
    dirty = " (with uncommitted changes)" if run("git", "status", "--porcelain", "--untracked-files=no") else ""
    return [
        f"date       {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        f"commit     {run('git', 'rev-parse', '--short', 'HEAD')}{dirty}",
        f"machine    {cpu}, {os.cpu_count()} cores (shared), Python {platform.python_version()}",
        f"versions   torch {torch.__version__} ({torch.get_num_threads()} threads), "
        f"ipywidgets {ipywidgets.__version__}, matplotlib {matplotlib.__version__}, "
        f"jupyterlab {jupyterlab.__version__}",
        f"browser    {run(str(CHROMIUM), '--version')} (headless)",
    ]


def time_python(explorer, change: dict, other: dict, repeats: int, recompute: bool) -> list[float]:
    """ms per redraw, alternating between two settings; recompute: empty the explorer's cache first."""
    times = []
    for i in range(repeats + 1):
        if recompute:
            explorer._run.cache_clear()
        started = time.perf_counter()
        explorer.set(**(change if i % 2 else other))
        times.append((time.perf_counter() - started) * 1000)
        assert explorer.message.value == "", explorer.message.value
    return times[1:]  # the first one warms up


def python_part(repeats: int) -> list[str]:
    from attention_lib.viz import explore_attention

    explorers = {
        "random, self ": explore_attention(tokens=" ".join(WORDS)),
        "random, cross": explore_attention(kind="cross", tokens=" ".join(WORDS), context_tokens=" ".join(CONTEXT)),
    }
    with contextlib.suppress(ImportError):
        explorers["MiniLM, self "] = minilm_explorer()
    lines = ["Python: one redraw at S = 12 (ms)"]
    for name, explorer in explorers.items():
        S, S_kv = explorer.compute().mask.shape
        for view in ("weights", "all heads", "lines", "compare"):
            explorer.set(view=view, head=0, temperature=1.0)
            for what, change, other, recompute in (("recompute", {"temperature": 0.5}, {"temperature": 2.0}, True),
                                                    ("draw     ", {"head": 1}, {"head": 2}, False)):
                times = time_python(explorer, change, other, repeats, recompute)
                lines.append(f"  {name} {S}x{S_kv}  {view:9s}  {what}  {summary(times)}")
        explorer.set(view="weights")
        lines.append(f"  {name} {S}x{S_kv}  weights    new text   {summary(python_new_text(explorer, repeats))}")
    return lines


LONG = (64, 512)  # S of the long-input rows: BERT's maximum last
LONG_SOURCE = """import torch
from attention_lib.viz import explore_attention

g = torch.Generator().manual_seed(0)
attentions = tuple((torch.randn(1, 12, {S}, {S}, generator=g) * 2).softmax(-1) for _ in range(2))  # 2 x (1, NH, S, S)
explorer = explore_attention(attentions=attentions, tokens=[f"t{{i}}" for i in range({S})])
explorer"""


def long_explorer(S: int):
    """The explorer of recorded weights the long-input rows time: 2 layers, 12 heads, S tokens (as LONG_SOURCE)."""
    namespace: dict = {}
    exec(LONG_SOURCE.format(S=S).rsplit("\n", 1)[0], namespace)  # the notebook's cell without its display line
    return namespace["explorer"]


def python_long(repeats: int) -> list[str]:
    from attention_lib.viz.explorer import VIEWS

    lines = ["Python: recorded weights, 12 heads, 2 layers: open (first picture drawn), each view's HTML and a head "
             "change (ms)"]
    for S in LONG:
        opened = []
        for _ in range(3):
            started = time.perf_counter()
            explorer = long_explorer(S)
            opened.append((time.perf_counter() - started) * 1000)
        lines.append(f"  S = {S:3d}  open                        {summary(opened)}")
        for view in VIEWS:
            explorer.set(view=view, head=0)
            size = len(explorer.picture.value.encode()) / 1e6
            times = time_python(explorer, {"head": 1}, {"head": 2}, max(4, repeats // (1 + 3 * (S > 64))), False)
            lines.append(f"  S = {S:3d}  {view:9s}  {size:5.2f} MB  head  {summary(times)}")
    return lines


def minilm_explorer():
    """MiniLM's six layers in the explorer, as notebook 06 builds them (raises ImportError without the model)."""
    import torch
    from minilm import attention_from_bert_layer, load_minilm, minilm_available

    from attention_lib.viz import explore_attention

    if not minilm_available():
        raise ImportError("the pretrained model is not installed")
    with contextlib.redirect_stderr(io.StringIO()):
        model, tokenizer = load_minilm()

    def inputs(tokens):
        ids = torch.tensor([tokenizer.convert_tokens_to_ids(tokens)])
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=(ids != tokenizer.pad_token_id).long(), output_hidden_states=True)
        return torch.stack(out.hidden_states[:-1])[:, 0]

    def tokenize(text):
        return tokenizer.convert_ids_to_tokens(tokenizer(text)["input_ids"])

    stack = [attention_from_bert_layer(block) for block in model.encoder.layer]
    return explore_attention(stack, kinds=("bidirectional",), tokens=" ".join(WORDS[:10]), tokenize=tokenize,
                             embed=inputs)  # 10 words: [CLS] + 10 + [SEP] = 12 tokens


def sentences(count: int, words: list[str]) -> list[str]:
    """`count` different orders of the words: each a new input (nothing cached)."""
    import random

    return [" ".join(random.Random(seed).sample(words, len(words))) for seed in range(count)]


def python_new_text(explorer, repeats: int) -> list[float]:
    times = []
    for text in sentences(repeats + 1, WORDS[:10] if len(explorer.stacks["bidirectional"]) > 1 else WORDS):
        started = time.perf_counter()
        explorer.set(tokens=text)
        times.append((time.perf_counter() - started) * 1000)
    return times[1:]


BROWSER_SOURCE = f"""import torch
from attention_lib import BidirectionalAttention
from attention_lib.viz import explore_attention

torch.manual_seed(0)
layers = [BidirectionalAttention(32, 4) for _ in range(3)]
explorer = explore_attention(layers, tokens={" ".join(WORDS)!r}, context_tokens={" ".join(CONTEXT)!r})
explorer"""


def browser_part(repeats: int) -> list[str]:
    from browser import act, choose, chromium, jupyter_lab, open_notebook, press, slide, type_text, wait_for_picture

    texts, views = sentences(repeats, WORDS), ("all heads", "lines", "compare", "weights")
    changes = {  # what a reader does, the i-th time
        "head (dropdown)": lambda page, i: choose(page, "head", "12"[i % 2]),
        "layer (dropdown)": lambda page, i: choose(page, "layer", "12"[i % 2]),
        "kind (dropdown)": lambda page, i: choose(page, "kind", ("causal", "bidirectional")[i % 2]),
        "temperature (slider, key)": lambda page, i: slide(page, "temperature", ("ArrowLeft", "ArrowRight")[i % 2]),
        "padding (slider, key)": lambda page, i: slide(page, "padding", ("ArrowRight", "ArrowLeft")[i % 2]),
        "tokens (typed, Enter)": lambda page, i: type_text(page, "tokens", texts[i]),
        "view (toggle buttons)": lambda page, i: press(page, "view", views[i % 4]),
        "cross: head (dropdown)": lambda page, i: choose(page, "head", other_head(page)),  # from the head row's last
    }
    rows: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp, jupyter_lab(Path(tmp), {"explorer.ipynb": BROWSER_SOURCE}) as lab:
        with chromium() as browser:
            page = open_notebook(browser, lab, "explorer.ipynb")
            wait_for_picture(page, lambda s: s["view"] == "weights", timeout=120)
            for name, change in changes.items():
                if name.startswith("cross"):
                    act(page, lambda: choose(page, "kind", "cross"), lambda s: s["kind"] == "cross")
                rows[name] = [act(page, lambda i=i, change=change: change(page, i), lambda s: s["stale"] == "0")
                              ["latency_ms"] for i in range(repeats)]
    every = [ms for values in rows.values() for ms in values]
    lines = ["Browser: from the input event to the painted picture, JupyterLab + Chromium, S = 12 (ms)"]
    lines += [f"  {name:28s} {summary(values)}" for name, values in rows.items()]
    return lines + [f"  {'every change':28s} {summary(every)}   ({len(every)} changes)"]


# The browser's notebook: LONG_SOURCE with the time the explorer is called written to a file beside the notebook, so
# that its opening is timed from there (the weights already in memory, as a reader's earlier cell made them).
MARK_OPENING = 'Path("opened_at").write_text(repr(time.time()))  # when explore_attention is called\n'


def long_notebook(S: int) -> str:
    call = "explorer = explore_attention"
    source = LONG_SOURCE.format(S=S).replace(call, MARK_OPENING + call)
    return "import time\nfrom pathlib import Path\n\n" + source


def other_head(page) -> str:
    """Head "1" or "2", whichever the picture does not show: an odd number of changes in one view leaves head 1 shown,
    and choosing it again in the next view would be no change at all (no event, no picture to wait for)."""
    from browser import read_state

    return "2" if read_state(page)["head"] == "1" else "1"


def browser_long(repeats: int) -> list[str]:
    from browser import act, choose, chromium, jupyter_lab, open_notebook, press, wait_for_picture

    lines = ["Browser: recorded weights, 12 heads, JupyterLab + Chromium: the explorer's opening (from the call of "
             "explore_attention to its first picture painted; and from run all, the kernel's imports included), and a "
             "head change (ms)"]
    for S in LONG:  # a server of its own per length: JupyterLab reopens the notebooks of its last session
        with tempfile.TemporaryDirectory() as tmp, jupyter_lab(Path(tmp), {"long.ipynb": long_notebook(S)}) as lab:
            with chromium() as browser:
                closed: list[str] = []  # websockets that closed while the page was open: said if a change is lost
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.on("websocket", lambda ws, closed=closed: ws.on("close", lambda *_: closed.append(ws.url)))
                page = open_notebook(browser, lab, "long.ipynb", page=page)
                started = time.time()  # "run all" was clicked just before
                state = wait_for_picture(page, lambda s: s["view"] == "weights", timeout=300)
                called = float((Path(tmp) / "root" / "opened_at").read_text())
                lines.append(f"  S = {S:3d}  open (explore_attention to painted)   "
                             f"{state['painted_at_ms'] - called * 1000:7.1f}")
                lines.append(f"  S = {S:3d}  open (run all to painted)              "
                             f"{state['painted_at_ms'] - started * 1000:7.1f}")
                count = max(4, repeats // (1 + 3 * (S > 64)))  # fewer changes at S = 512, where each takes longer
                for view in ("weights", "lines"):  # it opens on the weights
                    if view != "weights":
                        act(page, lambda page=page, view=view: press(page, "view", view),
                            lambda s, view=view: s["view"] == view, timeout=120)
                    try:  # head 1 or 2, whichever is not shown: choosing the shown one changes nothing
                        times = [act(page, lambda page=page: choose(page, "head", other_head(page)),
                                     lambda s: s["stale"] == "0", timeout=120)["latency_ms"] for _ in range(count)]
                    except AssertionError as error:
                        raise AssertionError(f"S = {S}, {view}: {error}; websockets closed meanwhile: "
                                             f"{[url.split('?')[0] for url in closed] or 'none'}") from None
                    lines.append(f"  S = {S:3d}  {view:9s} head (dropdown)              {summary(times)}")
                print(*lines[-4:], sep="\n", flush=True)
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=20, help="changes per row (default 20)")
    parser.add_argument("--no-browser", action="store_true", help="the Python part only")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "explorer.txt", help="where the report goes")
    args = parser.parse_args()
    lines = ["`make bench-explorer`: the attention explorer's redraw times", *environment(), ""]
    print("\n".join(lines), flush=True)
    for part in [python_part, python_long] + ([] if args.no_browser else [browser_part, browser_long]):
        new = part(args.repeats) + [""]
        print("\n".join(new), flush=True)
        lines += new
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
