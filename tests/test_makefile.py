"""The Makefile's own logic, run by make in a scratch copy of the project's top level (nothing is installed):
a broken .venv is rebuilt instead of failing later, and `make lab` never moves silently to another port."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """Makefile, pyproject.toml, constraints.txt and an install stamp newer than both, as after `make install`."""
    for name in ("Makefile", "pyproject.toml", "constraints.txt"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    stamp = tmp_path / ".venv" / ".installed"
    stamp.touch()
    later = time.time() + 10
    os.utime(stamp, (later, later))
    return tmp_path


def make(project: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", *args], cwd=project, capture_output=True, text=True, timeout=60)


def healthy(project: Path) -> None:
    """.venv/bin/python runs (this interpreter); .venv/bin/jupyter only echoes its arguments."""
    (project / ".venv" / "bin" / "python").symlink_to(sys.executable)
    jupyter = project / ".venv" / "bin" / "jupyter"
    jupyter.write_text('#!/bin/sh\necho "jupyter $*"\n')
    jupyter.chmod(0o755)


def test_an_intact_venv_is_left_alone(project):
    healthy(project)
    done = make(project, "-n", "install")
    assert done.returncode == 0 and "-m venv" not in done.stdout, done.stdout


def test_a_venv_whose_python_is_gone_is_reinstalled_despite_the_stamp(project):
    done = make(project, "-n", "install")  # -n: print what would run, run nothing
    assert done.returncode == 0, done.stderr
    assert "python3 -m venv .venv" in done.stdout and "pip install" in done.stdout, done.stdout
    assert "rm -rf .venv" in done.stdout  # a half-broken venv is removed before it is made again


def test_lab_refuses_a_busy_port_with_a_message(project):
    healthy(project)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = make(project, "lab", f"PORT={port}")
    assert done.returncode != 0
    assert f"port {port} on 127.0.0.1 is busy" in done.stderr and "make lab PORT=" in done.stderr, done.stderr
    assert "jupyter lab" not in done.stdout


def test_lab_serves_on_the_port_it_announces_and_no_other(project):
    healthy(project)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = make(project, "lab", f"PORT={port}")
    assert done.returncode == 0, done.stderr
    assert f"serves http://127.0.0.1:{port}/lab" in done.stdout
    launched = next(line for line in done.stdout.splitlines() if line.startswith("jupyter lab"))
    assert f"--port={port}" in launched and "--ServerApp.port_retries=0" in launched
