"""The command line as a whole: every command teaches (help text, examples), and every command
that analyses a run takes the same option stack, so the same flags mean the same run everywhere
(issue 34: whatif once took only --step-regex and -j, so its graph could differ from analyze's)."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from traceoverlap.cli import main

ANALYSING = ("analyze", "report", "export", "compare", "whatif")
#: the option stack of the analysing commands (cli/_common.analysis_options), by parameter name
STACK = {
    "steps",
    "ranks",
    "step_regex",
    "comm_patterns",
    "config",
    "lost_threshold",
    "jobs",
    "scheduler",
    "debug",
}


def _params(name: str) -> dict[str, click.Parameter]:
    command = main.commands[name]
    return {p.name: p for p in command.params if p.name is not None}


@pytest.mark.parametrize("name", ANALYSING)
def test_every_analysing_command_takes_the_whole_option_stack(name: str) -> None:
    params = _params(name)
    assert STACK <= set(params), sorted(STACK - set(params))
    # the same flags for the same parameter on every command
    reference = _params("analyze")
    for p in STACK:
        assert params[p].opts == reference[p].opts, (name, p)


@pytest.mark.parametrize("name", sorted(main.commands))
def test_every_command_has_help_with_examples(name: str) -> None:
    command = main.commands[name]
    assert command.help and len(command.help.split()) >= 8, name
    out = CliRunner().invoke(main, [name, "--help"])
    assert out.exit_code == 0 and "Examples:" in out.output, name
    for p in command.params:
        if isinstance(p, click.Option) and not p.hidden:
            assert p.help, f"{name} {p.opts}: an option without help"
