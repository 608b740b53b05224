"""`make bench`: run every benchmark row of benchmarks/rows_*.py, print one table, fail if ours loses anywhere.

    .venv/bin/python benchmarks/run.py              # all rows; the run is recorded in benchmarks/results/
    .venv/bin/python benchmarks/run.py -k forward   # rows whose name contains "forward"
    .venv/bin/python benchmarks/run.py --no-memory  # time only: skip the (slower) memory measurements
    .venv/bin/python benchmarks/run.py --no-save    # print, do not record

The run prints its environment first (date, commit, torch, CPU, threads, load), then one line per row and a table
with, per side, the median time and its interquartile range, the paired time ratio that decides pass/fail, the
ratio of the medians, and peak memory. The same text goes to benchmarks/results/<date>-<commit>.md and every
measured round to the .json beside it: the README and the notebooks quote such a recorded run.
How rows are written, timed and measured: see the docstring of benchmarks/harness.py.
Exit status 1 when any row is slower than its allowed time ratio or uses more peak memory than allowed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

# Before torch loads its OpenMP runtime: a thread that finishes its share of an operation first then sleeps instead
# of spinning. On a machine shared with other programs a spinning thread takes the core its sibling needs, which
# slows code made of many small operations (notebook 07's tiled path) far more than one large kernel, so the time
# would measure the machine's load. An OMP_WAIT_POLICY already in the environment wins; the run records it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from harness import (  # noqa: E402
    environment,
    format_environment,
    format_table,
    load_module,
    results_json,
    rows_of,
    run_row,
)

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-k", default="", help="only rows whose name contains this text")
    parser.add_argument("--no-memory", action="store_true", help="time only")
    parser.add_argument("--no-save", action="store_true", help="do not record the run in benchmarks/results/")
    args = parser.parse_args()
    rows = [row for path in sorted(HERE.glob("rows_*.py")) for row in rows_of(load_module(path))]
    rows = [row for row in rows if args.k in row.name]
    env = environment()
    lines = [
        f"environment: {format_environment(env)}",
        f"{len(rows)} rows{'' if args.k == '' else f' (-k {args.k!r})'}"
        + ("; memory not measured (--no-memory)" if args.no_memory else ""),
        "ratios are ours / theirs (below 1: ours faster or smaller); the paired time ratio (median over rounds of "
        "ours / theirs in the same round) decides pass/fail",
    ]
    for line in lines:
        print(line, flush=True)
    results, errors = [], []
    started = time.perf_counter()
    for row in rows:
        try:
            result = run_row(row, memory=not args.no_memory)
        except Exception as err:  # one broken row must not lose the measurements of the others
            errors.append((row.name, f"{type(err).__name__}: {err}".strip().splitlines()[-1]))
            print(f"  {row.name}: ERROR {errors[-1][1]}", flush=True)
            continue
        results.append(result)
        print(f"  {row.name}: ours {result.time_ours * 1e3:.1f} ms, theirs {result.time_theirs * 1e3:.1f} ms "
              f"(medians of {result.repeats} rounds), paired time ratio {result.time_ratio:.2f}"
              + ("" if result.memory_ratio is None else f", memory ratio {result.memory_ratio:.2f}"), flush=True)
    seconds = time.perf_counter() - started
    failed = [r.row.name for r in results if not r.ok] + [f"{name} ({error})" for name, error in errors]
    report = [*lines, "", format_table(results), "",
              f"{len(rows) - len(failed)}/{len(rows)} rows pass in {seconds:.0f} s",
              *(f"FAILED: {name}" for name in failed)]
    print("\n" + "\n".join(report[len(lines):]))
    if not args.no_save:
        out = HERE / "results"
        out.mkdir(exist_ok=True)
        stem = f"{env['date'][:10]}-{env['commit']}{'-dirty' if env['dirty'] else ''}"
        (out / f"{stem}.md").write_text("\n".join(report) + "\n")
        record = results_json(env, results, seconds)
        record["errors"] = [{"name": name, "error": error} for name, error in errors]
        (out / f"{stem}.json").write_text(json.dumps(record, indent=1) + "\n")
        print(f"recorded in {(out / stem).relative_to(HERE.parent)}.md and .json")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
