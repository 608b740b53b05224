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
                                                        # (None: time is measured and shown, not checked)
        max_memory_ratio=1.0)                           # fail when peak(ours) / peak(theirs) is above this
                                                        # (None: memory is measured and shown, not checked)

`make(**params)` builds everything (layers, same weights, inputs) and returns two zero-argument callables
`(ours, theirs)`; each call does the work of one measurement (e.g. one forward under `torch.no_grad()`, or one
forward and backward). Build inputs and weights inside `make`, not at import time, and seed them.

Time
----
Both callables run in this process, interleaved: after `warmup` untimed calls of each, every round times one call
of each back to back, alternating which goes first (at least `min_repeats` rounds; more, up to `max_repeats`, while
a row stays within `budget_s` seconds).

One statistic decides and is quoted: the **paired ratio**, the median over the rounds of time(ours) / time(theirs)
within the round. Both calls of a round see the same load from other processes, so the paired ratio cancels most
of a shared machine's drift, and the median ignores the rounds disturbed the most. A row passes the time check when
its paired ratio is at most `max_time_ratio`. Beside it the table shows what each side measured on its own: the
median time of ours and of theirs with their interquartile range (IQR, the middle half of the rounds), and the
ratio of those two medians. When the ratio of medians and the paired ratio fall on different sides of 1 the rounds
were too disturbed to tell the two apart, and the table says "unclear" in the column `medians agree`.

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
import contextlib
import ctypes
import datetime
import gc
import importlib.util
import inspect
import json
import os
import platform
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
    max_time_ratio: float | None = 1.0
    max_memory_ratio: float | None = 1.0
    warmup: int = 1
    min_repeats: int = 5
    max_repeats: int = 30
    budget_s: float = 4.0


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """(first quartile, median, third quartile) of `values`; the middle half of them lies between the quartiles."""
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


@dataclass
class Result:
    row: Row
    time_ours: float  # median seconds
    time_theirs: float
    time_ratio: float  # the paired ratio: median over rounds of ours / theirs (decides, and is quoted)
    repeats: int
    mem_ours: int | None  # peak bytes; None when memory was not measured
    mem_theirs: int | None
    times_ours: list[float] = field(default_factory=list)  # seconds, one per round
    times_theirs: list[float] = field(default_factory=list)

    @property
    def memory_measured(self) -> bool:
        return self.mem_ours is not None and self.mem_theirs is not None

    @property
    def memory_ratio(self) -> float | None:
        if not self.memory_measured or not self.mem_theirs:
            return None
        return self.mem_ours / self.mem_theirs

    @property
    def ratios(self) -> list[float]:
        """time(ours) / time(theirs) of each round."""
        return [a / b for a, b in zip(self.times_ours, self.times_theirs, strict=True)]

    @property
    def ratio_of_medians(self) -> float:
        return self.time_ours / self.time_theirs

    @property
    def medians_agree(self) -> bool:
        """The ratio of the medians falls on the same side of 1 as the paired ratio (ties count as agreeing)."""
        return (self.ratio_of_medians - 1) * (self.time_ratio - 1) >= 0

    @property
    def time_ok(self) -> bool:
        return self.row.max_time_ratio is None or self.time_ratio <= self.row.max_time_ratio

    @property
    def memory_ok(self) -> bool:
        """Peak memory within the allowed ratio; a row whose memory was not measured (--no-memory) passes it."""
        if self.row.max_memory_ratio is None or not self.memory_measured:
            return True
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
) -> tuple[list[float], list[float]]:
    """Interleaved timing in one process; returns the seconds of each round, (ours, theirs)."""
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
    return times_ours, times_theirs


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
    times_ours, times_theirs = time_pair(ours, theirs, row)
    del ours, theirs
    gc.collect()
    m_ours = peak_memory(row, "ours") if memory else None
    m_theirs = peak_memory(row, "theirs") if memory else None
    ratios = [a / b for a, b in zip(times_ours, times_theirs, strict=True)]
    return Result(
        row, statistics.median(times_ours), statistics.median(times_theirs), statistics.median(ratios),
        len(ratios), m_ours, m_theirs, times_ours, times_theirs,
    )


def verdict(r: Result) -> str:
    if not r.time_ok:
        return "NO (time)"
    if not r.memory_ok:
        return "NO (memory)"
    return "yes" if r.memory_measured or r.row.max_memory_ratio is None else "yes (time only)"


def format_table(results: list[Result]) -> str:
    """A markdown table: per side the median ms [IQR], the paired ratio [IQR] that decides, the ratio of the
    medians, and peak memory in MiB. Ratios are ours / theirs: below 1, ours is faster or smaller."""

    def ms(times):
        q1, q2, q3 = quartiles(times)
        return f"{q2 * 1e3:.1f} [{q1 * 1e3:.1f}–{q3 * 1e3:.1f}]"

    def mib(b):
        return "-" if b is None else f"{b / 2**20:.0f}"

    lines = [
        "| row | rounds | ours ms, median [IQR] | theirs ms, median [IQR] | paired time ratio, median [IQR] "
        "| ratio of medians | medians agree | ours peak MiB | theirs peak MiB | memory ratio | ok |",
        "|---|---:|---:|---:|---:|---:|:-:|---:|---:|---:|:-:|",
    ]
    for r in results:
        q1, q2, q3 = quartiles(r.ratios)
        mem_ratio = "-" if r.memory_ratio is None else f"{r.memory_ratio:.2f}"
        lines.append(
            f"| {r.row.name} | {r.repeats} | {ms(r.times_ours)} | {ms(r.times_theirs)} | "
            f"{q2:.2f} [{q1:.2f}–{q3:.2f}] | {r.ratio_of_medians:.2f} | {'yes' if r.medians_agree else 'unclear'} | "
            f"{mib(r.mem_ours)} | {mib(r.mem_theirs)} | {mem_ratio} | {verdict(r)} |"
        )
    return "\n".join(lines)


def environment() -> dict:
    """What a reader needs to judge or repeat a run: versions, CPU, threads, the commit measured, the load."""
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else ""

    cpu = "unknown"
    with contextlib.suppress(OSError):
        found = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        cpu = found.group(1).strip() if found else platform.processor() or "unknown"
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": git("rev-parse", "--short=10", "HEAD") or "unknown",
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": cpu,
        "logical_cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "unset"),
        "load_average_1_5_15_min": [round(v, 2) for v in load],
    }


def format_environment(env: dict) -> str:
    dirty = " (with uncommitted changes)" if env["dirty"] else ""
    load = " / ".join(f"{v:.2f}" for v in env["load_average_1_5_15_min"])
    return (
        f"{env['date']}; commit {env['commit']}{dirty}; torch {env['torch']}, Python {env['python']}; "
        f"CPU {env['cpu']}, {env['logical_cpus']} logical CPUs, torch threads {env['torch_threads']}, "
        f"OMP_WAIT_POLICY {env.get('omp_wait_policy', 'unset')}; "
        f"load average before the run {load} (1 / 5 / 15 min)"
    )


def results_json(env: dict, results: list[Result], seconds: float) -> dict:
    """Everything a run measured, raw round times included, for benchmarks/results/."""
    return {
        "environment": env,
        "seconds": round(seconds, 1),
        "statistic": "paired time ratio = median over rounds of time(ours) / time(theirs); it decides pass/fail",
        "rows": [
            {
                "name": r.row.name,
                "params": r.row.params,
                "rounds": r.repeats,
                "ours_ms": [round(t * 1e3, 3) for t in r.times_ours],
                "theirs_ms": [round(t * 1e3, 3) for t in r.times_theirs],
                "ours_median_ms": round(r.time_ours * 1e3, 3),
                "theirs_median_ms": round(r.time_theirs * 1e3, 3),
                "paired_ratio": round(r.time_ratio, 4),
                "paired_ratio_quartiles": [round(v, 4) for v in quartiles(r.ratios)],
                "ratio_of_medians": round(r.ratio_of_medians, 4),
                "max_time_ratio": r.row.max_time_ratio,
                "ours_peak_mib": None if r.mem_ours is None else round(r.mem_ours / 2**20, 1),
                "theirs_peak_mib": None if r.mem_theirs is None else round(r.mem_theirs / 2**20, 1),
                "memory_ratio": None if r.memory_ratio is None else round(r.memory_ratio, 4),
                "max_memory_ratio": r.row.max_memory_ratio,
                "ok": r.ok,
                "verdict": verdict(r),
            }
            for r in results
        ],
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="internal: measure the peak memory of one callable of a row")
    parser.add_argument("--memory", nargs=4, metavar=("MAKE_FILE", "QUALNAME", "PARAMS_JSON", "WHICH"), required=True)
    _measure_memory_here(*parser.parse_args().memory)
