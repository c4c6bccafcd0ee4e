"""Standard output that cannot take the whole output (issue 41): a full disk or a file size limit
where it is redirected is one error line and exit 2, as the same write with ``-o`` is; never exit
0 with a cut file. A reader that goes away (``| head``) stays quiet (exit 0)."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUN = str(ROOT / "fixtures" / "workloads" / "bucketed")

COMMANDS = {
    "analyze-json": ["analyze", RUN, "--format", "json"],
    "report": ["report", RUN, "-o", "-"],
    "export": ["export", RUN, "-o", "-"],
}
#: Bytes standard output may take: far less than any of these outputs (JSON, HTML, trace).
LIMIT = 4096


def _env(unbuffered: bool) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTHONUNBUFFERED", None)
    if unbuffered:  # standard output is then an unbuffered file whose writes may stop short
        env["PYTHONUNBUFFERED"] = "1"
    return env


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past it fails with EFBIG


def _one_error_line(err: bytes, why: str) -> None:
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1, err.decode()
    assert lines[0].startswith("traceoverlap: error: standard output: cannot write the output")
    assert why in lines[0]


@pytest.mark.parametrize(
    ("name", "unbuffered"),
    [("analyze-json", True), ("analyze-json", False), ("report", True), ("export", True)],
)
def test_file_size_limit_on_standard_output_is_an_error(
    tmp_path: Path, name: str, unbuffered: bool
) -> None:
    out = tmp_path / "out"
    with out.open("wb") as fh:
        r = subprocess.run(
            [sys.executable, "-m", "traceoverlap", *COMMANDS[name]],
            stdout=fh,
            stderr=subprocess.PIPE,
            env=_env(unbuffered),
            preexec_fn=_limited,
            timeout=120,
            check=False,
        )
    assert r.returncode == 2, r.stderr.decode()
    _one_error_line(r.stderr, "File too large")
    assert out.stat().st_size == LIMIT  # what fitted; the error says it is cut


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("name", ["analyze-json", "export"])
def test_full_disk_on_standard_output_is_an_error(name: str) -> None:
    with open("/dev/full", "wb") as full:
        r = subprocess.run(
            [sys.executable, "-m", "traceoverlap", *COMMANDS[name]],
            stdout=full,
            stderr=subprocess.PIPE,
            env=_env(True),
            timeout=120,
            check=False,
        )
    assert r.returncode == 2, r.stderr.decode()
    _one_error_line(r.stderr, "No space left on device")


@pytest.mark.parametrize("name", ["analyze-json", "export"])
def test_reader_that_goes_away_is_quiet(name: str) -> None:
    # `traceoverlap ... | head -c 10`: the reader closes the pipe after 10 bytes
    proc = subprocess.Popen(
        [sys.executable, "-m", "traceoverlap", *COMMANDS[name]],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(True),
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.read(10)
        proc.stdout.close()
        err = proc.stderr.read()
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert first.startswith(b"{")
    assert proc.returncode == 0 and b"error" not in err and b"Traceback" not in err, err


def test_report_to_standard_output_says_so(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "traceoverlap", *COMMANDS["report"]],
        capture_output=True,
        env=_env(False),
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.lstrip().lower().startswith(b"<!doctype html")
    assert r.stderr.decode().strip() == "wrote standard output"
    assert list(tmp_path.iterdir()) == []  # no file named "-"


def test_file_size_limit_on_an_export_file_keeps_the_old_file(tmp_path: Path) -> None:
    # the same limit with -o: refused, the old file whole, no temporary file left
    out = tmp_path / "run.json"
    out.write_bytes(b'{"old": true}')
    r = subprocess.run(
        [sys.executable, "-m", "traceoverlap", "export", RUN, "-o", str(out)],
        capture_output=True,
        env=_env(False),
        preexec_fn=_limited,
        timeout=120,
        check=False,
    )
    assert r.returncode == 2, r.stderr.decode()
    assert r.stderr.decode().count("\n") == 1 and "cannot write the output" in r.stderr.decode()
    assert out.read_bytes() == b'{"old": true}'
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


def test_two_exports_to_one_file_each_leave_a_whole_trace(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    cmd = [sys.executable, "-m", "traceoverlap", "export", RUN, "-o", str(out)]
    procs = [
        subprocess.Popen(cmd, env=_env(False), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    doc = json.loads(out.read_bytes())  # whole: one of the two, not a mix
    assert doc["otherData"]["generator"] == "traceoverlap export"
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]
