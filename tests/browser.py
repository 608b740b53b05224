"""Drive the attention explorer in a real browser: start JupyterLab from this environment, open a notebook in headless
Chromium (Playwright), run it, act on the explorer's controls as a reader does, and time each change until the new
picture is on screen. Shared by tests/test_browser.py and benchmarks/explorer.py.

    with jupyter_lab(tmp, {"explorer.ipynb": source}) as lab, chromium() as browser:
        page = open_notebook(browser, lab, "explorer.ipynb")          # JupyterLab; ui="notebooks" for Notebook 7
        state = wait_for_picture(page, lambda s: s["view"] == "weights")
        state = act(page, lambda: choose(page, "head", "2"), lambda s: s["head"] == "2")
        state["latency_ms"]                                         # from the input event to the painted picture

The server runs on 127.0.0.1, a free port, a token, temporary config/runtime/root directories, and is stopped by
its process group id whatever happens. The browser is $ATTENTION_CHROMIUM, /usr/bin/chromium by default; without it
the callers skip, unless ATTENTION_REQUIRE_BROWSER=1 (CI), which makes them fail.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

CHROMIUM = Path(os.environ.get("ATTENTION_CHROMIUM", "/usr/bin/chromium"))  # the browser the tests drive
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]

# Installed once per page: remember the time stamp of the last input event (capture phase, before any handler), and
# the time of the first animation frame after each new picture (its data-render) reaches the page.
TIMING = """() => {
  if (window.__attn) return;
  const state = window.__attn = {input: null, painted: {}, painted_at: {}};
  for (const type of ['change', 'click', 'keydown', 'input'])
    document.addEventListener(type, (e) => { if (e.isTrusted || type !== 'input') state.input = e.timeStamp; }, true);
  new MutationObserver(() => {
    for (const pic of document.querySelectorAll('.attn-picture')) {
      const key = pic.dataset.render + '/' + pic.dataset.stale;
      if (!(key in state.painted)) { state.painted[key] = null; const from = state.input;
        requestAnimationFrame(() => { state.painted[key] = performance.now() - (from ?? performance.now());
                                      state.painted_at[key] = Date.now(); }); }
    }
  }).observe(document.body, {childList: true, subtree: true});
}"""

# What the page shows: the picture's data- attributes, the message, how long the last change took to be painted, and
# when (painted_at_ms: the wall clock, milliseconds since the epoch, comparable with Python's time.time()).
READ_STATE = """() => {
  const pics = document.querySelectorAll('.attn-picture');
  if (pics.length !== 1) return null;
  const pic = pics[0], message = document.querySelector('.attn-message');
  const key = pic.dataset.render + '/' + pic.dataset.stale;
  return {...pic.dataset, message: message ? message.textContent : '', latency_ms: window.__attn?.painted[key] ?? null,
          painted_at_ms: window.__attn?.painted_at[key] ?? null, width: pic.getBoundingClientRect().width};
}"""


def need_browser(pytest) -> None:
    """Skip (or fail under ATTENTION_REQUIRE_BROWSER=1) when Chromium or Playwright is missing."""
    problem = None
    if not CHROMIUM.exists():
        problem = f"Chromium not found at {CHROMIUM} (install Debian's chromium: apt-get install -y chromium)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            problem = "the playwright Python package is not installed (pip install -e '.[test]')"
    if problem and os.environ.get("ATTENTION_REQUIRE_BROWSER") == "1":
        pytest.fail(f"browser test required (ATTENTION_REQUIRE_BROWSER=1) but cannot run: {problem}")
    if problem:
        pytest.skip(f"browser test skipped: {problem}")


def notebook_json(source: str) -> str:
    """A notebook of one title cell and one code cell holding `source`."""
    cells = [
        {"cell_type": "markdown", "id": "title", "metadata": {}, "source": "# The attention explorer"},
        {"cell_type": "code", "id": "explorer", "execution_count": None, "metadata": {}, "outputs": [],
         "source": source},
    ]
    kernel = {"display_name": "Python 3", "language": "python", "name": "python3"}
    return json.dumps({"cells": cells, "metadata": {"kernelspec": kernel, "language_info": {"name": "python"}},
                       "nbformat": 4, "nbformat_minor": 5})


@dataclass
class Lab:
    base: str
    token: str
    log: Path

    def url(self, path: str) -> str:
        return f"{self.base}/{path}?token={self.token}"

    def kernels_idle(self) -> bool:
        kernels = _get_json(self.url("api/kernels"))
        return bool(kernels) and all(k["execution_state"] == "idle" for k in kernels)

    def notebook_idle(self, name: str) -> bool:
        """Whether the notebook `name` has a kernel of its own and it is idle (another notebook's does not count)."""
        sessions = [s for s in _get_json(self.url("api/sessions")) if s.get("path", "").endswith(name)]
        return bool(sessions) and all((s.get("kernel") or {}).get("execution_state") == "idle" for s in sessions)


def _get_json(url: str):
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what: str, check: Callable, timeout: float, interval: float = 0.05):
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; last seen: {last!r}")


@contextlib.contextmanager
def jupyter_lab(tmp: Path, notebooks: dict[str, str]) -> Iterator[Lab]:
    """JupyterLab (which also serves Notebook 7) from this environment, with `notebooks` (name: code) in its root."""
    for name in ("config/labconfig", "runtime", "data", "ipython", "workspaces", "settings", "root"):
        (tmp / name).mkdir(parents=True, exist_ok=True)
    page_config = {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}
    (tmp / "config/labconfig/page_config.json").write_text(json.dumps(page_config))
    for name, source in notebooks.items():
        (tmp / "root" / name).write_text(notebook_json(source))
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp / "config"), "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
           "JUPYTER_DATA_DIR": str(tmp / "data"), "IPYTHONDIR": str(tmp / "ipython"), "MPLBACKEND": "Agg"}
    port, token = _free_port(), secrets.token_hex(16)
    command = [
        sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}", "--port-retries=0",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={tmp / 'root'}",
        f"--LabApp.workspaces_dir={tmp / 'workspaces'}", f"--LabApp.user_settings_dir={tmp / 'settings'}",
    ]  # fmt: skip
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")
    lab = Lab(f"http://127.0.0.1:{port}", token, tmp / "jupyterlab.log")
    with open(lab.log, "wb") as out:
        server = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until("JupyterLab to answer", lambda: server.poll() is None and _answers(lab.url("api/status")), 60, 0.25)
        yield lab
    except BaseException:
        print(lab.log.read_text(errors="replace")[-4000:], file=sys.stderr)
        raise
    finally:
        _stop(server)


def _answers(url: str) -> bool:
    try:
        _get_json(url)
        return True
    except OSError:
        return False


def _stop(server: subprocess.Popen) -> None:
    """Stop the server and the kernels it started (its process group) by its process id."""
    if server.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=5)


@contextlib.contextmanager
def chromium():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


def open_notebook(browser, lab: Lab, name: str, ui: str = "lab", page=None, workspace: str | None = None):
    """Open the notebook in JupyterLab (ui="lab") or Notebook 7 (ui="notebooks"), run all its cells. workspace: a
    JupyterLab workspace of that name, which opens this notebook alone (the default one reopens the last session's)."""
    page = page or browser.new_page(viewport={"width": 1400, "height": 1000})
    lab_path = f"lab/workspaces/{workspace}/tree/{name}" if workspace else f"lab/tree/{name}"
    page.goto(lab.url(lab_path if ui == "lab" else f"notebooks/{name}"))
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    wait_until("the notebook's kernel to start and be idle", lambda: lab.notebook_idle(name), timeout=60, interval=0.25)
    page.evaluate(TIMING)
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator("li.lm-Menu-item[data-command='runmenu:run-all']").click()
    return page


def read_state(page) -> dict | None:
    return page.evaluate(READ_STATE)


def wait_for_picture(page, condition: Callable[[dict], bool], timeout: float = 60) -> dict:
    """The picture's state once `condition` holds and the time it took to be painted is known; on a timeout the
    error shows the page's last state (the picture's data- attributes, its message), not just that it was not it."""
    try:
        return wait_until("the explorer's picture", lambda: (s := read_state(page)) and s["latency_ms"] is not None
                          and condition(s) and s, timeout)
    except AssertionError as error:
        state = {k: v for k, v in (read_state(page) or {}).items() if k not in ("mask", "digest")}
        raise AssertionError(f"{error}; the page shows {state}") from None


def act(page, action: Callable[[], None], condition: Callable[[dict], bool], timeout: float = 30) -> dict:
    """Do `action` (a reader's input) and wait for the picture it brings; its state carries latency_ms."""
    before = read_state(page)
    action()

    def arrived(state: dict) -> bool:
        return (state["render"], state["stale"]) != (before["render"], before["stale"]) and condition(state)

    return wait_for_picture(page, arrived, timeout)


def control(page, description: str):
    """The widget whose description label reads `description` (e.g. "head", "padding")."""
    return page.locator(".widget-inline-hbox, .widget-hslider, .widget-toggle-buttons, .widget-dropdown, .widget-text",
                        has=page.locator("label", has_text=re.compile(rf"^{re.escape(description)}$"))).first


def choose(page, description: str, option: str) -> None:
    """Pick an option of a dropdown, as a reader does with the mouse."""
    control(page, description).locator("select").select_option(label=option)


def press(page, description: str, label: str) -> None:
    """Click one of a toggle-buttons control's buttons."""
    control(page, description).locator("button", has_text=re.compile(rf"^{re.escape(label)}$")).click()


def slide(page, description: str, key: str = "ArrowRight") -> None:
    """Move a slider one step with the keyboard."""
    handle = control(page, description).locator(".noUi-handle, .ui-slider-handle").first
    handle.focus()
    handle.press(key)


def type_text(page, description: str, text: str) -> None:
    """Replace a text box's content and press Enter, as a reader does."""
    box = control(page, description).locator("input")
    box.fill(text)
    box.press("Enter")
