"""Build the series' website from the committed, executed notebooks (nothing is re-executed, nothing is fetched).

    python scripts/build_site.py [OUTDIR]        # default build/site; open OUTDIR/index.html, or serve the folder

Sphinx with myst-nb and sphinx-book-theme, configured in site/conf.py. A warning fails the build, so that a broken
cross-reference, an unknown output or a missing picture is seen at once. The build is incremental (Sphinx reads a
copy of site/ and notebooks/ laid out beside OUTDIR): a second run rebuilds only the pages whose notebook changed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SITE = ROOT / "site"
DEFAULT_OUT = ROOT / "build" / "site"


def stage(source: Path) -> None:
    """Lay out Sphinx's source folder: site/ (configuration, landing page) and the notebooks of the series under
    notebooks/, as in the repository. Copies keep their modification times, so an unchanged notebook is not rebuilt;
    a notebook removed from the repository is removed here too."""
    shutil.copytree(SITE, source, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    notebooks = source / "notebooks"
    notebooks.mkdir(exist_ok=True)
    wanted = {p.name for p in (ROOT / "notebooks").glob("[0-9]*.ipynb")}
    for old in notebooks.glob("*.ipynb"):
        if old.name not in wanted:
            old.unlink()
    for name in sorted(wanted):
        shutil.copy2(ROOT / "notebooks" / name, notebooks / name)


def build(out: Path = DEFAULT_OUT, fresh: bool = False) -> float:
    """Build the site into `out`; return the seconds it took. Raises CalledProcessError when Sphinx fails."""
    source = out.parent / f".{out.name}-source"
    stage(source)
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-q", "-j", "auto"]
    if fresh:
        command.append("-E")
    # The doctrees go beside the pages, not into them: the published folder holds the site alone.
    command += ["-d", str(out.parent / f".{out.name}-doctrees"), str(source), str(out)]
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=ROOT, env={**os.environ, "ATTENTION_REPOSITORY": str(ROOT)})
    # Sphinx leaves the page of a notebook that is gone (renamed, removed): the site keeps the series' pages only.
    series = {p.stem for p in (source / "notebooks").glob("*.ipynb")}
    for stale in [*out.glob("notebooks/*.html"), *out.glob("_sources/notebooks/*.ipynb")]:
        if stale.name.split(".")[0] not in series:
            stale.unlink()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--fresh", action="store_true", help="rebuild every page, not only the changed ones")
    args = parser.parse_args()
    seconds = build(args.out.resolve(), args.fresh)
    pages = sum(1 for _ in args.out.glob("**/*.html") if "_static" not in _.parts and "_sources" not in _.parts)
    print(f"site: {pages} pages in {args.out} ({seconds:.1f} s)")


if __name__ == "__main__":
    main()
