"""A memory-mapped input truncated while it is read (issue 21): one line naming the file and
exit status 2, not "Bus error" and 135. Run in child processes: the process ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from test_cli_analyze import write_trace

ROOT = Path(__file__).resolve().parents[1]


def _child(code: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )


def test_analyze_of_a_file_truncated_while_read_is_one_line(tmp_path: Path) -> None:
    # the plain JSON is memory-mapped by read_raw; the stand-in truncates the file right after
    # (what `cp` over it does), so the reader's first touch of a page faults
    trace = write_trace(tmp_path / "rank0.json")
    code = f"""
import os, sys
from traceoverlap.readers import kineto, _bytes as _input
real = _input.read_raw
def read_then_truncate(path):
    data = real(path)
    os.truncate(path, 0)
    return data
kineto.read_raw = read_then_truncate
from traceoverlap.cli import main
sys.argv = ["traceoverlap", "analyze", {str(trace)!r}]
main()
"""
    res = _child(code)
    assert res.returncode == 2, (res.returncode, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"traceoverlap: error: {trace}: the file was truncated")


def test_guard_names_the_file_and_is_removed_after(tmp_path: Path) -> None:
    p = tmp_path / "big.bin"
    p.write_bytes(b"x" * (1 << 20))
    code = f"""
import mmap, os, signal
from traceoverlap.readers._sigbus import guard
with guard("outer.json"):
    with guard({str(p)!r}):
        pass
    f = open({str(p)!r}, "rb")
    m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    os.truncate({str(p)!r}, 0)
    m[500000]
"""
    res = _child(code)
    assert res.returncode == 2 and res.stderr.startswith("traceoverlap: error: outer.json:")
    # outside any guard the default action is back: the process dies of the signal
    after = _child(
        "import faulthandler\nfaulthandler.disable()\n"
        "from traceoverlap.readers._sigbus import guard\n"
        "with guard('x'): pass\n"
        "import os, signal\nos.kill(os.getpid(), signal.SIGBUS)\n"
    )
    assert after.returncode == -signal.SIGBUS and "traceoverlap" not in after.stderr


def test_nsys_export_truncated_while_read_is_one_line(tmp_path: Path) -> None:
    # the SQLite export's pages are memory-mapped by the column reader (``mmap.mmap``); the
    # stand-in truncates the file right after it is mapped
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from nsys_writer import MS, NsysExport

    x = NsysExport()
    x.process(7, "python3")
    x.thread(7, 7, "python3")
    x.nvtx(7, 0, MS, "ProfilerStep#1")
    for i in range(2000):
        x.kernel(7, 0, 7, 2 * MS + i * 1000, 2 * MS + i * 1000 + 500, "gemm", launch=10**5 + i)
    p = x.write(tmp_path / "run.sqlite")
    code = f"""
import mmap, os, sys
from traceoverlap.cli import main
class MapThenTruncate(mmap.mmap):
    def __new__(cls, fileno, *a, **k):
        m = super().__new__(cls, fileno, *a, **k)
        path = os.readlink(f"/proc/self/fd/{{fileno}}")
        if path.endswith(".sqlite"):
            os.truncate(path, 4096)
        return m
mmap.mmap = MapThenTruncate
sys.argv = ["traceoverlap", "analyze", {str(p)!r}]
main()
"""
    res = _child(code)
    assert res.returncode == 2, (res.returncode, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"traceoverlap: error: {p}: the file was")
