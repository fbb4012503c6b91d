"""The docs stay a manual a reader can follow (tests/docs_check.py holds the checks): every
relative link and ``#anchor`` leads somewhere, every mention of a doc and of its heading in the
code, tests, scripts and docs is one that exists, every test cited as evidence is there (its
file, and its name where one is given), no line of prose runs past 200 characters,
README.md stays at most 250 lines, and a long file of docs/ opens with a table of contents.

Each check reports every problem of its kind at once, one line each (``FILE:LINE: what``). The
second half breaks each of them in a small tree of its own and shows that it is reported (and
that what only looks like a link, in code, is not)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs_check import (
    ROOT,
    citation_problems,
    headings,
    link_problems,
    long_line_problems,
    mention_problems,
    mention_sources,
    slug,
    toc_problems,
)

README_LINES = 250


def markdown(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def _listed(problems: list[str]) -> str:
    return f"{len(problems)} found:\n" + "\n".join(problems)


def test_every_relative_link_leads_to_a_file_and_its_anchor_to_a_heading():
    problems = link_problems(markdown())
    assert not problems, _listed(problems)


def test_every_mention_of_a_doc_names_a_file_and_the_start_of_a_heading():
    problems = mention_problems(mention_sources())
    assert not problems, _listed(problems)


def test_no_line_runs_over_200_characters_outside_tables_and_code():
    problems = long_line_problems(markdown())
    assert not problems, _listed(problems)


def test_the_readme_is_at_most_250_lines():
    lines = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert lines <= README_LINES, f"README.md:{lines}: {lines} lines, over {README_LINES}"


def test_a_long_file_of_docs_opens_with_a_table_of_contents():
    problems = toc_problems(markdown()[1:])
    assert not problems, _listed(problems)


def test_every_test_the_docs_cite_as_evidence_exists():
    problems = citation_problems(markdown())
    assert not problems, _listed(problems)


def test_the_sources_of_mentions_are_found():
    found = {str(p.relative_to(ROOT)) for p in mention_sources()}
    assert {"README.md", "Makefile", "pyproject.toml", "scripts/run-tests.sh"} <= found
    assert "src/dlscale/cli/__init__.py" in found and "tests/conftest.py" in found
    assert "tests/docs_check.py" not in found  # its examples name files that are not there


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Noise guard", "noise-guard"),
        ("Horovod: the messages it fused", "horovod-the-messages-it-fused"),
        ("`dlscale run --script`: your own script", "dlscale-run---script-your-own-script"),
        ("Across an emulated 100 Mbit/s link", "across-an-emulated-100-mbits-link"),
        ("Über café_time (±3%)", "über-café_time-3"),
    ],
)
def test_a_headings_anchor_is_githubs(heading: str, anchor: str):
    assert slug(heading) == anchor
    (found,) = headings(f"## {heading}\n")
    assert found.anchor == anchor


def test_a_repeated_heading_gets_a_numbered_anchor():
    text = "# Notes\n\n## Limits\n\n## Limits\n\nLimits\n------\n"
    assert [h.anchor for h in headings(text)] == ["notes", "limits", "limits-1", "limits-2"]
    assert [h.line for h in headings(text)] == [1, 3, 5, 7]


# --- each check, broken on purpose --------------------------------------------------------

GUIDE_TOP = """# Guide

What the guide is for.

- [Start](#start)
- [Limits](#limits)

## Start

Read [the other doc](other.md#setting-up) and [its missing part](other.md#tear-down),
[a file that is not there](gone.md), [a heading here](#start), [one not here](#nowhere),
[the README](../README.md), [external](https://example.com/x.md#y) and ![a picture](pic.png).

```bash
see [not a link](nowhere.md) and a line of code that runs on {long}
```

`[inline code](nowhere.md)` is no link either.

| a table | whose row runs on |
|---|---|
| {long} | x |

A sentence that runs on {long}
## Limits

## Left out of the contents
"""


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A repository of its own: README.md, docs/guide.md (over 200 lines, one ## heading not
    in its contents), docs/other.md, and a module, each with good and broken references."""
    docs = tmp_path / "docs"
    docs.mkdir()
    guide = GUIDE_TOP.format(long="x" * 200) + "\ntext\n" * 100
    (docs / "guide.md").write_text(guide)
    (docs / "other.md").write_text("# Other\n\n## Setting up\n\nSee docs/guide.md#start.\n")
    (tmp_path / "README.md").write_text(
        "# Tool\n\n[guide](docs/guide.md#limits), [bad](docs/guide.md#limit).\n\n"
        'As docs/guide.md, "Start" says; not docs/guide.md, "Stop", nor\n'
        'README, "Tool kit", nor docs/gone.md; docs/other.md#tear-down is not there.\n'
    )
    module = tmp_path / "src" / "dlscale" / "module.py"
    module.parent.mkdir(parents=True)
    module.write_text(
        '"""A module (docs/guide.md, "Left out of\n'
        'the contents")."""\n\n'
        "# wrapped in comments: docs/other.md,\n"
        '# "Setting up" holds; docs/guide.md,\n'
        '# "Limits of it" does not\n'
        'WHY = ("see docs/guide.md, " + "\\"Lim" "its\\"" f" and docs/other.md, \'Tear\'")\n'
    )
    return tmp_path


def test_a_broken_link_or_anchor_is_reported_and_code_is_not_read(tree: Path):
    problems = link_problems(markdown(tree), tree)
    assert problems == [
        "README.md:3: link (docs/guide.md#limit): no heading #limit in docs/guide.md",
        "docs/guide.md:10: link (other.md#tear-down): no heading #tear-down in docs/other.md",
        "docs/guide.md:11: link (gone.md): no file docs/gone.md",
        "docs/guide.md:11: link (#nowhere): no heading #nowhere in docs/guide.md",
        "docs/guide.md:12: link (pic.png): no file docs/pic.png",
    ]


def test_a_broken_mention_is_reported_on_one_line_or_wrapped(tree: Path):
    sources = mention_sources(tree)
    assert [str(p.relative_to(tree)) for p in sources] == [
        "README.md",
        "docs/guide.md",
        "docs/other.md",
        "src/dlscale/module.py",
    ]
    assert mention_problems(sources, tree) == [
        "README.md:3: docs/guide.md#limit: no such heading",
        'README.md:5: docs/guide.md, "Stop": no heading starts so',
        "README.md:6: docs/gone.md: no such file",
        "README.md:6: docs/other.md#tear-down: no such heading",
        'README.md:6: README, "Tool kit": no heading starts so',
        'src/dlscale/module.py:5: docs/guide.md, "Limits of it": no heading starts so',
        "src/dlscale/module.py:7: docs/other.md, 'Tear': no heading starts so",
    ]


def test_a_long_line_of_prose_is_reported_and_one_in_a_table_or_code_is_not(tree: Path):
    assert long_line_problems(markdown(tree), tree) == [
        "docs/guide.md:24: 224 characters, over 200 outside tables and code blocks"
    ]


def test_a_heading_missing_from_the_contents_is_reported(tree: Path):
    assert toc_problems(markdown(tree)[1:], tree) == [
        "docs/guide.md:27: '## Left out of the contents' (#left-out-of-the-contents) is not in "
        "the table of contents (line 5)"
    ]
    guide = tree / "docs" / "guide.md"
    guide.write_text("\n" * 40 + guide.read_text())  # the list now starts on line 45
    assert toc_problems([guide], tree) == [
        "docs/guide.md:1: 267 lines and no table of contents (a list of links to its ## "
        "headings) starting in its first 40 lines"
    ]


def test_a_cited_test_that_is_gone_or_renamed_is_reported(tree: Path):
    (tree / "tests").mkdir()
    (tree / "tests" / "test_x.py").write_text("def test_kept():\n    pass\n")
    (tree / "docs" / "other.md").write_text(
        "# Other\n\nProven by `tests/test_x.py::test_kept`, `tests/test_x.py` and\n"
        "`tests/test_x.py::test_renamed`; | tests/test_gone.py | in a table |\n"
    )
    assert citation_problems([tree / "docs" / "other.md"], tree) == [
        "docs/other.md:4: tests/test_x.py::test_renamed: no test test_renamed in tests/test_x.py",
        "docs/other.md:4: tests/test_gone.py: no such file",
    ]
