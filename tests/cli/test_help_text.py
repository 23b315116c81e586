"""Every command's ``--help`` reads as prose at 80 columns: paragraphs wrap to the terminal
(docstrings are wrapped for the source, not for it), examples keep their lines, and every
option says what it is for."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from hetsched.cli.main import app, reflow

WIDTH = 80


def command_paths() -> list[list[str]]:
    """Every command and subcommand, as the words that name it."""
    out: list[list[str]] = []

    def walk(command: Any, path: list[str]) -> None:
        if path:
            out.append(path)
        names = command.list_commands(None) if hasattr(command, "list_commands") else []
        for name in names:
            walk(command.get_command(None, name), [*path, name])

    walk(typer.main.get_command(app), [])
    return out


def find_command(path: list[str]) -> Any:
    command: Any = typer.main.get_command(app)
    for name in path:
        command = command.get_command(None, name)
    return command


def render_help(path: list[str]) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": str(WIDTH)})
    assert result.exit_code == 0, result.output
    return result.output


def description(output: str) -> list[str]:
    """The lines between the usage line and the first panel."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if "Usage:" in line) + 1
    end = next(i for i, line in enumerate(lines) if line.startswith("╭"))
    return [line.rstrip() for line in lines[start:end]]


def stubs(lines: list[str], width: int) -> list[str]:
    """Prose lines that end early: the next line of the same paragraph starts with a word
    that would have fit after them (rich fills each line, so only a hard break does this).
    Indented lines (examples) are left alone."""
    out = []
    text_width = width - 2  # one cell of padding on each side
    for line, following in itertools.pairwise(lines):
        if not line.strip() or not following.strip():
            continue
        if following.startswith("  ") or line.startswith("  "):
            continue
        if len(line.strip()) + 1 + len(following.split()[0]) <= text_width:
            out.append(line.strip())
    return out


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("One line.", "One line."),
        ("A paragraph\nwrapped for\nthe source.", "A paragraph wrapped for the source."),
        ("First.\n\nSecond\nparagraph.", "First.\n\nSecond paragraph."),
        (
            "Run:\n\n    hetsched a\n    hetsched b\n\nAfter.",
            "Run:\n\n    hetsched a\n    hetsched b\n\nAfter.",
        ),
        ("Run:\n\n\b\nline one\nline two", "Run:\n\nline one\nline two"),
        ("Use ``--limit``\nhere.", "Use `--limit` here."),
        ("Shown.\n\fHidden\ntext.", "Shown.\n\fHidden\ntext."),
        ("    Indented\n    docstring\n\n    body.", "Indented docstring\n\nbody."),
    ],
)
def test_reflow(text: str, expected: str) -> None:
    assert reflow(text) == expected
    assert reflow(reflow(text)) == reflow(text) or "\b" in text


def test_stubs_finds_a_hard_break() -> None:
    lines = [" The service measures the rate between two reports", " on the model it runs on."]
    assert stubs(lines, WIDTH) == ["The service measures the rate between two reports"]
    assert stubs([" Examples:", "", "     hetsched submit a.yaml", "     hetsched b"], WIDTH) == []


@pytest.mark.parametrize("path", command_paths(), ids=" ".join)
def test_help_paragraphs_wrap_to_the_terminal(path: list[str]) -> None:
    lines = description(render_help(path))
    assert any(line.strip() for line in lines), f"hetsched {' '.join(path)} has no description"
    assert stubs(lines, WIDTH) == []


@pytest.mark.parametrize("path", command_paths(), ids=" ".join)
def test_every_option_says_what_it_is_for(path: list[str]) -> None:
    silent = [p.name for p in find_command(path).params if not getattr(p, "help", None)]
    assert silent == []


@pytest.mark.parametrize("path", command_paths(), ids=" ".join)
def test_no_option_name_or_help_word_is_cut_at_80_columns(path: list[str]) -> None:
    # rich cut every column of an options panel alike once the help column was as narrow
    # as the names: --max-gpus-per-task showed as --max-gpus-per-ta…
    output = render_help(path)
    names = [
        name
        for param in find_command(path).params
        for name in (*param.opts, *getattr(param, "secondary_opts", ()))
        if name.startswith("--")
    ]
    assert [name for name in names if name not in output] == []
    assert [line for line in output.splitlines() if "…" in line] == []


@pytest.mark.parametrize(
    ("path", "flags"), [(["up"], ["--demo"]), (["cancel"], ["--mine", "--dry-run", "--yes"])]
)
def test_a_flag_is_shown_without_a_type(path: list[str], flags: list[str]) -> None:
    """``--demo <bool>`` read as if the flag wanted a value (``--demo true``): a flag's line
    names it and says what it does, with nothing between."""
    output = render_help(path)
    assert "<bool>" not in output
    for flag in flags:
        line = next(line for line in output.splitlines() if f" {flag} " in line)
        after = [w for w in line.strip("│ ").split() if not w.startswith("-")]
        assert after[0][0].isupper(), line  # the help's first word, not a type
    # an option that takes a value keeps its type
    assert "<int>" in render_help(["up"]) and "<table|json>" in render_help(["cancel"])
