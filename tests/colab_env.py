"""A Colab-like Python environment for the tests: what a bare Google Colab runtime brings, and nothing of ours.

    base = colab_base_env()          # built once, cached under ~/.cache/attention-from-scratch (see CACHE)
    python = fresh_env(base, tmp)    # a new, empty venv per run that sees the base's packages

The base environment is a Python 3.11 venv holding the packages of Colab that matter to the series, at the versions
of constraints.txt where it pins them: torch 2.13.0 (the CPU build on this machine's disk; Colab brings its own
CUDA build), ipywidgets 7.7.1 (Colab's long-standing version), matplotlib, numpy, transformers,
sentence-transformers (with scipy and scikit-learn, all preinstalled in Colab), fastcore (preinstalled with Colab's
fastai) and ipykernel; plus pytest, which
only runs tests/test_viz.py under ipywidgets 7. attention_lib is not in it. Building it takes a few
minutes; it is keyed on a hash of constraints.txt and of the package list below, so it is built again only when
one of them changes, and it is shared by every checkout on the machine (a fresh clone in CI reuses it).

A fresh environment is a venv without packages of its own, whose site-packages holds a .pth file that adds the
base's site-packages (and the stub `google.colab` package of tests/colab_stub): Python, pip and the kernel see
torch and ipywidgets as installed, and whatever a notebook installs goes into the fresh venv alone.

Python 3.11 is required: the pinned torch is a local file for 3.11 on these machines, while a torch for another
Python would come from the index as a CUDA build of several GB. ATTENTION_COLAB_PYTHON names the interpreter
(default: python3.11 on PATH); without it the Colab-like tests skip, unless ATTENTION_REQUIRE_COLAB=1 (CI), which
makes them fail.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from importlib.metadata import PathDistribution
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STUB = Path(__file__).resolve().parent / "colab_stub"
CACHE = Path(
    os.environ.get("ATTENTION_COLAB_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attention-from-scratch"
)
PYTHON_VERSION = "3.11"
# What a bare Colab runtime has that the notebooks touch. torch alone first and pinned, as in the Makefile: an
# unpinned torch would pull a CUDA build of several GB.
TORCH = "torch==2.13.0"
PACKAGES = [
    "ipywidgets==7.7.1", "matplotlib", "numpy", "transformers", "sentence-transformers", "fastcore", "ipykernel",
    "pytest", "accelerate",
]
# Pins of constraints.txt that belong to ipywidgets 8 and would contradict ipywidgets==7.7.1.
NOT_CONSTRAINED = {"ipywidgets", "widgetsnbextension", "jupyterlab-widgets"}


def _name(line: str) -> str:
    return line.partition("==")[0].strip().lower().replace("_", "-")


def colab_python() -> str:
    """The Python 3.11 interpreter to build with; skips (or fails under ATTENTION_REQUIRE_COLAB=1) without one."""
    python = os.environ.get("ATTENTION_COLAB_PYTHON") or shutil.which(f"python{PYTHON_VERSION}")
    problem = None
    if not python:
        problem = f"python{PYTHON_VERSION} not found on PATH (set ATTENTION_COLAB_PYTHON)"
    else:
        try:
            version = subprocess.run(
                [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                capture_output=True, text=True, check=True, timeout=60,
            ).stdout.strip()  # fmt: skip
        except (OSError, subprocess.SubprocessError) as error:
            version, problem = "", f"{python} does not run: {error}"
        if not problem and version != PYTHON_VERSION:
            problem = f"{python} is Python {version}, not {PYTHON_VERSION}"
    if problem and os.environ.get("ATTENTION_REQUIRE_COLAB") == "1":
        pytest.fail(f"Colab-like test required (ATTENTION_REQUIRE_COLAB=1) but cannot run: {problem}")
    if problem:
        pytest.skip(f"Colab-like test skipped: {problem}")
    return python


def _constraints() -> str:
    """constraints.txt without the pins of ipywidgets 8 and its front-end packages."""
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    return "\n".join(line for line in lines if line.startswith("#") or _name(line) not in NOT_CONSTRAINED) + "\n"


def env_key() -> str:
    text = "\n".join([PYTHON_VERSION, TORCH, *PACKAGES, _constraints()])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{PYTHON_VERSION}" / "site-packages"


def _run(command: list[str], log: Path) -> None:
    with open(log, "a") as out:
        out.write("$ " + " ".join(command) + "\n")
        out.flush()
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, timeout=1800)
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} failed (exit {done.returncode}); see {log}")


def colab_base_env() -> Path:
    """The cached base venv (built on first use, under a lock so parallel runs build it once); returns its path."""
    python = colab_python()
    home = CACHE / f"colab-env-{env_key()}"
    venv, done = home / "venv", home / "complete"
    if done.exists():
        return venv
    home.mkdir(parents=True, exist_ok=True)
    with open(home / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if done.exists():  # another run built it while we waited
                return venv
            shutil.rmtree(venv, ignore_errors=True)  # a build that was interrupted
            log = home / "build.log"
            log.write_text("")
            (home / "constraints.txt").write_text(_constraints())
            _run([python, "-m", "venv", str(venv)], log)
            pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "-c", str(home / "constraints.txt")]
            _run([*pip, TORCH], log)
            _run([*pip, *PACKAGES], log)
            freeze = subprocess.run(
                [str(venv / "bin" / "python"), "-m", "pip", "freeze"], capture_output=True, text=True, check=True
            ).stdout
            done.write_text(freeze)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return venv


def fresh_env(base: Path, where: Path) -> Path:
    """A new venv at `where` with no packages of its own that sees the base's and the stub google.colab;
    returns its python. pip run by that python installs into this venv only."""
    python = base / "bin" / "python"
    subprocess.run([str(python), "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    lines = [f"import site; site.addsitedir({str(site_packages(base))!r})", str(STUB)]
    (site_packages(where) / "_colab_base.pth").write_text("\n".join(lines) + "\n")
    return where / "bin" / "python"


def own_distributions(venv: Path) -> set[str]:
    """Names of the distributions installed in this venv's own site-packages (not those it sees through the .pth)."""
    infos = site_packages(venv).glob("*.dist-info")
    return {PathDistribution(info).metadata["Name"].lower().replace("_", "-") for info in infos}


def clean_env(**extra: str) -> dict[str, str]:
    """The environment for a process of the Colab-like python: this process's, less what ties it to our venv."""
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP"}}
    if env.get("PATH"):  # drop our venv's bin from PATH, so no tool of ours is found first
        ours = str(Path(sys.prefix) / "bin")
        env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != ours)
    env.update(extra)
    return env
