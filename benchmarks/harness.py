"""A small benchmark harness: ours against a reference implementation, time and peak memory, one table.

Rows
----
`benchmarks/run.py` (what `make bench` runs) imports every `benchmarks/rows_*.py` in name order. Each such module
exposes its rows as a function `rows() -> list[Row]` (or a list `ROWS`). Adding a benchmark means adding a module;
`run.py` needs no edit. A `Row` is:

    Row(name="bidirectional forward S=512",            # one line of the table
        make=make_forward,                              # a module-level function of the rows module
        params={"S": 512},                              # JSON-able keyword arguments of `make`
        max_time_ratio=1.0,                             # fail when time(ours) / time(theirs) is above this
        max_memory_ratio=1.0)                           # fail when peak(ours) / peak(theirs) is above this
                                                        # (None: memory is measured and shown, not checked)

`make(**params)` builds everything (layers, same weights, inputs) and returns two zero-argument callables
`(ours, theirs)`; each call does the work of one measurement (e.g. one forward under `torch.no_grad()`, or one
forward and backward). Build inputs and weights inside `make`, not at import time, and seed them.

Time
----
Both callables run in this process, interleaved: after `warmup` untimed calls of each, every round times one call
of each back to back, alternating which goes first (at least `min_repeats` rounds; more, up to `max_repeats`, while
a row stays within `budget_s` seconds). The time ratio of a row is the median over the rounds of
time(ours) / time(theirs) within the round: both calls of a round see the same load from other processes, and the
median ignores the rounds disturbed the most. The times shown are the medians of each side.

Memory
------
CPU PyTorch keeps no allocator statistics, so the peak is read from the operating system, in a fresh Python process
per callable (`python harness.py --memory ...`): it builds the row with `make`, hands freed heap memory back
(`malloc_trim`), resets the kernel's high-water mark of its resident memory (writing 5 to /proc/self/clear_refs),
reads VmRSS, calls the callable once and reads VmHWM. The peak is VmHWM - VmRSS: the most memory the call itself had
in use at once (activations, saved tensors, gradients, workspaces) on top of the process after setup. The process
runs with MALLOC_MMAP_THRESHOLD_=65536, so glibc serves every tensor of 64 KiB or more with its own mapping and
unmaps it when freed: resident memory then follows the live tensors instead of keeping freed heap pages. Where
clear_refs is not available the measurement falls back to the growth of ru_maxrss. Ours and theirs are measured the
same way; a row passes the memory check when peak(ours) <= max_memory_ratio * peak(theirs) + MEMORY_SLACK (1 MiB,
for page granularity and allocator bookkeeping).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import importlib.util
import inspect
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

MEMORY_SLACK = 1 << 20  # bytes


@dataclass
class Row:
    """One benchmark line: `make(**params)` returns the zero-argument callables (ours, theirs)."""

    name: str
    make: Callable[..., tuple[Callable[[], object], Callable[[], object]]]
    params: dict = field(default_factory=dict)
    max_time_ratio: float = 1.0
    max_memory_ratio: float | None = 1.0
    warmup: int = 1
    min_repeats: int = 5
    max_repeats: int = 30
    budget_s: float = 4.0


@dataclass
class Result:
    row: Row
    time_ours: float  # median seconds
    time_theirs: float
    time_ratio: float  # median over rounds of ours / theirs
    repeats: int
    mem_ours: int | None  # peak bytes
    mem_theirs: int | None

    @property
    def memory_ratio(self) -> float | None:
        if self.mem_ours is None or not self.mem_theirs:
            return None
        return self.mem_ours / self.mem_theirs

    @property
    def time_ok(self) -> bool:
        return self.time_ratio <= self.row.max_time_ratio

    @property
    def memory_ok(self) -> bool:
        if self.row.max_memory_ratio is None:
            return True
        if self.mem_ours is None or self.mem_theirs is None:
            return False
        return self.mem_ours <= self.row.max_memory_ratio * self.mem_theirs + MEMORY_SLACK

    @property
    def ok(self) -> bool:
        return self.time_ok and self.memory_ok


def inference_calls(
    ours: torch.nn.Module,
    theirs: torch.nn.Module,
    forward_ours: Callable[[], torch.Tensor],
    forward_theirs: Callable[[], torch.Tensor],
) -> tuple[Callable[[], torch.Tensor], Callable[[], torch.Tensor]]:
    """The (ours, theirs) pair of a forward row: both modules in eval(), each call one forward under no_grad.

    (In that setting nn.MultiheadAttention may take its own fused inference path, which is the fair comparison.)
    """
    ours.eval()
    theirs.eval()

    def no_grad(forward: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
        def call() -> torch.Tensor:
            with torch.no_grad():
                return forward()

        return call

    return no_grad(forward_ours), no_grad(forward_theirs)


def training_steps(
    ours: torch.nn.Module,
    theirs: torch.nn.Module,
    forward_ours: Callable[[], torch.Tensor],
    forward_theirs: Callable[[], torch.Tensor],
    inputs: tuple[torch.Tensor, ...],
    grad_out: torch.Tensor,
) -> tuple[Callable[[], None], Callable[[], None]]:
    """The (ours, theirs) pair of a forward+backward row: each call is one training step's work.

    Both modules go to train() and the inputs require grad; each call clears the gradients of its module and of
    the inputs (so no call pays for accumulating into the previous one's), runs its forward and backpropagates the
    same upstream gradient `grad_out` (the shape of the output).
    """
    ours.train()
    theirs.train()
    for t in inputs:
        t.requires_grad_(True)

    def step(module: torch.nn.Module, forward: Callable[[], torch.Tensor]) -> Callable[[], None]:
        def call() -> None:
            for t in inputs:
                t.grad = None
            for p in module.parameters():
                p.grad = None
            forward().backward(grad_out)

        return call

    return step(ours, forward_ours), step(theirs, forward_theirs)


def load_module(path: str | Path):
    """Import a rows module from its file (benchmarks/ is not a package)."""
    path = Path(path).resolve()
    spec = importlib.util.spec_from_file_location(f"bench_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def rows_of(module) -> list[Row]:
    """The rows a rows module exposes: `rows()` or `ROWS`."""
    if callable(getattr(module, "rows", None)):
        return list(module.rows())
    if hasattr(module, "ROWS"):
        return list(module.ROWS)
    raise AttributeError(f"{module.__file__} must define rows() or ROWS")


def time_pair(
    ours: Callable[[], object], theirs: Callable[[], object], row: Row
) -> tuple[float, float, float, int]:
    """Interleaved timing in one process; returns (median s of ours, of theirs, median ratio per round, rounds)."""
    for _ in range(row.warmup):
        ours()
        theirs()
    times_ours: list[float] = []
    times_theirs: list[float] = []
    started = time.perf_counter()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        while True:
            r = len(times_ours)
            order = [(ours, times_ours), (theirs, times_theirs)]
            if r % 2:
                order.reverse()
            for fn, bucket in order:
                t0 = time.perf_counter()
                fn()
                bucket.append(time.perf_counter() - t0)
            done = r + 1
            if done >= row.max_repeats:
                break
            if done >= row.min_repeats and time.perf_counter() - started > row.budget_s:
                break
    finally:
        if gc_was_enabled:
            gc.enable()
    ratios = [a / b for a, b in zip(times_ours, times_theirs, strict=True)]
    return statistics.median(times_ours), statistics.median(times_theirs), statistics.median(ratios), len(ratios)


def peak_memory(row: Row, which: str) -> int:
    """Peak resident-memory growth in bytes of one call of `which` ("ours" or "theirs"), in a fresh process."""
    make_file = inspect.getfile(row.make)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--memory", make_file, row.make.__qualname__,
           json.dumps(row.params), which]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"memory measurement of {row.name} ({which}) failed:\n{done.stderr}")
    return int(json.loads(done.stdout.strip().splitlines()[-1])["peak_bytes"])


def _status_kib(key: str) -> int:
    return int(re.search(rf"^{key}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M).group(1))


def _measure_memory_here(make_file: str, qualname: str, params_json: str, which: str) -> None:
    """The body of the fresh process of `peak_memory`: build, reset the high-water mark, call once, read it."""
    module = load_module(make_file)
    make = getattr(module, qualname)
    ours, theirs = make(**json.loads(params_json))
    fn = ours if which == "ours" else theirs
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
        before = _status_kib("VmRSS")
        fn()
        peak_kib = _status_kib("VmHWM") - before
    except OSError:  # no procfs or clear_refs: the growth of the lifetime peak
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
        fn()
        peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(json.dumps({"peak_bytes": peak_kib * 1024}))


def run_row(row: Row, memory: bool = True) -> Result:
    ours, theirs = row.make(**row.params)
    t_ours, t_theirs, ratio, n = time_pair(ours, theirs, row)
    del ours, theirs
    gc.collect()
    m_ours = peak_memory(row, "ours") if memory else None
    m_theirs = peak_memory(row, "theirs") if memory else None
    return Result(row, t_ours, t_theirs, ratio, n, m_ours, m_theirs)


def format_table(results: list[Result]) -> str:
    """A markdown table: median times in ms, ratios ours/theirs (below 1: ours faster or smaller), peaks in MiB."""

    def mib(b):
        return "-" if b is None else f"{b / 2**20:.0f}"

    lines = [
        "| row | ours ms | theirs ms | time ratio | ours peak MiB | theirs peak MiB | memory ratio | ok |",
        "|---|---:|---:|---:|---:|---:|---:|:-:|",
    ]
    for r in results:
        mem_ratio = "-" if r.memory_ratio is None else f"{r.memory_ratio:.2f}"
        verdict = "yes" if r.ok else ("NO (time)" if not r.time_ok else "NO (memory)")
        lines.append(
            f"| {r.row.name} | {r.time_ours * 1e3:.1f} | {r.time_theirs * 1e3:.1f} | {r.time_ratio:.2f} | "
            f"{mib(r.mem_ours)} | {mib(r.mem_theirs)} | {mem_ratio} | {verdict} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="internal: measure the peak memory of one callable of a row")
    parser.add_argument("--memory", nargs=4, metavar=("MAKE_FILE", "QUALNAME", "PARAMS_JSON", "WHICH"), required=True)
    _measure_memory_here(*parser.parse_args().memory)
