"""What a path that is not a readable trace is told, whichever reader step finds it out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from traceoverlap.core.errors import TraceFormatError
from traceoverlap.readers import _bytes as _input
from traceoverlap.readers import read_trace, sniff_format
from traceoverlap.readers.kineto import rank_from_filename as kineto_rank_from_filename


@pytest.mark.parametrize("kind", ["missing", "empty", "directory"])
def test_sniffing_and_reading_say_the_same(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "rank0.json"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "directory":
        path.mkdir()
    messages = []
    for step in (sniff_format, _input.read_raw):
        with pytest.raises(TraceFormatError) as err:
            step(path)
        messages.append(str(err.value))
    assert messages[0] == messages[1] == str(_input.file_error(path, kind))


def test_an_empty_pipe_is_an_empty_file() -> None:
    code = "from traceoverlap.readers import read_trace\nread_trace('-')\n"
    out = subprocess.run([sys.executable, "-c", code], input=b"", capture_output=True, timeout=120)
    assert out.returncode != 0
    assert b"<stdin>: file is empty" in out.stderr


def test_readers_share_the_rank_spelling_of_file_names() -> None:
    assert kineto_rank_from_filename is _input.rank_from_filename


def test_whitespace_only_file_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "rank0.json"
    path.write_bytes(b" \n\t ")
    with pytest.raises(TraceFormatError, match="file is empty"):
        read_trace(path)
