"""``dlscale explain`` fits the terminal (issue 71): every line within $COLUMNS, wrapped at
words, and a column never said to be both always shown and left out."""

import pytest

from dlscale.cli import main
from dlscale.report.columns import COLUMNS


@pytest.mark.parametrize("width", [80, 100])
def test_every_explanation_fits_the_width(capsys, monkeypatch, width: int):
    monkeypatch.setenv("COLUMNS", str(width))
    assert main(["explain"]) == 0
    for column in COLUMNS:
        assert main(["explain", column.name]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in printed) <= width
    assert len(printed) > 2 * len(COLUMNS)


def test_a_column_a_narrow_terminal_drops_is_not_called_always_shown(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["explain", "speedup"]) == 0
    text = " ".join(line.strip() for line in capsys.readouterr().out.splitlines())
    assert "always shown" not in text
    assert "in the terminal table: shown where it fits: a terminal too narrow leaves it out" in text
