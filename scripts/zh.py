"""Keep the Chinese edition (notebooks/zh/) in step with the English notebooks.

    python scripts/zh.py                 # report what is stale or wrong; exit 1 if anything is (make zh-check)
    python scripts/zh.py check [NAME ...] # the same, for these notebooks only
    python scripts/zh.py outputs [NAME ...]
                                         # copy the English outputs onto code cells whose code is the English code,
                                         # and the English notebook's saved widget state
    python scripts/zh.py status          # one line per notebook: cells translated, stale, untranslated
    python scripts/zh.py new NAME        # start notebooks/zh/NAME as a copy of the English (nothing translated yet)
    python scripts/zh.py stamp NAME [ID ...]
                                         # record that these cells translate the English cells as they are now
                                         # (default: the cells never stamped that read as translated; a stale
                                         # cell, once its translation is updated, is stamped by its id)

Each Chinese notebook has the same cells as its English twin, in the same order, with the same ids. A cell's
metadata "zh": {"en": HASH} records the hash of the English cell it translates (its source; for the first markdown
cell, without the Colab badge, which differs by language). The check reports, naming notebook and cell:
- a notebook with no twin, or a twin with no English notebook;
- cells added, removed or moved on one side only;
- a cell never stamped, or stamped before its English cell last changed (stale: the English text moved on);
- markdown that still reads as English, or a code comment that does;
- headings of other levels or in another number, or other exercise numbers, than the English cell's;
- a relative link that leads nowhere from notebooks/zh/;
- a benchmark table (quoted by scripts/quote_bench.py, generated and the same in both languages) that differs;
- code that differs other than in comments (compared token by token; `#|` directives and NBVAL markers are code);
- outputs or execution counts that differ, or a saved widget state (the notebook's metadata "widgets", which its
  widget outputs draw from, on the website too) that differs;
- a glossary variant (notebooks/zh/GLOSSARY.md, column 不要写作) in the Chinese text, or a Chinese term in an
  English notebook that is not the glossary's.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import io
import re
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
BADGE = re.compile(r"\[!\[Open In Colab\]\([^)\s]*\)\]\([^)\s]*\)")
# A benchmark table quoted by scripts/quote_bench.py: generated, the same in both languages (like an output).
BENCH = re.compile(r"(<!-- bench[^>]*-->).*?(<!-- /bench -->)", re.S)
SETUP_TAG = "colab-setup"  # the setup cell, stamped by scripts/colab.py
CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
# Words that almost only English prose has; a run of text with several of them is an English sentence.
STOPWORDS = frozenset(
    "the a an of is are was to and in for it its by on with from that this we our you your not be as at which "
    "what when where each one but or if then than so there their they has have does do can only also into".split())


def en_dir(root: Path) -> Path:
    return root / "notebooks"


def zh_dir(root: Path) -> Path:
    return root / "notebooks" / "zh"


def english_notebooks(root: Path) -> list[Path]:
    return sorted(en_dir(root).glob("[0-9]*.ipynb"))


def cell_hash(cell: dict) -> str:
    """The hash a translation records: the English cell's source (the Colab badge left out), 16 hex digits."""
    source = cell["source"]
    if cell["cell_type"] == "markdown":
        source = BENCH.sub(r"\1\2", BADGE.sub("", source))
    return hashlib.sha256(f"{cell['cell_type']}\n{source}".encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------------- code, comments
def _is_directive(comment: str) -> bool:
    """A comment that is code to the tools: nbdev's `#|` directives, nbval's markers, linters' pragmas."""
    body = comment.lstrip("#").strip()
    return comment.startswith("#|") or body.startswith(("NBVAL_", "noqa", "type:", "pragma", "fmt:"))


def _split_magic(line: str) -> tuple[str, str]:
    """An IPython magic or shell line (`%pip ...  # why`) as its command and its trailing comment ("" if none): a
    `#` outside quotes after a space starts the comment."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and i and line[i - 1].isspace():
            return line[:i].rstrip(), line[i:]
    return line.rstrip(), ""


def _lines(source: str) -> tuple[str, list[str]]:
    """The source with IPython's magic and shell lines (`%pip`, `!ls`) made comments (their trailing comment kept as
    one, for tokenize), and those lines' commands."""
    kept, magics = [], []
    for line in source.split("\n"):
        if line.lstrip().startswith(("%", "!")):
            command, comment = _split_magic(line.strip())
            magics.append(command)
            kept.append(comment)
        else:
            kept.append(line)
    return "\n".join(kept), magics


def code_tokens(source: str) -> list[tuple[int, str]] | None:
    """The cell's code as tokens, comments and line breaks inside statements left out (None if it does not
    tokenize). Two cells with equal tokens differ at most in their comments and layout."""
    text, magics = _lines(source)
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text + "\n").readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    kept = [(t.type, t.string) for t in tokens
            if t.type not in (tokenize.NL, tokenize.ENDMARKER)
            and not (t.type == tokenize.COMMENT and not _is_directive(t.string))]
    return kept + [(-1, m) for m in magics]


def comments(source: str) -> list[str]:
    """The cell's comments (directives left out)."""
    text, _ = _lines(source)
    try:
        return [t.string for t in tokenize.generate_tokens(io.StringIO(text + "\n").readline)
                if t.type == tokenize.COMMENT and not _is_directive(t.string)]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return [line.split("#", 1)[1] for line in source.split("\n") if "#" in line]


# ---------------------------------------------------------------------------------------------------- English left
def _prose(markdown: str) -> str:
    """The markdown's running text: code, math, links' targets, HTML tags, italic titles and quotes removed."""
    text = BENCH.sub(" ", markdown)
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    text = re.sub(r"\$[^$\n]+\$", " ", text)
    text = re.sub(r"`[^`\n]+`", " ", text)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", " ", text)  # a link's text is mostly a title or a name
    text = re.sub(r"<[^>]+>", " ", text)
    text = re.sub(r"https?://\S+", " ", text)
    text = re.sub(r"(?<![*\w])\*(?!\*)[^*]+?\*|(?<!\w)_[^_\n]+_(?!\w)", " ", text)  # *Attention Is All You Need*
    text = re.sub(r"[\"“][^\"”\n]*[\"”]", " ", text)
    return text


def english_left(text: str, words: int = 6) -> list[str]:
    """Runs of text that read as English: at least `words` Latin words, two of them English stopwords, between
    punctuation that ends a clause in either language."""
    found = []
    for run in re.split(r"[。；：！？\n|（）()、，,;:.!?]", text):
        latin = re.findall(r"[A-Za-z][A-Za-z'-]*", run)
        if len(latin) >= words and sum(w.lower() in STOPWORDS for w in latin) >= 2 and not CJK.search(run):
            found.append(" ".join(run.split())[:80])
    return found


# ---------------------------------------------------------------------------------------------------- glossary
@dataclass(frozen=True)
class Term:
    english: str
    chinese: str
    avoid: tuple[str, ...]


def glossary(root: Path) -> list[Term]:
    """The terms of notebooks/zh/GLOSSARY.md's table: English | 中文 | 不要写作 | 说明."""
    terms = []
    path = zh_dir(root) / "GLOSSARY.md"
    for line in path.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not CJK.search(cells[1]) or cells[0] in ("English", "---"):
            continue
        avoid = tuple(a.strip() for a in re.split(r"[、,，]", cells[2]) if a.strip())
        terms.append(Term(cells[0], cells[1], avoid))
    return terms


def unknown_chinese(text: str, terms: list[Term]) -> list[str]:
    """Chinese words in an English notebook's text that are not a glossary term (longest terms matched first)."""
    text = text.replace("中文", " ")  # the language's name, as in a table's header "English | 中文"
    for chinese in sorted({t.chinese for t in terms} | {p for t in terms for p in re.split(r" ?/ ?", t.chinese)},
                          key=len, reverse=True):
        text = text.replace(chinese, " ")
    return sorted(set(re.findall(r"[\u3400-\u9fff][\u3400-\u9fff\-/]*", text)))


# ---------------------------------------------------------------------------------------------------- the check
def _outputs(cell: dict) -> list:
    return [dict(o) for o in cell.get("outputs", [])]


def _without_terms(text: str, variant: str, terms: list[Term]) -> str:
    """The text with every glossary term that contains `variant` blanked: 组查询注意力 is a variant to avoid, but
    not inside 分组查询注意力."""
    for term in terms:
        if variant in term.chinese and variant != term.chinese:
            text = text.replace(term.chinese, " ")
    return text


def _outline(markdown: str) -> tuple[list[int], list[str]]:
    """What lets a reader switch language at any section: the levels of the cell's headings, in order, and the
    exercise numbers it names in bold (**03.1 ...**)."""
    text = re.sub(r"```.*?```", " ", markdown, flags=re.S)
    return ([len(h) for h in re.findall(r"^(#{1,6}) ", text, flags=re.M)],
            re.findall(r"\*\*(?:Exercise |练习 )?(\d\d\.\d+)\b", text))


def _tables(markdown: str) -> list[str]:
    """The quoted benchmark tables, their relative links made equal (zh/ sits one folder deeper)."""
    return [re.sub(r"\((?:\.\./)+", "(", m.group(0)) for m in BENCH.finditer(markdown)]


def broken_links(markdown: str, folder: Path) -> list[str]:
    """The markdown's relative link targets (not web addresses, not in-page anchors) with no file behind them."""
    targets = re.findall(r"\]\(([^)\s]+)\)", markdown) + re.findall(r'(?:src|href)="([^"]+)"', markdown)
    return [t for t in targets
            if not re.match(r"[a-z]+:|#", t) and not (folder / t.split("#")[0].split("?")[0]).exists()]


def check_pair(name: str, en: nbformat.NotebookNode, zh: nbformat.NotebookNode, terms: list[Term],
               folder: Path) -> list[str]:
    """What is wrong with the Chinese twin `zh` of notebook `name` (in `folder`), one line per problem, naming the
    cell."""
    problems: list[str] = []
    en_ids = [c.get("id") for c in en.cells]
    zh_ids = [c.get("id") for c in zh.cells]
    if en_ids != zh_ids:
        only_en = [i for i in en_ids if i not in zh_ids]
        only_zh = [i for i in zh_ids if i not in en_ids]
        if only_en:
            problems.append(f"{name}: cells only in English (add their translations): {', '.join(only_en)}")
        if only_zh:
            problems.append(f"{name}: cells only in Chinese (remove them): {', '.join(only_zh)}")
        if not only_en and not only_zh:
            problems.append(f"{name}: the same cells in another order (put them in the English order)")
    if en.metadata.get("widgets") != zh.metadata.get("widgets"):
        problems.append(f"{name}: the saved widget state differs from the English, which the widget outputs draw "
                        "(copy it with the outputs: python scripts/zh.py outputs)")
    by_id = {c.get("id"): c for c in zh.cells}
    avoid = [(a, t) for t in terms for a in t.avoid]
    for number, e in enumerate(en.cells, 1):
        z = by_id.get(e.get("id"))
        if z is None:
            continue
        where = f"{name} cell {number} (id {e.get('id')}, {e.cell_type})"
        if z.cell_type != e.cell_type:
            problems.append(f"{where}: is {z.cell_type} in Chinese")
            continue
        recorded = z.get("metadata", {}).get("zh", {}).get("en")
        if SETUP_TAG in e.get("metadata", {}).get("tags", []):
            recorded = cell_hash(e)  # written by `make colab` in both editions (comments in Chinese): not translated
        if recorded is None:
            problems.append(f"{where}: not translated yet (no hash recorded)")
        elif recorded != cell_hash(e):
            problems.append(f"{where}: stale, the English cell changed after its translation")
        if e.cell_type == "markdown":
            chinese_text = z.source
            for run in english_left(_prose(BADGE.sub("", z.source))):
                problems.append(f"{where}: reads as English: {run!r}")
            for target in broken_links(z.source, folder):
                problems.append(f"{where}: the link {target!r} leads nowhere from notebooks/zh/")
            if _outline(e.source) != _outline(z.source):
                problems.append(f"{where}: its headings or exercise numbers differ from the English "
                                f"({_outline(e.source)} in English, {_outline(z.source)} in Chinese)")
            if _tables(e.source) != _tables(z.source):
                problems.append(f"{where}: its quoted benchmark table differs from the English: run `make quote-bench`")
        elif e.cell_type == "code":
            ours, theirs = code_tokens(e.source), code_tokens(z.source)
            if ours != theirs or (ours is None and e.source != z.source):
                problems.append(f"{where}: the code differs from the English (only comments may)")
            chinese_text = "\n".join(comments(z.source))
            for comment in comments(z.source):
                if english_left(comment, words=5):
                    problems.append(f"{where}: comment reads as English: {comment.strip()[:80]!r}")
            if _outputs(e) != _outputs(z) or e.get("execution_count") != z.get("execution_count"):
                problems.append(f"{where}: the outputs differ from the English (copy them)")
        else:
            chinese_text = z.source
            if z.source != e.source:
                problems.append(f"{where}: a raw cell differs from the English")
        for variant, term in avoid:
            if variant in _without_terms(chinese_text, variant, terms):
                problems.append(f"{where}: {variant!r} for {term.english!r}: the glossary writes {term.chinese!r}")
    return problems


def check_english(name: str, en: nbformat.NotebookNode, terms: list[Term]) -> list[str]:
    """Chinese terms in an English notebook (prose and comments) that the glossary does not have."""
    problems = []
    for number, cell in enumerate(en.cells, 1):
        text = cell.source if cell.cell_type == "markdown" else "\n".join(comments(cell.source))
        text += "\n" + "\n".join(re.findall(r'"""(.*?)"""', cell.source, flags=re.S)) * (cell.cell_type == "code")
        for word in unknown_chinese(text, terms):
            problems.append(f"{name} cell {number} (id {cell.get('id')}): the Chinese {word!r} is not a glossary "
                            "term (notebooks/zh/GLOSSARY.md)")
    return problems


def check(root: Path = ROOT, names: list[str] | None = None) -> list[str]:
    """Every problem of the Chinese edition (of notebooks `names`, default all), one line each (empty: in step)."""
    terms = glossary(root)
    problems = []
    english = {p.name: p for p in english_notebooks(root)}
    chinese = {p.name: p for p in sorted(zh_dir(root).glob("[0-9]*.ipynb"))}
    for name in sorted(english.keys() - chinese.keys() if not names else set(names) - chinese.keys()):
        problems.append(f"{name}: no Chinese twin in notebooks/zh/ (start one: python scripts/zh.py new {name})")
    for name in sorted(chinese.keys() - english.keys()):
        problems.append(f"zh/{name}: no English notebook of that name")
    for name, path in english.items():
        if names and name not in names:
            continue
        en = nbformat.read(path, as_version=4)
        problems += check_english(name, en, terms)
        if name in chinese:
            problems += check_pair(name, en, nbformat.read(chinese[name], as_version=4), terms, zh_dir(root))
    return problems


# ---------------------------------------------------------------------------------------------------- writing
def new(root: Path, name: str) -> Path:
    """notebooks/zh/NAME: a copy of the English notebook, no cell stamped (all untranslated)."""
    source, target = en_dir(root) / name, zh_dir(root) / name
    if target.exists():
        raise SystemExit(f"{target.relative_to(root)} exists already")
    nb = nbformat.read(source, as_version=4)
    for cell in nb.cells:
        cell.metadata.pop("zh", None)
    nb.metadata["language"] = "zh"
    nbformat.write(nb, target)
    return target


def stamp(root: Path, name: str, ids: list[str]) -> list[str]:
    """Record the English hash on the Chinese cells `ids` (default: every cell never stamped that has no problem).
    Returns what was refused, with the reason."""
    en = nbformat.read(en_dir(root) / name, as_version=4)
    path = zh_dir(root) / name
    zh = nbformat.read(path, as_version=4)
    terms, english = glossary(root), {c.get("id"): c for c in en.cells}
    refused = []
    for z in zh.cells:
        if ids and z.get("id") not in ids:
            continue
        if not ids and z.get("metadata", {}).get("zh", {}).get("en"):
            continue  # stamped before: a stale cell is stamped again only by its id, once its translation is updated
        e = english.get(z.get("id"))
        if e is None:
            refused.append(f"{z.get('id')}: no English cell with this id")
            continue
        trial = copy.deepcopy(zh)
        trial.cells = [copy.deepcopy(z)]
        trial.cells[0].metadata["zh"] = {"en": cell_hash(e)}
        mini_en = copy.deepcopy(en)
        mini_en.cells = [e]
        issues = check_pair(name, mini_en, trial, terms, zh_dir(root))
        if issues:
            refused += issues
        else:
            z.metadata["zh"] = {"en": cell_hash(e)}
    nbformat.write(zh, path)
    return refused


def copy_outputs(root: Path, name: str) -> int:
    """Copy the English outputs and execution counts onto the Chinese code cells whose code is the English code
    (after the English notebook was re-executed), and the English widget state, which the copied widget outputs name
    by id; returns how many cells changed (the widget state counted as one)."""
    english = nbformat.read(en_dir(root) / name, as_version=4)
    en = {c.get("id"): c for c in english.cells}
    path = zh_dir(root) / name
    zh, changed = nbformat.read(path, as_version=4), 0
    if english.metadata.get("widgets") != zh.metadata.get("widgets"):
        if "widgets" in english.metadata:
            zh.metadata["widgets"] = copy.deepcopy(english.metadata["widgets"])
        else:
            zh.metadata.pop("widgets", None)
        changed += 1
    for z in zh.cells:
        e = en.get(z.get("id"))
        same_code = e is not None and e.cell_type == "code" and code_tokens(e.source) == code_tokens(z.source)
        if z.cell_type == "code" and same_code:
            if _outputs(e) != _outputs(z) or e.get("execution_count") != z.get("execution_count"):
                z.outputs, z.execution_count, changed = copy.deepcopy(e.outputs), e.get("execution_count"), changed + 1
    nbformat.write(zh, path)
    return changed


def status(root: Path = ROOT) -> list[str]:
    lines = []
    for path in english_notebooks(root):
        twin = zh_dir(root) / path.name
        if not twin.exists():
            lines.append(f"{path.name}: no Chinese twin")
            continue
        en, zh = nbformat.read(path, as_version=4), nbformat.read(twin, as_version=4)
        hashes = {c.get("id"): cell_hash(c) for c in en.cells}
        pairs = [(c.get("metadata", {}).get("zh", {}).get("en"), hashes.get(c.get("id"))) for c in zh.cells]
        done = sum(r is not None and r == h for r, h in pairs)
        stale = sum(r is not None and r != h for r, h in pairs)
        lines.append(f"{path.name}: {done}/{len(en.cells)} cells translated, {stale} stale, "
                     f"{len(zh.cells) - done - stale} not translated")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs="?", default="check", choices=["check", "status", "new", "stamp", "outputs"])
    parser.add_argument("args", nargs="*")
    options = parser.parse_args()
    if options.command == "status":
        print("\n".join(status()))
        return 0
    if options.command == "new":
        for name in options.args:
            print(f"wrote {new(ROOT, name).relative_to(ROOT)}")
        return 0
    if options.command == "stamp":
        refused = stamp(ROOT, options.args[0], options.args[1:])
        print("\n".join(refused) or "every cell stamped")
        return 1 if refused else 0
    if options.command == "outputs":
        for name in options.args or [p.name for p in english_notebooks(ROOT)]:
            print(f"{name}: {copy_outputs(ROOT, name)} cell(s) given the English outputs")
        return 0
    problems = check(names=options.args or None)
    for line in problems:
        print(line)
    if problems:
        print(f"\n{len(problems)} problem(s): the Chinese edition is not in step with the English", file=sys.stderr)
        return 1
    print("the Chinese edition is in step with the English: every cell translated, code and outputs equal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
