"""Build the series' website from the committed, executed notebooks (nothing is re-executed, nothing is fetched).

    python scripts/build_site.py [OUTDIR]        # default build/site; open OUTDIR/index.html, or serve the folder

Sphinx with myst-nb and sphinx-book-theme, configured in site/conf.py. Two editions, one Sphinx build each: English
(site/index.md and notebooks/) into OUTDIR, Chinese (site/zh/index.md and notebooks/zh/) into OUTDIR/zh, the same
pages at the same paths under zh/. A warning fails the build, so that a broken cross-reference, an unknown output or
a missing picture is seen at once. The build is incremental (Sphinx reads a copy of site/ and of the notebooks laid
out beside OUTDIR): a second run rebuilds only the pages whose notebook changed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SITE = ROOT / "site"
DEFAULT_OUT = ROOT / "build" / "site"
# Each edition: its landing page, its notebooks, and where its pages go inside the site (the same for conf.py's
# ATTENTION_SITE_LANGUAGE and series.py's language switch).
EDITIONS = {
    "en": (SITE / "index.md", ROOT / "notebooks", ""),
    "zh": (SITE / "zh" / "index.md", ROOT / "notebooks" / "zh", "zh"),
}
GLOSSARY = ROOT / "notebooks" / "zh" / "GLOSSARY.md"


def glossary_words(text: str) -> list[str]:
    """The Chinese terms of the glossary's table (its second column) that are one word to jieba: written without a
    space or a Latin letter (因果掩码, 多头注意力; not "KV 缓存", which the search finds as two words anyway)."""
    words, body = [], False  # body: below a table's |---| line (its heading row names the columns)
    for line in text.splitlines():
        if not line.startswith("|"):
            body = False
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if set("".join(cells)) <= set("-: "):
            body = True
        elif body and len(cells) >= 2 and re.fullmatch(r"[\u4e00-\u9fff]{2,}", cells[1]):
            words.append(cells[1])
    return sorted(set(words))


def stage(source: Path, language: str = "en") -> None:
    """Lay out Sphinx's source folder of one edition: site/ (configuration, templates, static files) with the
    edition's landing page as index.md, and its notebooks under notebooks/, as the English ones are in the repository.
    Copies keep their modification times, so an unchanged notebook is not rebuilt; a notebook removed from the
    repository is removed here too. The Chinese edition also gets search_zh.txt, the glossary's terms as a jieba
    dictionary (conf.py's html_search_options)."""
    landing, folder, _ = EDITIONS[language]
    shutil.copytree(SITE, source, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "zh"))
    if landing != SITE / "index.md":
        shutil.copy2(landing, source / "index.md")
    if language == "zh":
        dictionary = "".join(f"{word}\n" for word in glossary_words(GLOSSARY.read_text(encoding="utf-8")))
        target = source / "search_zh.txt"
        if not target.exists() or target.read_text(encoding="utf-8") != dictionary:
            target.write_text(dictionary, encoding="utf-8")
    notebooks = source / "notebooks"
    notebooks.mkdir(exist_ok=True)
    wanted = {p.name for p in folder.glob("[0-9]*.ipynb")}
    for old in notebooks.glob("*.ipynb"):
        if old.name not in wanted:
            old.unlink()
    for name in sorted(wanted):
        shutil.copy2(folder / name, notebooks / name)


def build_edition(out: Path, language: str, fresh: bool = False) -> None:
    """Build one edition into `out` (the site's folder; the Chinese edition goes into its zh/)."""
    _, _, prefix = EDITIONS[language]
    pages = out / prefix if prefix else out
    tag = f"{out.name}-{language}" if prefix else out.name
    source = out.parent / f".{tag}-source"
    stage(source, language)
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-q", "-j", "auto"]
    if fresh:
        command.append("-E")
    # The doctrees go beside the pages, not into them: the published folder holds the site alone.
    command += ["-d", str(out.parent / f".{tag}-doctrees"), str(source), str(pages)]
    env = {**os.environ, "ATTENTION_REPOSITORY": str(ROOT), "ATTENTION_SITE_LANGUAGE": language}
    subprocess.run(command, check=True, cwd=ROOT, env=env)
    # Sphinx leaves the page of a notebook that is gone (renamed, removed): the site keeps the series' pages only.
    series = {p.stem for p in (source / "notebooks").glob("*.ipynb")}
    for stale in [*pages.glob("notebooks/*.html"), *pages.glob("_sources/notebooks/*.ipynb")]:
        if stale.name.split(".")[0] not in series:
            stale.unlink()


def build(out: Path = DEFAULT_OUT, fresh: bool = False) -> float:
    """Build both editions of the site into `out`; return the seconds it took. Raises CalledProcessError when Sphinx
    fails."""
    start = time.perf_counter()
    for language in EDITIONS:
        build_edition(out, language, fresh)
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
