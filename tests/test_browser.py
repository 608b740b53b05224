"""End to end in a real browser: JupyterLab serves a notebook with the explorer, headless Chromium runs it.

The test starts JupyterLab (from this environment) on 127.0.0.1, on a free port, with a token and a temporary root
directory holding a small notebook that shows an `AttentionExplorer`. Playwright drives Debian's Chromium: it runs
all cells, waits until the kernel is idle and the picture has settled (the PNG shown in the page is the one whose
hash the status line announces), moves the padding slider with the keyboard, switches the kind to causal, and
checks after each step that the picture changed and is exactly the PNG that the same explorer settings give in this
process. It then opens the same notebook in the Notebook 7 interface of the same server, runs it again and switches
to cross attention. Screenshots go to test-artifacts/. The server is stopped by its process id whatever happens.

Without /usr/bin/chromium the test is skipped, unless ATTENTION_REQUIRE_BROWSER=1 (CI), which makes it fail.
"""

from __future__ import annotations

import contextlib
import hashlib
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
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
SETTINGS = {"hidden_size": 16, "num_heads": 4, "max_len": 8}  # the explorer of the notebook, rebuilt here to compare
NOTEBOOK_SOURCE = f"""from attention_lib.viz import explore_attention

explorer = explore_attention(**{SETTINGS!r})
explorer"""

# What the page shows: the status line's data attributes and the SHA-256 of the PNG the <img> displays.
READ_STATE = """async () => {
  const img = document.querySelector('img.attn-explorer-image');
  const status = document.querySelector('.attn-explorer-status');
  if (!img || !status || !img.src || !img.complete || img.naturalWidth === 0) return null;
  const bytes = await (await fetch(img.src)).arrayBuffer();
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', bytes));
  const shown = Array.from(digest, (b) => b.toString(16).padStart(2, '0')).join('');
  return {...status.dataset, shown, text: status.textContent, width: img.naturalWidth, height: img.naturalHeight};
}"""


def _need_browser() -> None:
    required = os.environ.get("ATTENTION_REQUIRE_BROWSER") == "1"
    problem = None
    if not CHROMIUM.exists():
        problem = f"Chromium not found at {CHROMIUM} (install Debian's chromium: apt-get install -y chromium)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            problem = "the playwright Python package is not installed (pip install -e '.[test]')"
    if problem and required:
        pytest.fail(f"browser test required (ATTENTION_REQUIRE_BROWSER=1) but cannot run: {problem}")
    if problem:
        pytest.skip(f"browser test skipped: {problem}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_notebook(path: Path) -> None:
    code = {"cell_type": "code", "id": "explorer", "execution_count": None, "metadata": {}, "outputs": [],
            "source": NOTEBOOK_SOURCE}  # fmt: skip
    title = {"cell_type": "markdown", "id": "title", "metadata": {}, "source": "# The attention explorer"}
    notebook = {
        "cells": [title, code],
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path.write_text(json.dumps(notebook))


def _get_json(url: str):
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def _start_lab(tmp: Path, port: int, token: str) -> tuple[subprocess.Popen, Path]:
    """JupyterLab from this environment, isolated config/runtime dirs, no announcements pop-up."""
    for name in ("config/labconfig", "runtime", "data", "ipython", "workspaces", "settings", "root"):
        (tmp / name).mkdir(parents=True, exist_ok=True)
    page_config = {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}
    (tmp / "config/labconfig/page_config.json").write_text(json.dumps(page_config))
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(tmp / "config"),
        "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
        "JUPYTER_DATA_DIR": str(tmp / "data"),
        "IPYTHONDIR": str(tmp / "ipython"),
        "MPLBACKEND": "Agg",
    }
    command = [
        sys.executable, "-m", "jupyterlab",
        "--no-browser", "--ip=127.0.0.1", f"--port={port}", "--port-retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={tmp / 'root'}",
        f"--LabApp.workspaces_dir={tmp / 'workspaces'}",
        f"--LabApp.user_settings_dir={tmp / 'settings'}",
    ]  # fmt: skip
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")
    log = tmp / "jupyterlab.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return server, log


def _stop(server: subprocess.Popen) -> None:
    """Stop the server (and the kernel it started, same process group) by its process id."""
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


def _wait_until(what: str, check, timeout: float, interval: float = 0.25):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; last seen: {last!r}")


def _expected_png(**controls) -> bytes:
    """The PNG an explorer with the notebook's settings draws for these control values, computed here."""
    from attention_lib.viz import explore_attention

    explorer = explore_attention(**SETTINGS)
    with explorer.hold():
        for name, value in controls.items():
            explorer.controls[name].value = value
    return explorer.image.value


def test_explorer_in_jupyterlab(tmp_path):
    _need_browser()
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    port, token = _free_port(), secrets.token_hex(16)
    base = f"http://127.0.0.1:{port}"
    server, log = _start_lab(tmp_path, port, token)
    _write_notebook(tmp_path / "root" / "explorer.ipynb")
    try:
        _wait_until(
            "JupyterLab to answer",
            lambda: server.poll() is None and _status_ok(f"{base}/api/status?token={token}"),
            timeout=45,
        )

        def kernel_idle() -> bool:
            kernels = _get_json(f"{base}/api/kernels?token={token}")
            return bool(kernels) and all(k["execution_state"] == "idle" for k in kernels)

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.goto(f"{base}/lab/tree/explorer.ipynb?token={token}")
                page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=45_000)
                _wait_until("the kernel to start and be idle", kernel_idle, timeout=45)

                page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
                page.locator("li.lm-Menu-item[data-command='runmenu:run-all']").click()

                def settled(previous_sha: str | None = None):
                    """The page shows the announced PNG, the kernel is idle, and nothing changed for a moment."""
                    first = page.evaluate(READ_STATE)
                    if not first or first["shown"] != first["pngSha256"] or first["shown"] == previous_sha:
                        return None
                    time.sleep(0.4)
                    second = page.evaluate(READ_STATE)
                    return second if second == first and kernel_idle() else None

                start = _wait_until("the explorer's first picture", settled, timeout=45)
                explorer = page.locator(".attn-explorer")
                explorer.screenshot(path=str(ARTIFACTS / "explorer-1-start.png"))
                assert start["kind"] == "bidirectional" and start["pad"] == "0"
                assert start["mask"] == "/".join(["111111"] * 6)
                assert start["width"] > 300 and start["height"] > 150
                assert start["shown"] == hashlib.sha256(_expected_png()).hexdigest()

                # Move the padding slider two steps right with the keyboard, as a reader would.
                slider = page.locator(".widget-hslider", has=page.locator("label", has_text=re.compile(r"^padding$")))
                handle = slider.locator(".noUi-handle")
                handle.focus()
                handle.press("ArrowRight")
                handle.press("ArrowRight")
                padded = _wait_until(
                    "the picture with 2 padding tokens",
                    lambda: (s := settled(start["shown"])) and s["pad"] == "2" and s,
                    timeout=30,
                )
                explorer.screenshot(path=str(ARTIFACTS / "explorer-2-padding.png"))
                assert padded["kind"] == "bidirectional"
                assert padded["mask"] == "/".join(["111100"] * 6)
                assert padded["shown"] == hashlib.sha256(_expected_png(pad=2)).hexdigest()

                # Switch the kind to causal: the mask becomes the lower triangle AND the padding.
                kind = page.locator(".widget-dropdown", has=page.locator("label", has_text=re.compile(r"^kind$")))
                kind.locator("select").select_option("causal")
                causal = _wait_until(
                    "the causal picture",
                    lambda: (s := settled(padded["shown"])) and s["kind"] == "causal" and s,
                    timeout=30,
                )
                explorer.screenshot(path=str(ARTIFACTS / "explorer-3-causal.png"))
                page.screenshot(path=str(ARTIFACTS / "jupyterlab-causal.png"), full_page=True)
                assert causal["mask"] == "100000/110000/111000/111100/111100/111100"
                assert causal["text"].startswith("causal")
                assert causal["shown"] == hashlib.sha256(_expected_png(pad=2, kind="causal")).hexdigest()
                assert len({start["shown"], padded["shown"], causal["shown"]}) == 3

                # Notebook 7 (served by the same server) renders the same explorer without any extra build.
                page.goto(f"{base}/notebooks/explorer.ipynb?token={token}")
                page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=45_000)
                _wait_until("the kernel to be idle", kernel_idle, timeout=30)
                page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
                page.locator("li.lm-Menu-item[data-command='runmenu:run-all']").click()
                fresh = _wait_until(
                    "Notebook 7's fresh explorer", lambda: (s := settled()) and s["pad"] == "0" and s, timeout=45
                )
                assert fresh["shown"] == start["shown"]  # a new explorer, back at the start values
                page.locator(".widget-dropdown", has=page.locator("label", has_text=re.compile(r"^kind$"))).locator(
                    "select"
                ).select_option("cross")
                cross = _wait_until(
                    "the cross picture in Notebook 7",
                    lambda: (s := settled(fresh["shown"])) and s["kind"] == "cross" and s,
                    timeout=30,
                )
                page.locator(".attn-explorer").screenshot(path=str(ARTIFACTS / "notebook7-cross.png"))
                assert cross["seqLen"] == "6" and cross["kvLen"] == "7" and cross["mask"] == "/".join(["1" * 7] * 6)
                assert cross["shown"] == hashlib.sha256(_expected_png(kind="cross")).hexdigest()
            finally:
                browser.close()
    except BaseException:
        print(log.read_text(errors="replace")[-4000:], file=sys.stderr)
        raise
    finally:
        _stop(server)
    assert server.poll() is not None


def _status_ok(url: str) -> bool:
    try:
        _get_json(url)
        return True
    except OSError:
        return False
