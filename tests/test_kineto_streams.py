"""Kineto traces from pipes and standard input (issue 11): ``-``, ``<(zcat rank0.json.gz)``, a
named FIFO; the format is sniffed from the bytes read, never from a second open."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from traceoverlap.core.errors import TraceFormatError
from traceoverlap.readers import _bytes as _input
from traceoverlap.readers import read_trace, sniff_format
from traceoverlap.run.analysis import expand_paths

DOC = {
    "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 2, "dur": 3}
    ],
    "distributedInfo": {"rank": 3, "world_size": 4},
}
TEXT = json.dumps(DOC).encode()

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")


def _check(tl: object) -> None:
    # One cpu_op at ts 2 µs, dur 3 µs -> [2000, 5000] ns; rank 3 from distributedInfo.
    ev = tl.events  # type: ignore[attr-defined]
    assert ev["start_ns"].tolist() == [2_000] and ev["end_ns"].tolist() == [5_000]
    assert tl.traces[0].rank == 3  # type: ignore[attr-defined]


@needs_fifo
@pytest.mark.parametrize("payload", [TEXT, gzip.compress(TEXT)], ids=["json", "gzip"])
def test_named_fifo_with_a_writer(tmp_path: Path, payload: bytes) -> None:
    fifo = tmp_path / "rank.json"
    os.mkfifo(fifo)

    def write() -> None:
        time.sleep(0.2)  # the reader opens first and waits for the writer
        with open(fifo, "wb") as f:
            f.write(payload)

    t = threading.Thread(target=write)
    t.start()
    try:
        assert sniff_format(fifo) == "stream"  # not opened: that would consume it
        _check(read_trace(fifo))
    finally:
        t.join()


@needs_fifo
def test_named_fifo_without_a_writer_is_refused_not_waited_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_input, "FIFO_WAIT_S", 0.2)
    fifo = tmp_path / "nobody.json"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    with pytest.raises(TraceFormatError, match="no writer") as info:
        read_trace(fifo)
    assert time.monotonic() - t0 < 5
    assert str(fifo) in str(info.value)


def test_anonymous_pipe_as_dev_fd(tmp_path: Path) -> None:
    # What bash's <(zcat x.json.gz) passes: /dev/fd/N, an anonymous pipe with its writer.
    r, w = os.pipe()
    t = threading.Thread(target=lambda: (os.write(w, gzip.compress(TEXT)), os.close(w)))
    t.start()
    try:
        _check(read_trace(f"/dev/fd/{r}"))
    finally:
        t.join()
        os.close(r)


def _run_stdin(data: bytes, code: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-c", code], input=data, capture_output=True, timeout=120
    )


def test_standard_input_dash() -> None:
    code = (
        "from traceoverlap.readers import read_trace\n"
        "tl = read_trace('-')\n"
        "print(tl.traces[0].path, tl.events['start_ns'].tolist(), tl.traces[0].rank)\n"
    )
    for payload in (TEXT, gzip.compress(TEXT)):
        out = _run_stdin(payload, code)
        assert out.returncode == 0, out.stderr.decode()
        assert out.stdout.decode().split() == ["<stdin>", "[2000]", "3"]


def test_cli_analyze_dash_reads_standard_input() -> None:
    doc = {
        "traceEvents": [
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": "ProfilerStep#1",
                "pid": 1,
                "tid": 1,
                "ts": 0,
                "dur": 10,
            },
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 2, "dur": 3},
        ]
    }
    out = subprocess.run(
        [sys.executable, "-m", "traceoverlap", "analyze", "-", "--format", "json"],
        input=gzip.compress(json.dumps(doc).encode()),
        capture_output=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr.decode()
    json.loads(out.stdout)  # a complete JSON document
    assert "<stdin>" in out.stdout.decode()  # the trace is named as read


def test_cli_report_draws_a_step_of_standard_input(tmp_path: Path) -> None:
    # a stream cannot be read twice: the analysis keeps what it read, and the step drawn
    # (ProfilerStep#1, the only one: the median) comes from it
    doc = {
        "traceEvents": [
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1}
            | {"ts": 0, "dur": 10},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 2, "dur": 3},
        ]
    }
    out = subprocess.run(
        [sys.executable, "-m", "traceoverlap", "report", "-", "-o", str(tmp_path / "r.html")],
        input=json.dumps(doc).encode(),
        capture_output=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr.decode()
    assert "Timeline of step 1 on rank 0" in (tmp_path / "r.html").read_text(encoding="utf-8")


def test_expand_paths_keeps_dash() -> None:
    assert [str(p) for p in expand_paths(["-"])] == ["-"]


def test_empty_pipe_and_sqlite_from_a_pipe_are_refused() -> None:
    code = "from traceoverlap.readers import read_trace\nread_trace('-')\n"
    out = _run_stdin(b"", code)
    assert out.returncode != 0 and b"TraceFormatError" in out.stderr
    assert b"<stdin>" in out.stderr
    out = _run_stdin(b"SQLite format 3\x00" + b"\x00" * 100, code)
    assert b"cannot be read from a pipe" in out.stderr


def test_character_devices_are_refused() -> None:
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    with pytest.raises(TraceFormatError, match="device"):
        read_trace("/dev/zero")
