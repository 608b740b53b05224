"""`make bench`: run every benchmark row of benchmarks/rows_*.py, print one table, fail if ours loses anywhere.

    .venv/bin/python benchmarks/run.py              # all rows
    .venv/bin/python benchmarks/run.py -k forward   # rows whose name contains "forward"
    .venv/bin/python benchmarks/run.py --no-memory  # skip the (slower) memory measurements

How rows are written, timed and measured: see the docstring of benchmarks/harness.py.
Exit status 1 when any row is slower than its allowed time ratio or uses more peak memory than allowed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from harness import format_table, load_module, rows_of, run_row

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-k", default="", help="only rows whose name contains this text")
    parser.add_argument("--no-memory", action="store_true", help="time only")
    args = parser.parse_args()
    rows = [row for path in sorted(HERE.glob("rows_*.py")) for row in rows_of(load_module(path))]
    rows = [row for row in rows if args.k in row.name]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {len(rows)} rows; "
          "ratios are ours / theirs (below 1: ours faster or smaller)", flush=True)
    results = []
    started = time.perf_counter()
    for row in rows:
        result = run_row(row, memory=not args.no_memory)
        results.append(result)
        print(f"  {row.name}: time ratio {result.time_ratio:.2f} over {result.repeats} rounds"
              + ("" if result.memory_ratio is None else f", memory ratio {result.memory_ratio:.2f}"), flush=True)
    print()
    print(format_table(results))
    failed = [r.row.name for r in results if not r.ok]
    print(f"\n{len(results) - len(failed)}/{len(results)} rows pass in {time.perf_counter() - started:.0f} s")
    for name in failed:
        print(f"FAILED: {name}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
