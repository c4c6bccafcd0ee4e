"""Long work's progress (issue 35): the stages report it through core.progress, the CLI shows it
on stderr only when stderr is a terminal; a library caller, a pipe, JSON and CSV see nothing."""

from __future__ import annotations

import io
import json
import os
import stat
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import WORKLOAD_FIXTURES
from rich.console import Console

from traceoverlap.core import progress
from traceoverlap.run.parallel import PROGRESS_MIN_UNITS, run_map


class Recorder:
    """A reporter that writes down what it is told."""

    def __init__(self) -> None:
        self.events: list[tuple[str, ...]] = []

    @contextmanager
    def steps(self, label: str, total: int) -> Iterator[Callable[[], None]]:
        self.events.append(("steps", label, str(total)))
        yield lambda: self.events.append(("done",))
        self.events.append(("end", label))

    @contextmanager
    def activity(self, label: str) -> Iterator[None]:
        self.events.append(("activity", label))
        yield
        self.events.append(("end", label))


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    rec = Recorder()
    before = progress.install(rec)
    try:
        yield rec
    finally:
        progress.install(before)


def _files(tmp_path: Path, n: int) -> list[Path]:
    out = []
    for i in range(n):
        (tmp_path / f"r{i}.json").write_bytes(b"{}")
        out.append(tmp_path / f"r{i}.json")
    return out


def test_the_map_reports_units_done_of_the_total(tmp_path: Path, recorder: Recorder) -> None:
    files = _files(tmp_path, PROGRESS_MIN_UNITS)
    assert list(run_map(files, os.path.basename, jobs=1)) == [f.name for f in files]
    assert recorder.events[0] == ("steps", "reading rank traces", str(PROGRESS_MIN_UNITS))
    assert recorder.events[1:-1] == [("done",)] * PROGRESS_MIN_UNITS
    assert recorder.events[-1] == ("end", "reading rank traces")


def test_a_small_map_reports_nothing(tmp_path: Path, recorder: Recorder) -> None:
    # 2 small files: over in a moment, no display to flash
    assert list(run_map(_files(tmp_path, 2), os.path.basename, jobs=1)) == ["r0.json", "r1.json"]
    assert recorder.events == []


def test_without_a_reporter_the_library_is_quiet(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    before = progress.install(None)
    try:
        files = _files(tmp_path, PROGRESS_MIN_UNITS)
        assert len(list(run_map(files, os.path.basename, jobs=1))) == PROGRESS_MIN_UNITS
        with progress.activity("anything"):
            pass
    finally:
        progress.install(before)
    assert capfd.readouterr() == ("", "")


def test_another_process_does_not_show_the_installed_reporter(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a worker the map forks inherits the reporter: only the process that installed it shows
    real = os.getpid()
    monkeypatch.setattr(os, "getpid", lambda: real + 1)
    with progress.steps("x", 3) as done:
        done()
    assert recorder.events == []


def test_an_nsys_export_reports_an_activity(tmp_path: Path, recorder: Recorder) -> None:
    from traceoverlap.core.errors import TraceFormatError
    from traceoverlap.readers.nsys._export import run_nsys_export

    fake = tmp_path / "nsys"  # a stand-in that fails at once
    fake.write_text(f"#!{sys.executable}\nimport sys\nsys.exit(3)\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    report = tmp_path / "big.nsys-rep"
    report.write_bytes(b"x")
    with pytest.raises(TraceFormatError):
        run_nsys_export(str(fake), report, tmp_path / "big.sqlite")
    label = "nsys export big.nsys-rep to SQLite"
    assert recorder.events == [("activity", label), ("end", label)]


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_a_display_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    from traceoverlap.reporters.progress import RichProgress, terminal_reporter

    monkeypatch.setenv("TERM", "xterm")
    assert terminal_reporter(_Stream(tty=False)) is None
    assert isinstance(terminal_reporter(_Stream(tty=True)), RichProgress)
    monkeypatch.setenv("TERM", "dumb")
    assert terminal_reporter(_Stream(tty=True)) is None


def test_the_display_nests_an_activity_under_the_bar() -> None:
    # rich allows one live display per console: the export's spinner joins the ranks' bar
    from traceoverlap.reporters.progress import RichProgress

    out = io.StringIO()
    shown = RichProgress(Console(file=out, force_terminal=True, width=100))
    with shown.steps("reading rank traces", 2) as done:
        with shown.activity("nsys export a.nsys-rep to SQLite"):
            done()
        done()
    assert shown._progress is None  # stopped with the last piece of work
    with shown.activity("again"):  # and starts afresh
        pass
    assert "reading rank traces" in out.getvalue()


def test_the_cli_off_a_terminal_writes_no_progress(tmp_path: Path) -> None:
    # CliRunner's stderr is no terminal: JSON on stdout parses, and nothing else is written
    from traceoverlap.cli import main

    res = CliRunner().invoke(main, ["analyze", str(WORKLOAD_FIXTURES / "bucketed"), "-f", "json"])
    assert res.exit_code == 0, res.output
    json.loads(res.stdout)
    assert progress._active() is None  # and no reporter is left installed
