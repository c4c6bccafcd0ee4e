"""Trace strings that try to talk to the terminal or the browser (issue 21): OSC / CSI / C1
sequences in backend, device, kernel and range names never reach text outputs; JSON keeps the
exact text, escaped; HTML escapes the labels plotly draws. Non-UTF-8 file names never crash."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_cli_analyze import write_trace

from traceoverlap.cli import main
from traceoverlap.core.fmt import safe_text

OSC = "\x1b]0;PWNED\x07"  # sets the window title
CLIP = "\x1b]52;c;cHduZWQ=\x1b\\"  # writes the clipboard
CSI8 = "\x9b2J"  # 8-bit CSI: clear the screen
BAD = ("\x1b", "\x07", "\x9b", "\x9d", "PWNED", "cHduZWQ")


def _poisoned(tmp_path: Path, name: str = "t.json") -> Path:
    p = write_trace(tmp_path / name)
    d = json.loads(p.read_text())
    d["distributedInfo"]["backend"] = "nccl" + OSC
    d["deviceProperties"] = [{"id": 0, "name": "A100" + CLIP}]
    for e in d["traceEvents"]:
        if e["name"].startswith("nccl"):
            e["name"] = "ncclKernel_AllReduce" + OSC + CSI8
        elif e["name"] == "sm80_gemm":
            e["name"] = "gemm" + CLIP
    # a phase covering half the step: its label is drawn on the timeline
    e = {"ph": "X", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": 2, "dur": 6000}
    d["traceEvents"].append({**e, "name": "backward <a href=https://x.example>click</a>"})
    p.write_text(json.dumps(d))
    return p


def run(*args: str):  # noqa: ANN201
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize(
    "args",
    [
        ["analyze", "{t}"],
        ["analyze", "{t}", "-f", "csv"],
        ["analyze", "{t}", "-f", "markdown"],
        ["compare", "{t}", "{t}"],
        ["compare", "{t}", "{t}", "-f", "markdown"],
    ],
    ids=["table", "csv", "markdown", "compare", "compare-md"],
)
def test_text_formats_carry_no_terminal_control(tmp_path: Path, args: list[str]) -> None:
    t = _poisoned(tmp_path)
    res = run(*(a.format(t=t) for a in args))
    assert res.exit_code == 0, res.output
    assert not [b for b in BAD if b in res.output], repr(res.output[:2000])
    # written to a file, the same
    out = tmp_path / "out.txt"
    assert run(*(a.format(t=t) for a in args), "-o", str(out)).exit_code == 0
    assert not [b for b in BAD if b in out.read_text()]


def test_json_keeps_the_exact_text_escaped(tmp_path: Path) -> None:
    res = run("analyze", str(_poisoned(tmp_path)), "-f", "json")
    assert res.exit_code == 0
    assert not [c for c in ("\x1b", "\x07", "\x9b") if c in res.output]  # escaped as \\u....
    doc = json.loads(res.output)
    assert doc["traces"][0]["backend"] == "nccl" + OSC  # the exact text, once decoded


def test_html_phase_labels_are_escaped(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    res = run("report", str(_poisoned(tmp_path)), "-o", str(out), "--plotlyjs", "cdn")
    assert res.exit_code == 0, res.output
    page = out.read_text()
    assert "<a href=https://x.example>" not in page
    assert "backward &lt;a href=https://x.example&gt;" in page


def test_error_lines_carry_no_terminal_control(tmp_path: Path) -> None:
    p = tmp_path / ("x" + OSC + ".json")
    res = run("analyze", str(p))
    assert res.exit_code == 2 and "\x1b" not in res.output and "\x07" not in res.output


def test_safe_text_rules() -> None:
    s = "a" + OSC + "b" + CLIP + "c" + CSI8 + "d\x1b[2Je\x1b[31mred\x1b[0m\tx\ny\rz\x00,q\r\n"
    assert safe_text(s) == "abcdered\tx\nyz,q\r\n"
    # our own colours (SGR) stay when asked, nothing else does
    assert safe_text(s, keep_sgr=True) == "abcde\x1b[31mred\x1b[0m\tx\nyz,q\r\n"


@pytest.mark.skipif(os.name != "posix", reason="byte file names")
@pytest.mark.parametrize(
    "args",
    [["analyze", "{d}", "-f", "json"], ["report", "{d}", "-o", "{o}"], ["analyze", "{d}"]],
    ids=["json", "report", "table"],
)
def test_non_utf8_file_names(tmp_path: Path, args: list[str]) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    src = write_trace(tmp_path / "t.json")
    os.rename(src, os.fsencode(folder) + b"/rank\xe90.json")
    o = str(tmp_path / "r.html")
    res = run(*(a.format(d=folder, o=o) for a in args))
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output
    if args[2:4] == ["-f", "json"]:
        assert json.loads(res.output)["traces"][0]["path"].endswith("rank\ufffd0.json")


# --- issue 41: the filter decided by what the text is, never by what it looks like


@pytest.mark.parametrize("prefix", ["<html>", "<!DOCTYPE html>"])
def test_a_trace_named_like_html_is_still_filtered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prefix: str
) -> None:
    # the text report starts with the file's name; a name starting with `<html` made the
    # filter take the report for an HTML page and pass the trace's OSC / CSI through raw
    _poisoned(tmp_path, name=prefix + "t.json")
    monkeypatch.chdir(tmp_path)
    for args in (["analyze", prefix + "t.json"], ["analyze", prefix + "t.json", "-f", "markdown"]):
        res = run(*args)
        assert res.exit_code == 0, res.output
        assert res.output.startswith(prefix) or "-f" in args
        assert not [b for b in BAD if b in res.output], repr(res.output[:2000])


SGR_TRAPS = ("\x1b[8m", "\x1b[30;40m", "\x1b[2K")  # conceal, black on black, erase the line


def test_on_a_terminal_only_our_own_colours_stay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # a trace could conceal (ESC[8m) or black out the rest of a table line: the filter kept
    # every SGR sequence on a terminal, the trace's with ours
    import sys

    from traceoverlap import analyze
    from traceoverlap.cli._common import write_text
    from traceoverlap.reporters.text import render

    monkeypatch.delenv("NO_COLOR", raising=False)
    p = write_trace(tmp_path / ("rank0" + SGR_TRAPS[0] + ".json"))
    d = json.loads(p.read_text())
    d["distributedInfo"]["backend"] = "nccl" + SGR_TRAPS[1]
    d["deviceProperties"] = [{"id": 0, "name": "A100" + SGR_TRAPS[2] + "\x1b[0m"}]
    p.write_text(json.dumps(d))
    monkeypatch.chdir(tmp_path)  # a short relative name: no line wrap splits its sequence
    text = render(analyze(p.name), color=True)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    write_text(text, None)
    out = capsys.readouterr().out
    assert not [s for s in SGR_TRAPS if s in out], repr(out[:2000])
    assert "\x1b[1m" in out  # our own bold headings stay
    assert "rank0.json" in out and "nccl" in out  # the names, less their sequences


def test_text_not_rendered_by_our_console_keeps_no_colour_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Markdown, CSV, the what-if table, or text that looks like a page: every escape goes
    import sys

    from traceoverlap.cli._common import write_text

    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    write_text("| a" + SGR_TRAPS[0] + " | b" + OSC + " |\n", None)
    write_text("<!doctype html><p>x" + SGR_TRAPS[1] + OSC + "</p>\n", None)
    assert capsys.readouterr().out == "| a | b |\n<!doctype html><p>x</p>\n"


def test_rich_markup_in_a_trace_string_is_text(monkeypatch: pytest.MonkeyPatch) -> None:
    # a collective or step name "[conceal]..." in a table cell was rich markup: rich's own
    # conceal / reverse sequence, which the filter keeps as ours
    import io

    from rich.table import Table

    from traceoverlap.reporters._format import make_console

    monkeypatch.delenv("NO_COLOR", raising=False)
    buf = io.StringIO()
    console = make_console(buf, color=True, width=80)
    table = Table(header_style="bold")
    table.add_column("collective")
    table.add_row("[conceal]allreduce[/] [reverse on black]x[/]")
    console.print(table)
    out = buf.getvalue()
    assert "\x1b[8m" not in out and "\x1b[7" not in out and ";40m" not in out, repr(out)
    assert "[conceal]allreduce[/]" in out and "\x1b[1m" in out  # the text; our bold header
