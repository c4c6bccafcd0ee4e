"""Command-line inputs from the issue-21 campaign that used to end in a traceback or a silent
no-op: each is one clear line and a non-zero exit now."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from test_cli_analyze import write_trace

from traceoverlap.cli import main


def run(*args: str):  # noqa: ANN201
    return CliRunner().invoke(main, list(args))


def _one_error_line(res) -> str:  # noqa: ANN001
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("traceoverlap: error:"), res.output
    assert "Traceback" not in res.output
    return lines[0]


@pytest.mark.parametrize(
    "make",
    [lambda t: str(t / ("x" * 300 + ".json")), lambda t: str(t) + "/a" * 2100 + "/x.json"],
    ids=["name-300", "path-over-4096"],
)
@pytest.mark.parametrize("command", ["analyze", "report", "compare"])
def test_too_long_input_paths_are_one_line(tmp_path: Path, make, command: str) -> None:  # noqa: ANN001
    bad = make(tmp_path)
    args = [command, bad] if command != "compare" else [command, bad, bad]
    if command == "report":
        args += ["-o", str(tmp_path / "r.html")]
    line = _one_error_line(run(*args))
    assert "cannot look the path up (File name too long)" in line


def test_bad_scheduler_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    t = str(write_trace(tmp_path / "t.json"))
    for address in ("foo", "tcp://head"):
        line = _one_error_line(run("analyze", t, "--scheduler", address))
        assert "expected 'local' or a Dask scheduler address" in line
