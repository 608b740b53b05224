"""Quote a recorded benchmark run: write its tables into README.md and the notebooks, or check that they agree.

    python scripts/quote_bench.py          # rewrite every quoted table (what `make quote-bench` runs)
    python scripts/quote_bench.py --check  # exit 1 if a quoted table differs from what would be written

A quoted table is the text between two HTML comments, which Markdown renderers do not show, in README.md or in a
markdown cell of a notebook (notebooks/*.ipynb, and the Chinese edition's notebooks/zh/*.ipynb, whose tables are
the English ones: generated text, like an output):

    <!-- bench rows="causal forward" run=latest -->
    (written by this script: the run's environment, a sentence on the machine's load, the table, a legend)
    <!-- /bench -->

`rows` selects the rows of the run whose name starts with that text (leave it out for every row); `run` names a
recorded run, the stem of a file in benchmarks/results/ (`run=2026-11-30-1f8cf8a742`), or `latest`, the newest
recorded run (by the date it recorded) that measured those rows. Everything between the two comments is
replaced; edit the comments, not the table. Each table shows, per side, the median time over the rounds and its
interquartile range computed from the recorded rounds, the paired time ratio and its quartiles, the smallest and
largest per-round ratio, the ratio of the medians, and peak memory, exactly as `benchmarks/run.py` recorded them.

To quote a new run: `make bench` (records it in benchmarks/results/), then `make quote-bench`; every marker with
`run=latest` then quotes the new run. Re-read the prose beside each table afterwards: it may quote numbers.
Only the standard library is used, so the script runs without the project's environment.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path("benchmarks") / "results"
MARKER = re.compile(r"<!-- bench(?P<attrs>(?:\s+\w+=(?:\"[^\"]*\"|[^\s\"]+))*)\s*-->(?P<body>.*?)<!-- /bench -->", re.S)
ATTR = re.compile(r"(\w+)=(?:\"([^\"]*)\"|([^\s\"]+))")


class QuoteError(Exception):
    """A marker that cannot be filled: an unknown attribute or run, or no row with the prefix."""


@dataclass
class Run:
    stem: str  # the file name without .json, e.g. 2026-11-30-1f8cf8a742
    record: dict

    @property
    def env(self) -> dict:
        return self.record["environment"]


def load_runs(root: Path) -> dict[str, Run]:
    """Every recorded run in benchmarks/results/, by stem."""
    return {p.stem: Run(p.stem, json.loads(p.read_text())) for p in sorted((root / RESULTS).glob("*.json"))}


def resolve(runs: dict[str, Run], name: str, prefix: str = "") -> Run:
    """`latest` is the newest recorded run (by date, then stem) that measured rows starting with `prefix` (a run of
    some rows only, e.g. `run.py --only variants`, does not hide the rows it skipped); any other name is a stem."""
    if not runs:
        raise QuoteError(f"no recorded run in {RESULTS}/: run `make bench` first")
    if name == "latest":
        measured = [r for r in runs.values() if any(row["name"].startswith(prefix) for row in r.record["rows"])]
        if not measured:
            raise QuoteError(f"no recorded run has a row whose name starts with {prefix!r}")
        return max(measured, key=lambda r: (r.env.get("date", ""), r.stem))
    if name not in runs:
        raise QuoteError(f"run={name!r} is not a recorded run; recorded: {', '.join(sorted(runs))}")
    return runs[name]


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """The harness's quartiles (benchmarks/harness.py): inclusive method, one value gives itself three times."""
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def _ms(values: list[float]) -> str:
    """median [first quartile–third quartile] in ms, with as many decimals as the median's size calls for."""
    q1, q2, q3 = quartiles(values)
    digits = 0 if q2 >= 100 else 1 if q2 >= 10 else 2
    return f"{q2:.{digits}f} [{q1:.{digits}f}–{q3:.{digits}f}]"


def _load_sentence(env: dict) -> str:
    load, load5, load15 = env["load_average_1_5_15_min"]
    cpus = env["logical_cpus"]
    if load > 2 * cpus:
        state = ("heavily loaded", "single timings vary a lot between rounds, so read each time ratio with its "
                 "interquartile range, and a row marked \"unclear\" as a tie")
    elif load > cpus:
        state = ("loaded", "timings vary between rounds, so read each time ratio with its interquartile range")
    else:
        state = ("lightly loaded", "the interquartile ranges show how much the rounds still varied")
    before = ""
    if load <= cpus < max(load5, load15):  # light now, busy just before: the minute's average alone would mislead
        before = f", after a busier spell: {load5:.2f} over 5 minutes, {load15:.2f} over 15"
    return (f"The machine was {state[0]} when this run started (load average {load:.2f} over the last minute on "
            f"{cpus} logical CPUs{before}): {state[1]}.")


def table(run: Run, prefix: str, link: str) -> str:
    """The text that goes between the markers: environment, load sentence, table, legend."""
    env = run.env
    rows = [r for r in run.record["rows"] if r["name"].startswith(prefix)]
    errors = [e for e in run.record.get("errors", []) if e["name"].startswith(prefix)]
    if not rows and not errors:
        raise QuoteError(f"run {run.stem} has no row whose name starts with {prefix!r}")
    dirty = " (with uncommitted changes)" if env.get("dirty") else ""
    load = " / ".join(f"{v:.2f}" for v in env["load_average_1_5_15_min"])
    lines = [
        f"*Recorded run [`{run.stem}`]({link}): {env['date']}, commit {env['commit']}{dirty}, torch {env['torch']}, "
        f"Python {env['python']}, CPU {env['cpu']} ({env['logical_cpus']} logical CPUs, {env['torch_threads']} "
        f"torch threads), load average {load} (1 / 5 / 15 min) before the run.*",
        "",
        _load_sentence(env),
        "",
        "| row | rounds | ours ms, median [IQR] | theirs ms, median [IQR] | time ratio, paired [IQR] "
        "| per-round ratios, min–max | ratio of medians | peak MiB, ours / theirs (ratio) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        q1, q2, q3 = r["paired_ratio_quartiles"]
        per_round = [a / b for a, b in zip(r["ours_ms"], r["theirs_ms"], strict=True)]
        unclear = (r["ratio_of_medians"] - 1) * (r["paired_ratio"] - 1) < 0
        if r["ours_peak_mib"] is None or r["theirs_peak_mib"] is None:
            memory = "not measured"
        else:
            memory = f"{r['ours_peak_mib']:.1f} / {r['theirs_peak_mib']:.1f} ({r['memory_ratio']:.2f})"
        lines.append(
            f"| {r['name']} | {r['rounds']} | {_ms(r['ours_ms'])} | {_ms(r['theirs_ms'])} | "
            f"{q2:.2f} [{q1:.2f}–{q3:.2f}]{' (unclear)' if unclear else ''} | "
            f"{min(per_round):.2f}–{max(per_round):.2f} | {r['ratio_of_medians']:.2f} | {memory} |"
        )
    for e in errors:
        lines.append(f"| {e['name']} | – | error: {e['error']} | | | | | |")
    lines += [
        "",
        "Ratios are ours / theirs: below 1, ours is faster or smaller. The paired ratio is the median over the rounds "
        "of ours / theirs within one round; \"unclear\": the ratio of the medians and the paired ratio fall on "
        "different sides of 1.",
    ]
    return "\n".join(lines)


def fill(text: str, runs: dict[str, Run], link_base: str, where: str) -> tuple[str, int]:
    """`text` with every marked region rewritten; returns the new text and the number of regions."""
    count = 0

    def replace(match: re.Match) -> str:
        nonlocal count
        attrs = {m.group(1): m.group(2) if m.group(2) is not None else m.group(3)
                 for m in ATTR.finditer(match.group("attrs"))}
        unknown = set(attrs) - {"rows", "run"}
        if unknown or "run" not in attrs:
            raise QuoteError(f"{where}: a bench marker takes rows=\"prefix\" and run=<stem or latest>, "
                             f"got {match.group(0).splitlines()[0]!r}")
        run = resolve(runs, attrs["run"], attrs.get("rows", ""))
        count += 1
        try:
            body = table(run, attrs.get("rows", ""), f"{link_base}{RESULTS.as_posix()}/{run.stem}.md")
        except QuoteError as err:
            raise QuoteError(f"{where}: {err}") from None
        head = match.group(0)[: match.start("body") - match.start()]
        return f"{head}\n\n{body}\n\n<!-- /bench -->"

    return MARKER.sub(replace, text), count


def _lines(source: str) -> list[str]:
    return source.splitlines(keepends=True)


def quoted_files(root: Path) -> list[Path]:
    notebooks = root / "notebooks"
    return [root / "README.md", *sorted(notebooks.glob("*.ipynb")), *sorted((notebooks / "zh").glob("*.ipynb"))]


def rewrite(path: Path, runs: dict[str, Run], root: Path) -> tuple[str, str, int]:
    """(the file's text, the text with its tables rewritten, the number of tables)."""
    old = path.read_text()
    link_base = os.path.relpath(root, path.parent).replace(os.sep, "/") + "/"
    link_base = "" if link_base == "./" else link_base
    where = path.relative_to(root).as_posix()
    if path.suffix != ".ipynb":
        new, count = fill(old, runs, link_base, where)
        return old, new, count
    nb = json.loads(old)
    count = 0
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        source = "".join(cell["source"])
        filled, n = fill(source, runs, link_base, f"{where}, cell {cell.get('id', i)}")
        count += n
        if filled != source:
            cell["source"] = _lines(filled)
    new = json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n"  # nbformat's own layout
    return old, (old if new == old else new), count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 if a quoted table is not what would be written")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)  # tests run on a copy
    args = parser.parse_args(argv)
    root = args.root.resolve()
    try:
        runs = load_runs(root)
        results = [(path, *rewrite(path, runs, root)) for path in quoted_files(root) if path.exists()]
    except QuoteError as err:
        print(f"quote_bench: {err}", file=sys.stderr)
        return 1
    stale = [(path, old, new) for path, old, new, _ in results if old != new]
    tables = sum(count for *_, count in results)
    if args.check:
        for path, old, new in stale:
            rel = path.relative_to(root).as_posix()
            diff = difflib.unified_diff(old.splitlines(), new.splitlines(), rel, f"{rel} (quoted afresh)",
                                        lineterm="", n=0)
            print("\n".join(list(diff)[:40]), file=sys.stderr)
        if stale:
            latest = resolve(runs, "latest").stem
            print(f"quote_bench: {len(stale)} file(s) quote something other than their recorded run (the newest is "
                  f"{latest}): run `make quote-bench`, or delete a run from {RESULTS}/ that should not be quoted",
                  file=sys.stderr)
            return 1
        print(f"quote_bench: {tables} quoted tables agree with their recorded runs")
        return 0
    for path, _, new in stale:
        path.write_text(new)
    print(f"quote_bench: {tables} quoted tables, {len(stale)} file(s) rewritten")
    for path, *_ in stale:
        print(f"  {path.relative_to(root).as_posix()}")
    if stale:
        print("re-read the prose beside each rewritten table: it may quote numbers of the run quoted before")
    return 0


if __name__ == "__main__":
    sys.exit(main())
