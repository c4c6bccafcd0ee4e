"""The output formats registry (traceoverlap.reporters.formats, issue 34): ``--format`` choices,
the ``-o`` suffix guess and the render functions all come from one list."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from test_cli_analyze import write_trace

from traceoverlap.cli import main
from traceoverlap.core.errors import UsageError
from traceoverlap.reporters import (
    FORMATS,
    KINDS,
    choose,
    compare_text,
    csv_report,
    formats,
    json_report,
    markdown,
    text,
)


def run(*args: str):  # noqa: ANN201
    return CliRunner().invoke(main, list(args))


def test_registry_is_well_formed() -> None:
    for kind in KINDS:
        mine = [f for f in FORMATS if f.kind == kind]
        assert len({f.name for f in mine}) == len(mine), kind
        suffixes = [s for f in mine for s in f.suffixes]
        assert len(set(suffixes)) == len(suffixes), kind
        assert all(s.startswith(".") and s == s.lower() for s in suffixes)
        assert "table" in formats(kind)
    assert {f.kind for f in FORMATS} <= set(KINDS)
    for f in FORMATS:
        assert callable(f.function()), f


def test_registry_names_the_reporters() -> None:
    a, c = formats("analysis"), formats("compare")
    assert a["table"].function() is text.render and a["json"].function() is json_report.render
    assert a["csv"].function() is csv_report.render and a["markdown"].function() is markdown.render
    assert c["table"].function() is compare_text.render_table
    assert c["json"].function() is compare_text.render_json
    assert c["markdown"].function() is compare_text.render_markdown
    # "What to try" (the run graph replayed) only where it is shown
    assert {n for n, f in a.items() if f.what_to_try} == {"table", "markdown"}


@pytest.mark.parametrize(
    ("name", "output", "want"),
    [
        (None, None, "table"),
        (None, "-", "table"),
        (None, "out.json", "json"),
        (None, "OUT.JSON", "json"),
        (None, "out.csv", "csv"),
        (None, "out.md", "markdown"),
        (None, "out.markdown", "markdown"),
        (None, "out.txt", "table"),
        (None, "out", "table"),
        (None, "runs.json/out", "table"),
        ("table", "out.json", "table"),  # an explicit format always wins
        ("csv", "out.md", "csv"),
    ],
)
def test_choose_analysis(name: str | None, output: str | None, want: str) -> None:
    assert choose("analysis", name, output).name == want


def test_choose_compare_has_no_csv() -> None:
    assert choose("compare", None, "c.csv").name == "table"
    assert choose("compare", None, "c.json").name == "json"
    with pytest.raises(UsageError, match="expected one of table, json, markdown"):
        choose("compare", "csv")
    with pytest.raises(UsageError, match="output kind"):
        formats("html")


@pytest.mark.parametrize("command", ["analyze", "compare"])
def test_format_choices_come_from_the_registry(command: str) -> None:
    kind = "analysis" if command == "analyze" else "compare"
    opt = next(p for p in main.commands[command].params if p.name == "fmt")
    assert isinstance(opt.type, click.Choice)
    assert list(opt.type.choices) == list(formats(kind))
    out = CliRunner().invoke(main, [command, "--help"], terminal_width=200).output
    assert ".json: json" in out and "--format always wins" in out


def test_analyze_guesses_the_format_from_the_suffix(tmp_path: Path) -> None:
    t = write_trace(tmp_path / "t.json")
    for name in ("r.json", "r.csv", "r.md", "r.txt"):
        assert run("analyze", str(t), "-o", str(tmp_path / name)).exit_code == 0
    assert json.loads((tmp_path / "r.json").read_text())["steps"][0]["comm_ns"] == 3_000_000
    assert (tmp_path / "r.csv").read_text().startswith("rank,device,pid,step,")
    assert (tmp_path / "r.md").read_text().startswith("## traceoverlap")
    table = run("analyze", str(t)).output
    assert (tmp_path / "r.txt").read_text() == table
    # --format wins over the suffix
    assert run("analyze", str(t), "-f", "table", "-o", str(tmp_path / "t2.json")).exit_code == 0
    assert (tmp_path / "t2.json").read_text() == table


def test_compare_guesses_the_format_from_the_suffix(tmp_path: Path) -> None:
    a = write_trace(tmp_path / "a.json")
    b = write_trace(tmp_path / "b.json", comm_ms=4.0)
    assert run("compare", str(a), str(b), "-o", str(tmp_path / "c.json")).exit_code == 0
    assert "step_speedup" in json.loads((tmp_path / "c.json").read_text())
    assert run("compare", str(a), str(b), "-o", str(tmp_path / "c.md")).exit_code == 0
    assert (tmp_path / "c.md").read_text().startswith("# traceoverlap compare")


def test_help_imports_no_reporter() -> None:
    """The registry is read for --help: it must not import a reporter (pandas, plotly, rich)."""
    code = (
        "import sys; from traceoverlap.cli import main\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('numpy', 'pandas', 'plotly',"
        " 'rich', 'msgspec') or m.startswith('traceoverlap.reporters.') and"
        " m != 'traceoverlap.reporters.formats']\n"
        "print(heavy)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]", out.stdout
