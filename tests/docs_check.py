"""Checks that keep the docs honest (tests/unit/test_docs.py; the README's commands:
tests/e2e/test_readme_commands.py).

Markdown is parsed with markdown-it-py (CommonMark and tables), so fenced code, inline code and
prose are told apart. Nothing is fetched: http(s) and other absolute links are left alone.
Every check returns its problems, one line each (``FILE:LINE: what is broken``), all at once.

Mentions of a heading (``docs/NAME.md, "Heading"``, ``README, "Heading"``, single quotes too)
are read from Python files as Python reads them: the comments of consecutive lines joined, and
strings joined as Python concatenates them (docstrings, ``"a" "b"``, ``"a" + "b"``); from other
files with their lines joined and ``#`` comment markers dropped. Whitespace, line breaks among
it, counts as one space. Not checked: a heading named without quotes (as in "docs/metrics.md,
TensorFlow"), a mention split by code or by anything but whitespace and comment markers, the
parts of an f-string computed at run time, and the files of tests/ that are not Python.
"""

from __future__ import annotations

import ast
import functools
import io
import itertools
import re
import tokenize
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

from markdown_it import MarkdownIt
from markdown_it.token import Token

ROOT = Path(__file__).resolve().parents[1]
LONGEST_LINE = 200
"""Characters a line of Markdown may hold outside tables and code blocks."""
TOC_OVER = 200
"""A file of docs/ longer than this many lines opens with a table of contents ..."""
TOC_WITHIN = 40
"""... which starts within its first this many lines."""
CHECKER = ("tests/docs_check.py", "tests/unit/test_docs.py")
"""Left out of the mentions: they hold broken mentions on purpose, to show they are caught."""

_MD = MarkdownIt("commonmark").enable("table")
_EXTERNAL = re.compile(r"^([a-z][a-z0-9+.-]*:|//)", re.I)
_DOC = r"(?<![\w./-])(?:\.\./)*(docs/[\w./-]*?\.md|README\.md)(?![\w-])"
ANCHORED = re.compile(_DOC + r"#([\w-]+)")
QUOTED = re.compile(
    r"(?<![\w./-])(?:\.\./)*(docs/[\w./-]*?\.md|README(?:\.md)?),\s*\\?([\"'])(.+?)\\?\2"
)
BARE = re.compile(_DOC.replace("|README\\.md", ""))


@dataclass(frozen=True)
class Heading:
    line: int
    level: int
    text: str
    """As rendered: inline code without its backticks, a link's text without the link."""
    source: str
    """As written."""
    anchor: str


def slug(text: str) -> str:
    """GitHub's anchor of a heading: lowercase; every character not a letter, digit, space,
    hyphen or underscore removed; spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def tokens(text: str) -> list[Token]:
    return _MD.parse(text)


def headings(text: str) -> list[Heading]:
    found: list[Heading] = []
    seen: dict[str, int] = {}
    parsed = tokens(text)
    for opening, inline in itertools.pairwise(parsed):
        if opening.type != "heading_open" or opening.map is None:
            continue
        shown = "".join(c.content for c in inline.children or [] if c.type in _SHOWN)
        base = slug(shown)
        count = seen.get(base, 0)
        seen[base] = count + 1
        anchor = f"{base}-{count}" if count else base
        level = int(opening.tag[1])
        found.append(Heading(opening.map[0] + 1, level, shown, inline.content, anchor))
    return found


_SHOWN = ("text", "code_inline", "softbreak")


def rel(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


class _Files:
    """Each Markdown file's headings, read once a check."""

    def __init__(self) -> None:
        self._headings: dict[Path, list[Heading]] = {}

    def headings(self, path: Path) -> list[Heading]:
        path = path.resolve()
        if path not in self._headings:
            self._headings[path] = headings(path.read_text(encoding="utf-8"))
        return self._headings[path]

    def anchors(self, path: Path) -> set[str]:
        return {h.anchor for h in self.headings(path)}


def _line_of(lines: list[str], span: list[int] | None, needle: str) -> int:
    if span is None:
        return 1
    for number in range(span[0], min(span[1], len(lines))):
        if needle in lines[number]:
            return number + 1
    return span[0] + 1


def _links(parsed: list[Token]) -> Iterator[tuple[Token, str]]:
    for block in parsed:
        for child in block.children or []:
            href = child.attrs.get("href" if child.type == "link_open" else "src")
            if child.type in ("link_open", "image") and isinstance(href, str):
                yield block, href


def link_problems(files: Iterable[Path], root: Path = ROOT) -> list[str]:
    """Every relative link and image of ``files`` names an existing file, and its ``#anchor``
    a heading of that file (or of the file itself, for ``#anchor`` alone)."""
    known = _Files()
    problems = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        for block, href in _links(tokens(text)):
            if _EXTERNAL.match(href):
                continue
            target, _, anchor = href.partition("#")
            target, anchor = unquote(target.partition("?")[0]), unquote(anchor)
            where = f"{rel(path, root)}:{_line_of(lines, block.map, href)}: link ({href})"
            file = (path.parent / target) if target else path
            if not file.exists():
                problems.append(f"{where}: no file {rel(file, root)}")
            elif anchor and file.suffix == ".md" and anchor not in known.anchors(file):
                problems.append(f"{where}: no heading #{anchor} in {rel(file, root)}")
    return problems


@dataclass
class Passage:
    """Text as a reader reads it: pieces of a file, whitespace collapsed, each character's
    line kept (worked out only for a passage that may mention the docs)."""

    pieces: list[tuple[str, int]] = field(default_factory=list)

    def add(self, text: str, line: int) -> None:
        self.pieces.append((text, line))

    def mentions(self) -> bool:
        return any("docs/" in text or "README" in text for text, _ in self.pieces)

    @functools.cached_property
    def read(self) -> tuple[str, list[int]]:
        chars: list[str] = []
        lines: list[int] = []
        for text, first in self.pieces:
            line = first
            for char in text:
                if not char.isspace():
                    chars.append(char)
                    lines.append(line)
                elif chars and chars[-1] != " ":
                    chars.append(" ")
                    lines.append(line)
                line += char == "\n"
        return "".join(chars), lines


def _python_passages(text: str) -> Iterator[Passage]:
    """Comments of consecutive lines, one passage; strings Python concatenates, one passage."""
    comment, string = Passage(), Passage()
    last_comment = -1
    try:
        found = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        yield from _plain_passages(text)
        return
    for token in found:
        row = token.start[0]
        if token.type == tokenize.COMMENT:
            if row != last_comment + 1:
                yield comment
                comment = Passage()
            comment.add(token.string.lstrip("#") + "\n", row)
            last_comment = row
        elif token.type == tokenize.STRING:
            string.add(_literal(token.string), row)
        elif token.type in _FSTRING:  # Python 3.12 and later: an f-string's parts
            if token.type == _FSTRING[1]:
                string.add(_unescaped(token.string), row)
        elif token.type != tokenize.NL and token.string != "+" and string.pieces:
            yield string
            string = Passage()
    yield comment
    yield string


_FSTRING = tuple(getattr(tokenize, f"FSTRING_{part}", -1) for part in ("START", "MIDDLE", "END"))


def _unescaped(text: str) -> str:
    return text.replace('\\"', '"').replace("\\'", "'")


def _literal(source: str) -> str:
    try:
        value = ast.literal_eval(source)
    except (ValueError, SyntaxError):  # an f-string: its text as written
        inner = re.fullmatch(r"[a-zA-Z]*(\"\"\"|'''|\"|')(.*)\1", source, re.S)
        return _unescaped(inner[2] if inner else source)
    return value if isinstance(value, str) else ""


def _plain_passages(text: str) -> Iterator[Passage]:
    """The whole file, its lines joined, ``#`` and ``>`` markers at their starts dropped."""
    passage = Passage()
    for number, line in enumerate(text.splitlines(), 1):
        passage.add(re.sub(r"^\s*[#>]*", "", line) + "\n", number)
    yield passage


def passages(path: Path) -> Iterator[Passage]:
    text = path.read_text(encoding="utf-8", errors="replace")
    if "docs/" not in text and "README" not in text:
        return
    if path.suffix == ".py":
        yield from (p for p in _python_passages(text) if p.mentions())
    else:
        yield from _plain_passages(text)


def mention_sources(root: Path = ROOT) -> list[Path]:
    """The files whose mentions of the docs are checked."""
    found = [root / "README.md", root / "pyproject.toml", root / "Makefile"]
    found += root.glob("constraints*.txt")
    for pattern in ("docs/**/*.md", "src/dlscale/**/*.py", "src/dlscale/presets/*.toml",
                    "tests/**/*.py", "benchmarks/**/*", "scripts/**/*"):  # fmt: skip
        found += root.glob(pattern)
    return sorted(
        {p for p in found if p.is_file() and "__pycache__" not in p.parts}
        - {root / name for name in CHECKER}
    )


def mention_problems(files: Iterable[Path], root: Path = ROOT) -> list[str]:
    """Each ``docs/NAME.md`` named exists; each ``docs/NAME.md#anchor`` is a heading's anchor;
    each ``docs/NAME.md, "Heading"`` (``README, "Heading"``) quotes the start of a heading."""
    known = _Files()
    problems = []
    for path in files:
        found: list[tuple[int, str]] = []
        for passage in passages(path):
            text, lines = passage.read
            for match in BARE.finditer(text):
                if not (root / match[1]).is_file():
                    found.append((lines[match.start()], f"{match[1]}: no such file"))
            for match in ANCHORED.finditer(text):
                doc = root / match[1]
                if doc.is_file() and match[2] not in known.anchors(doc):
                    found.append((lines[match.start()], f"{match[0]}: no such heading"))
            for match in QUOTED.finditer(text):
                doc = root / ("README.md" if match[1].startswith("README") else match[1])
                said = match[3]
                if doc.is_file() and not any(
                    h.text.startswith(said) or h.source.startswith(said)
                    for h in known.headings(doc)
                ):
                    quoted = f"{match[1]}, {match[2]}{said}{match[2]}"
                    found.append((lines[match.start()], f"{quoted}: no heading starts so"))
        name = rel(path, root)
        problems += [f"{name}:{line}: {what}" for line, what in sorted(found, key=lambda f: f[0])]
    return problems


def _excluded_lines(parsed: list[Token]) -> set[int]:
    """The lines (1-based) of fenced and indented code blocks and of tables."""
    lines: set[int] = set()
    for token in parsed:
        if token.map and token.type in ("fence", "code_block", "table_open"):
            lines.update(range(token.map[0] + 1, token.map[1] + 1))
    return lines


def long_line_problems(files: Iterable[Path], root: Path = ROOT) -> list[str]:
    problems = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        excluded = _excluded_lines(tokens(text))
        for number, line in enumerate(text.splitlines(), 1):
            if len(line) > LONGEST_LINE and number not in excluded:
                problems.append(
                    f"{rel(path, root)}:{number}: {len(line)} characters, over {LONGEST_LINE} "
                    "outside tables and code blocks"
                )
    return problems


def toc_problems(files: Iterable[Path], root: Path = ROOT) -> list[str]:
    """A file over TOC_OVER lines opens with a list of links to its own ``##`` headings that
    starts within its first TOC_WITHIN lines and names every one of them."""
    problems = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        if len(text.splitlines()) <= TOC_OVER:
            continue
        toc = _toc(tokens(text))
        name = rel(path, root)
        if toc is None:
            problems.append(
                f"{name}:1: {len(text.splitlines())} lines and no table of contents (a list "
                f"of links to its ## headings) starting in its first {TOC_WITHIN} lines"
            )
            continue
        line, anchors = toc
        problems += [  # a heading above the list (its title: "## Contents") is not in it
            f"{name}:{h.line}: '## {h.text}' (#{h.anchor}) is not in the table of contents "
            f"(line {line})"
            for h in headings(text)
            if h.level == 2 and h.line > line and h.anchor not in anchors
        ]
    return problems


def _toc(parsed: list[Token]) -> tuple[int, set[str]] | None:
    """The first bullet list opening within TOC_WITHIN lines that links into its own file:
    its first line and the anchors it links to (nested lists included)."""
    for token in parsed:
        if token.type != "bullet_list_open" or token.map is None or token.level != 0:
            continue
        if token.map[0] >= TOC_WITHIN:
            return None
        start, end = token.map
        inside = [t for t in parsed if t.map and start <= t.map[0] < end and t.type == "inline"]
        anchors = {href[1:] for _, href in _links(inside) if href.startswith("#")}
        if anchors:
            return start + 1, {unquote(a) for a in anchors}
    return None


CITED_TEST = re.compile(r"(?<![\w./-])(tests/[\w/.-]+?\.py)(?:::(\w+))?")
"""A test the docs cite as evidence: ``tests/unit/test_x.py`` or ``...py::test_name``."""


def citation_problems(files: Iterable[Path], root: Path = ROOT) -> list[str]:
    """Every test file the docs cite exists, and a cited ``::name`` is defined in it (a
    function or class of that name), in prose, tables and code alike."""
    problems = []
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in CITED_TEST.finditer(line):
                cited, name = root / match[1], match[2]
                where = f"{rel(path, root)}:{number}: {match[0]}"
                if not cited.is_file():
                    problems.append(f"{where}: no such file")
                elif name and not re.search(
                    rf"^\s*(?:async\s+)?(?:def|class)\s+{name}\b",
                    cited.read_text(encoding="utf-8"),
                    re.M,
                ):
                    problems.append(f"{where}: no test {name} in {match[1]}")
    return problems
