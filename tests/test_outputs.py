"""Output files (issue 21): never written over an input, written atomically, never blocking on a
named pipe (traceoverlap.reporters.outputs, wired into analyze / compare / report)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import one_error_line
from test_cli_analyze import write_trace

from traceoverlap.cli import main
from traceoverlap.core.errors import UsageError
from traceoverlap.reporters.outputs import check_outputs, open_output, write_output


def run(*args: str):  # noqa: ANN201
    return CliRunner().invoke(main, list(args))


def _run_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    folder.mkdir()
    write_trace(folder / "rank0.json")
    write_trace(folder / "rank1.json", comm_ms=4.0)
    return folder


@pytest.mark.parametrize(
    "args",
    [
        ["analyze", "{t}", "-o", "{t}"],
        ["analyze", "{t}", "--html", "{t}"],
        ["report", "{t}", "-o", "{t}"],
        ["compare", "{t}", "{u}", "-o", "{u}"],
        ["compare", "{t}", "{u}", "--html", "{t}"],
    ],
    ids=["analyze-o", "analyze-html", "report-o", "compare-o", "compare-html"],
)
def test_output_over_an_input_is_refused_and_the_input_kept(
    tmp_path: Path, args: list[str]
) -> None:
    t = write_trace(tmp_path / "t.json")
    u = write_trace(tmp_path / "u.json", comm_ms=5.0)
    before = {p: p.read_bytes() for p in (t, u)}
    line = one_error_line(run(*(a.format(t=t, u=u) for a in args)))
    assert "refusing to write the output over an input trace" in line
    assert {p: p.read_bytes() for p in (t, u)} == before


def test_output_over_a_trace_of_an_input_folder_is_refused(tmp_path: Path) -> None:
    folder = _run_folder(tmp_path)
    before = (folder / "rank1.json").read_bytes()
    # the same file by another spelling (./run/../run/rank1.json) and through a symlink
    link = tmp_path / "link.json"
    link.symlink_to(folder / "rank1.json")
    for out in (str(folder / ".." / "run" / "rank1.json"), str(link)):
        line = one_error_line(run("analyze", str(folder), "-f", "json", "-o", out))
        assert "rank1.json" in line and "over an input trace" in line
    assert (folder / "rank1.json").read_bytes() == before


def test_own_json_output_in_the_run_folder_may_be_rewritten(tmp_path: Path) -> None:
    # `analyze run/ -o run/result.json` twice: the second run skips result.json (not a trace)
    # and may replace it
    folder = tmp_path / "run"
    folder.mkdir()
    write_trace(folder / "rank0.json")
    out = folder / "result.json"
    for _ in range(2):
        res = run("analyze", str(folder), "-f", "json", "-o", str(out))
        assert res.exit_code == 0, res.output
    assert "".join(out.read_text()[:40].split()).startswith('{"schema_version"')


def test_two_outputs_that_are_one_file_are_refused(tmp_path: Path) -> None:
    t = write_trace(tmp_path / "t.json")
    out = str(tmp_path / "o.html")
    line = one_error_line(run("analyze", str(t), "-o", out, "--html", out))
    assert "two outputs" in line


def test_config_file_is_an_input_too(tmp_path: Path) -> None:
    t = write_trace(tmp_path / "t.json")
    cfg = tmp_path / "c.toml"
    cfg.write_text("[thresholds]\nlost_ratio = 0.2\n")
    line = one_error_line(run("analyze", str(t), "--config", str(cfg), "-o", str(cfg)))
    assert "over an input" in line
    assert cfg.read_text() == "[thresholds]\nlost_ratio = 0.2\n"


def test_write_is_atomic_and_keeps_the_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "o.txt"
    out.write_text("old")
    out.chmod(0o640)
    write_output("new", str(out))
    assert out.read_text() == "new" and stat.S_IMODE(out.stat().st_mode) == 0o640

    # a failure after the temporary file is written leaves the old file whole and no temp file
    def boom(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(UsageError, match="No space left"):
        write_output("newer", str(out))
    assert out.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["o.txt"]


def test_symlinked_output_writes_its_target(tmp_path: Path) -> None:
    target = tmp_path / "real.txt"
    target.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    write_output("new", str(link))
    assert link.is_symlink() and target.read_text() == "new"


@pytest.mark.parametrize(
    "args",
    [
        ["analyze", "{t}", "-o", "{f}"],
        ["analyze", "{t}", "--html", "{f}"],
        ["report", "{t}", "-o", "{f}"],
        ["compare", "{t}", "{t}", "-o", "{f}"],
    ],
    ids=["analyze-o", "analyze-html", "report-o", "compare-o"],
)
def test_fifo_without_reader_as_output_does_not_block(tmp_path: Path, args: list[str]) -> None:
    t = write_trace(tmp_path / "t.json")
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    res = run(*(a.format(t=t, f=fifo) for a in args))
    # (analyze --html prints its table first: a pipe cannot be probed before without sending
    # its reader an end of file)
    assert res.exit_code == 2 and "Traceback" not in res.output
    last = res.output.strip().splitlines()[-1]
    assert last.startswith("traceoverlap: error:") and "named pipe with no reader" in last


def test_fifo_with_a_reader_gets_the_output(tmp_path: Path) -> None:
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # the reader is there first
    try:
        write_output("hello", str(fifo))  # fits the pipe's buffer: no need to read meanwhile
        assert os.read(fd, 100) == b"hello"
    finally:
        os.close(fd)


def test_check_outputs_ignores_stdout_and_new_files(tmp_path: Path) -> None:
    t = write_trace(tmp_path / "t.json")
    check_outputs([None, "-", str(tmp_path / "new.json")], [str(t)])  # nothing raised


def test_fifo_as_config_does_not_block(tmp_path: Path) -> None:
    t = write_trace(tmp_path / "t.json")
    fifo = tmp_path / "c.toml"
    os.mkfifo(fifo)
    line = one_error_line(run("analyze", str(t), "--config", str(fifo)))
    assert "c.toml" in line and "not a regular file" in line


def test_whatif_output_over_an_input_is_refused(tmp_path: Path) -> None:
    t = write_trace(tmp_path / "t.json")
    before = t.read_bytes()
    line = one_error_line(run("whatif", str(t), "-o", str(t)))
    assert "refusing to write the output over an input trace" in line
    assert t.read_bytes() == before


def test_export_output_over_an_input_or_to_a_lone_fifo_is_one_line(tmp_path: Path) -> None:
    t = write_trace(tmp_path / "t.json")
    before = t.read_bytes()
    line = one_error_line(run("export", str(t), "-o", str(t)))
    assert "refusing to write the output over an input trace" in line
    assert t.read_bytes() == before
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    line = one_error_line(run("export", str(t), "-o", str(fifo)))
    assert "named pipe with no reader" in line  # as for every other output


def test_open_output_replaces_the_file_only_when_the_block_ends(tmp_path: Path) -> None:
    out = tmp_path / "o.json"
    out.write_text("old")
    out.chmod(0o640)
    with open_output(str(out)) as fh:
        fh.write(b"new ")
        assert out.read_text() == "old"  # not yet: a temporary file beside it
        assert len(list(tmp_path.iterdir())) == 2
        fh.write(b"file")
    assert out.read_text() == "new file" and stat.S_IMODE(out.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["o.json"]


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyboardInterrupt()], ids=type)
def test_open_output_error_in_the_block_keeps_the_old_file(
    tmp_path: Path, exc: BaseException
) -> None:
    out = tmp_path / "o.json"
    out.write_text("old")
    with pytest.raises(type(exc)), open_output(str(out)) as fh:  # the block's own error
        fh.write(b"x" * 100_000)
        raise exc
    assert out.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["o.json"]
    new = tmp_path / "new.json"
    with pytest.raises(RuntimeError), open_output(str(new)) as fh:
        fh.write(b"partial")
        raise RuntimeError("boom")
    assert [p.name for p in tmp_path.iterdir()] == ["o.json"]  # no new file, no temporary one


def test_open_output_two_writers_of_one_path_each_write_whole_files(tmp_path: Path) -> None:
    out = tmp_path / "o.json"
    with open_output(str(out)) as first:
        first.write(b"first")
        with open_output(str(out)) as second:
            second.write(b"second")
        assert out.read_text() == "second"
    assert out.read_text() == "first" and [p.name for p in tmp_path.iterdir()] == ["o.json"]


def test_open_output_symlink_fifo_and_device(tmp_path: Path) -> None:
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    with open_output(str(link)) as fh:
        fh.write(b"new")
    assert link.is_symlink() and target.read_text() == "new"
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    ran = False
    with pytest.raises(UsageError, match="named pipe with no reader"), open_output(str(fifo)):
        ran = True
    assert not ran  # refused before the block runs
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with open_output(str(fifo)) as fh:
            fh.write(b"hello")
        assert os.read(fd, 100) == b"hello"
    finally:
        os.close(fd)
    with pytest.raises(UsageError, match="is a folder"), open_output(str(tmp_path)):
        pass


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_open_output_write_error_names_the_output() -> None:
    # a character device is written directly: the full disk is the write's error
    with pytest.raises(UsageError, match="/dev/full: cannot write the output"):
        with open_output("/dev/full") as fh:
            fh.write(b"x" * 100_000)
