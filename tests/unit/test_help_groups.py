"""``run --help`` and ``tui --help`` list their options in groups, each option once, and end with
examples (``cli_options.GroupedCommand``): 59 and 67 options in one flat list were unreadable."""

from __future__ import annotations

import re

import click
import pytest
from click.testing import CliRunner

from specload.cli_run import run_command, tui_command

GROUPS = ("Target", "Load shape", "Prompts and workload", "Request body", "Outputs", "Comparison",
          "Capacity search", "Server watch", "Workers")
# an option of each group, as the user would look for it there
WHERE = {"--api": "Target", "--concurrency": "Load shape", "--dataset": "Prompts and workload",
         "--max-tokens": "Request body", "--record": "Outputs", "--no-record": "Outputs", "--json": "Outputs",
         "--baseline": "Comparison", "--find-max": "Capacity search", "--server-log": "Server watch",
         "--workers": "Workers", "--theme": "Dashboard"}


def _sections(text: str) -> dict[str, str]:
    """Section title -> its text (a title is a line ending in ':' at the left margin)."""
    out: dict[str, str] = {}
    title = None
    for line in text.splitlines():
        if re.fullmatch(r"[A-Z][A-Za-z ]+:", line):
            title = line[:-1]
            out[title] = ""
        elif title is not None:
            out[title] += line + "\n"
    return out


@pytest.mark.parametrize("command", [run_command, tui_command], ids=["run", "tui"])
def test_help_is_grouped_each_option_once_and_ends_with_examples(command: click.Command) -> None:
    text = CliRunner().invoke(command, ["--help"], terminal_width=100).output
    sections = _sections(text)
    titles = list(sections)
    expected = [*GROUPS, *(["Dashboard"] if command is tui_command else []), "Other options", "Examples"]
    assert titles == expected, titles
    assert "Options" not in titles  # no flat list left
    for flag, group in WHERE.items():
        if group == "Dashboard" and command is run_command:
            assert flag not in text
            continue
        assert re.search(rf"^  (-\w, )?{flag}(?![\w-])", sections[group], re.M), (flag, group)
    # every option of the command is listed once, in one group
    for p in command.params:
        if isinstance(p, click.Option):
            flag = max(p.opts, key=len)
            hits = [t for t, body in sections.items() if re.search(rf"^  (-\w, )?{re.escape(flag)}(?![\w-])", body, re.M)
                    and t != "Examples"]
            assert len(hits) == 1, (flag, hits)
    examples = sections["Examples"]
    assert text.rstrip().endswith(examples.rstrip())  # the examples close the help
    assert examples.count(f"specload {command.name}") >= 3
