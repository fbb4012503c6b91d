"""The README and the manual cannot drift from the command line: every ``dlscale`` command of
the shell code blocks of README.md and docs/ (read as a shell reads them: ``shell_commands``)
runs here, one test each, named by the command, in-process (``dlscale.cli.main``) from an empty
folder, with HOME another.

``dlscale run`` gets ``--dry-run`` (its whole plan is built, nothing trains); ``ls``,
``explain``, ``env``, ``--help`` and ``--keys`` run as they are; ``report``, ``compare``,
``predict`` and ``ls runs`` read a copy of the committed store tests/data/results wherever they
look for one (./dlscale-results, ``--results DIR``, the directories compare takes); ``doctor``,
``microbench`` and ``hosts`` run with ``--dry-run`` where they have one (``microbench --peak``
as it is: a matrix multiply of about a second, kept under that HOME). Each must exit 0 (or
the status the README's comment on it gives: ``# exits 1``) with no traceback.

A command that cannot run here by its nature (``NOT_RUN``: a GPU, a Slurm cluster, the
reader's own files, a long measurement) is skipped, saying why, once its flags are shown to
parse; one whose engine is not installed here (MXNet's environment, torchvision) is skipped
with dlscale's own line saying so. Other commands (``make``, ``pip``, ``git``) are not run; a
``make`` target the README names must exist in the Makefile."""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dlscale.cli import build_parser, main
from tests.docs_check import ROOT, tokens

pytestmark = pytest.mark.e2e  # dry runs only, no worker started: in make check

README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").rglob("*.md"))]
FIXTURE = ROOT / "tests" / "data" / "results"

NOT_RUN = [
    (r"--device cuda", "needs a CUDA GPU"),
    (r"^(?!.*cpus_per_node).*(slurm|partition=)", "plans for a Slurm cluster's nodes (sinfo)"),
    (r"(^| )\.\.\.( |$)", "'...' stands for the reader's own flags"),
    (r"(^| |=)[A-Z][A-Z_]{2,}( |$)", "an upper-case word stands for the reader's own value"),
    (r"--script ", "runs the reader's own training script"),
    (r"--model (?!(torchvision|timm):)\S+:", "imports the reader's own model module"),
    (r"^dlscale run \S+\.toml", "reads the reader's own study file"),
    (r"--set '?(hosts|hostfile)=", "places the ranks on the reader's hosts (ssh, their names)"),
    (r"--set '?ray_address=\S", "plans from the reader's Ray cluster (ray.nodes())"),
    (r"^dlscale predict (?!.*--compute-ms).*--model ", "measures the model's compute first"),
]
"""(pattern searched in the command, why it is not run here)."""

NO_DRY_RUN = ("doctor", "microbench", "hosts")
"""Commands run only with their ``--dry-run`` (they check nodes or start workers)."""
STORES = ("results", "directory", "baseline", "candidate", "validate")
"""The arguments that name a results directory to read."""
NOT_INSTALLED = re.compile(
    r"dlscale: error: .*(runs in its own environment, and \S+ is not there"
    r"|needs [\w., -]+, which \S+ cannot import|needs \S+, which is not installed)"
)
"""dlscale's line for an engine or library this machine lacks (make test installs them)."""
EXIT = re.compile(r"\bexits? (?:with )?(?:status |code )?(\d+)\b")


@dataclass(frozen=True)
class ShellCommand:
    line: int
    words: tuple[str, ...]
    comment: str
    """What follows its ``#``: a note for the reader (it may say the exit status)."""
    file: str = "README.md"
    """The doc it is in, from the repository's root."""


SHELLS = ("", "bash", "sh", "console", "shell")
"""The info strings of the fenced blocks whose lines are shell commands."""
_OPERATORS = ("&&", "||", ";", "|")


def shell_commands(text: str, file: str = "README.md") -> list[ShellCommand]:
    """The commands of the shell code blocks (``SHELLS``): lines continued with a trailing
    backslash joined, a ``$`` prompt dropped, a ``#`` comment kept apart, the lines of a
    here-document skipped, commands joined by ``&&``, ``||``, ``;`` or ``|`` (as words of
    their own) split. A line the shell cannot split (an output shown) is left out."""
    found = []
    for block in tokens(text):
        info = block.info.strip().split(" ")[0] if block.type == "fence" else None
        if info not in SHELLS or block.map is None:
            continue
        lines = block.content.splitlines()
        number, heredoc = 0, None
        while number < len(lines):
            first, line = number, lines[number]
            while line.endswith("\\") and number + 1 < len(lines):
                number += 1
                line = line[:-1] + " " + lines[number].strip()
            number += 1
            if heredoc is not None:
                heredoc = None if line.strip() == heredoc else heredoc
                continue
            code, comment = _comment(line.strip().removeprefix("$ "))
            try:
                words = shlex.split(code)
            except ValueError:
                continue
            if start := re.search(r"<<-?\s*['\"]?(\w+)", code):
                heredoc = start[1]
            for command in _split(words):
                found.append(ShellCommand(block.map[0] + 2 + first, command, comment, file))
    return found


def _comment(line: str) -> tuple[str, str]:
    """The line's code and its comment: the first ``#`` that starts a word, out of quotes."""
    quote = None
    for at, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (at == 0 or line[at - 1].isspace()):
            return line[:at], line[at + 1 :].strip()
    return line, ""


def _split(words: list[str]) -> Iterator[tuple[str, ...]]:
    """Each command of a line, its redirections (``> FILE``, ``2>&1``, ``<<EOF``) left out."""
    command: list[str] = []
    target = False
    for word in [*words, ";"]:
        if word in _OPERATORS:
            if command:
                yield tuple(command)
            command = []
        elif re.match(r"\d*[<>]", word) or target:
            target = not target and bool(re.fullmatch(r"\d*(>>?|<<?-?)", word))
        else:
            command.append(word)


def make_targets(makefile: Path) -> set[str]:
    """The targets a Makefile defines (rules and .PHONY's list)."""
    text = makefile.read_text(encoding="utf-8").replace("\\\n", " ")
    targets: set[str] = set()
    for line in text.splitlines():
        if rule := re.match(r"^([^\s:#=][^:=]*?)\s*::?(?!=)", line):
            targets.update(rule[1].split())
        if line.startswith(".PHONY:"):
            targets.update(line.split(":", 1)[1].split())
    return targets


def _expanded(command: ShellCommand) -> list[ShellCommand]:
    """Usage notation made commands: ``[NAME]`` left out, ``a|b`` one command each."""
    words = [w for w in command.words if not re.fullmatch(r"\[[A-Z][A-Z_.]*\]", w)]
    for at, word in enumerate(words):
        if re.fullmatch(r"[\w-]+(\|[\w-]+)+", word):
            return [
                ShellCommand(
                    command.line,
                    (*words[:at], one, *words[at + 1 :]),
                    command.comment,
                    command.file,
                )
                for one in word.split("|")
            ]
    return [ShellCommand(command.line, tuple(words), command.comment, command.file)]


def readme_commands() -> tuple[list[ShellCommand], list[ShellCommand]]:
    """The dlscale commands of the README and docs/ (each once, in order) and their make
    commands."""
    found = [
        command
        for doc in DOCS
        for command in shell_commands(doc.read_text(encoding="utf-8"), str(doc.relative_to(ROOT)))
    ]
    dlscale: dict[tuple[str, ...], ShellCommand] = {}
    for command in found:
        if Path(command.words[0]).name == "dlscale":
            for one in _expanded(command):
                dlscale.setdefault(("dlscale", *one.words[1:]), one)
    make: dict[tuple[str, ...], ShellCommand] = {}
    for command in found:
        if command.words[0] == "make":
            make.setdefault(command.words, command)
    return list(dlscale.values()), list(make.values())


DLSCALE, MAKE = readme_commands()


def _id(command: ShellCommand) -> str:
    return shlex.join(["dlscale", *command.words[1:]])


def _subparser(name: str) -> argparse.ArgumentParser | None:
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices.get(name)
    return None


def planned(command: ShellCommand, home: Path) -> tuple[list[str], str | None]:
    """The arguments the test gives ``main`` (``~`` is HOME, as a shell has it), and why the
    command is not run (None: it is)."""
    words = [str(home) + w[1:] if w == "~" or w.startswith("~/") else w for w in command.words]
    argv = words[1:]
    text = shlex.join(["dlscale", *argv])
    why = next((reason for pattern, reason in NOT_RUN if re.search(pattern, text)), None)
    name = argv[0] if argv else ""
    asks = {"--dry-run", "--keys", "--help", "-h"} & set(argv)
    peak = name == "microbench" and "--peak" in argv  # measures a matmul here: runs as is
    if name == "run" or (name in NO_DRY_RUN and not asks and not peak):
        sub = _subparser(name)
        if sub is not None and "--dry-run" not in sub._option_string_actions:
            why = why or f"dlscale {name} has no --dry-run: it checks nodes or starts workers"
        elif not asks:
            cut = argv.index("--") if "--" in argv else len(argv)
            argv = [*argv[:cut], "--dry-run", *argv[cut:]]
    return argv, why


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str | None:
    """What dlscale's parser says of the command line (the words before ``--``, ``...`` left
    out), as ``main`` parses it; None where it takes it."""
    words = [w for w in argv[: argv.index("--") if "--" in argv else len(argv)] if w != "..."]
    try:
        build_parser().parse_args(words)
    except SystemExit as exit_:
        if exit_.code:
            return capsys.readouterr().err.strip()
    return None


def _stores(argv: list[str], where: Path) -> None:
    """A copy of the fixture store wherever the command reads one."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit:
        return
    named = [getattr(args, key, None) for key in STORES]
    for path in {"dlscale-results", *(str(p) for p in named if p is not None)}:
        if not Path(path).is_absolute() and not (where / path).exists():
            shutil.copytree(FIXTURE, where / path)


@dataclass(frozen=True)
class Outcome:
    failed: str | None = None
    """What went wrong, naming the README's line."""
    skipped: str | None = None
    """Why the command was not run here."""


def outcome(
    command: ShellCommand, home: Path, work: Path, capsys: pytest.CaptureFixture[str]
) -> Outcome:
    """Run one README command in ``work`` (the current directory) as the module says."""
    argv, why = planned(command, home)
    where = f"{command.file}:{command.line}: dlscale {shlex.join(argv)}"
    if refused := _refused(argv, capsys):
        return Outcome(failed=f"{where}: dlscale's parser refuses it: {refused}")
    if why:
        return Outcome(skipped=f"{command.file} command not run here: {why}; its flags parse")
    if argv[:1] != ["run"]:
        _stores(argv, work)
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own exit: --help
        code = exit_.code
    out, err = capsys.readouterr()
    if code and (gap := NOT_INSTALLED.search(err)):
        return Outcome(skipped=f"{command.file} command not run here, not installed: {gap[0]}")
    expected = int(said[1]) if (said := EXIT.search(command.comment)) else 0
    if code != expected or "Traceback" in out + err:
        return Outcome(
            failed=f"{where}: exit {code} (expected {expected})\n{out[-3000:]}\n{err[-3000:]}"
        )
    return Outcome()


@pytest.fixture
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """HOME and the working directory: empty folders of the test's own."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)  # dlscale's cache: under HOME
    monkeypatch.delenv("DLSCALE_CACHE_DIR", raising=False)
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.chdir(work)
    return home, work


@pytest.mark.parametrize("command", DLSCALE, ids=_id)
def test_a_readme_command_runs(
    command: ShellCommand, place: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
):
    result = outcome(command, *place, capsys)
    if result.skipped:
        pytest.skip(result.skipped)
    if result.failed:
        pytest.fail(result.failed, pytrace=False)


def test_the_readme_has_commands_to_run():
    assert len(DLSCALE) >= 10, [_id(c) for c in DLSCALE]
    assert any(c.words[1:2] == ("run",) for c in DLSCALE)


@pytest.mark.parametrize("command", MAKE, ids=lambda c: shlex.join(c.words))
def test_a_make_target_the_readme_names_exists(command: ShellCommand):
    named = {w for w in command.words[1:] if not w.startswith("-") and "=" not in w}
    missing = named - make_targets(ROOT / "Makefile")
    assert not missing, (
        f"{command.file}:{command.line}: no target {sorted(missing)} in the Makefile"
    )


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("dlscale run --no-such-flag", "failed"),  # the parser refuses it
        ("dlscale run --preset no-such-preset", "failed"),  # exit 2
        ("dlscale ls nothing-of-the-kind", "failed"),
        ("dlscale run --device cuda --no-such-flag", "failed"),  # not run, its flags read
        ("dlscale ls models   # exits 3", "failed"),  # not the status the README gives
        ("dlscale run --preset no-such-preset   # exits 2", "ran"),
        ("dlscale run --preset quick --workers 1,2", "ran"),  # planned, nothing trained
        ("dlscale report", "ran"),  # the fixture store, as ./dlscale-results
        ("dlscale compare a/ b/ --fail-on-regression 10", "ran"),  # a copy in each
        ("dlscale microbench --workers 2", "skipped"),  # no --dry-run
        ("dlscale run --script train.py", "skipped"),  # the reader's own file
    ],
)
def test_a_broken_readme_command_fails_its_test(
    line: str, expected: str, place: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
):
    (command,) = shell_commands(f"```bash\n{line}\n```\n")
    result = outcome(command, *place, capsys)
    assert ("failed" if result.failed else "skipped" if result.skipped else "ran") == expected
    assert make_targets(ROOT / "Makefile") >= {"demo", "test", "check"}
    assert "no-such-target" not in make_targets(ROOT / "Makefile")


def test_the_shell_commands_of_a_readme_are_read_as_a_shell_reads_them():
    text = (
        "```bash\n"
        "$ dlscale run --workers 1,2 \\\n"
        "    --set 'note=a # b'   # a comment's #, and it's apostrophe\n"
        "make demo && dlscale report   # two commands\n"
        "dlscale ls runs --json > runs.jsonl 2>&1 | head -3\n"
        "cat > job.sh <<'EOF'\n"
        "dlscale run --inside-a-file\n"
        "EOF\n"
        "```\n\n"
        "```python\ndlscale run --not-shell\n```\n\n"
        "```\nfound: an output [1.2, 3.4] (it's no command\n```\n"
    )
    found = [(c.line, c.words, c.comment) for c in shell_commands(text)]
    assert found == [
        (2, ("dlscale", "run", "--workers", "1,2", "--set", "note=a # b"),
         "a comment's #, and it's apostrophe"),
        (4, ("make", "demo"), "two commands"),
        (4, ("dlscale", "report"), "two commands"),
        (5, ("dlscale", "ls", "runs", "--json"), ""),
        (5, ("head", "-3"), ""),
        (6, ("cat",), ""),
    ]  # fmt: skip
