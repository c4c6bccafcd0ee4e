"""SIGTERM in the middle of writing an output (issue 41): the command ends through its clean-up,
as on an interrupt: the old file whole, no temporary file beside it, one line, exit 143."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "fixtures" / "workloads" / "bucketed"

# `traceoverlap export`, with the trace writer stopping (ready file written) after its first
# block of events: SIGTERM then arrives while the output is half written
_SLOW_EXPORT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from traceoverlap.reporters import perfetto
    write = perfetto._Writer.write
    ready = Path(sys.argv[1])
    def slow(self, events):
        n = write(self, events)
        ready.write_text("ready")
        time.sleep(60)
        return n
    perfetto._Writer.write = slow
    sys.argv = ["traceoverlap", "export", sys.argv[2], "-o", sys.argv[3]]
    from traceoverlap.__main__ import run
    run()
    """
)


def test_sigterm_during_export_keeps_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    out.write_bytes(b'{"old": true}')
    ready = tmp_path / "ready"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _SLOW_EXPORT, str(ready), str(RUN), str(out)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        end = time.monotonic() + 30
        while not ready.exists() and proc.poll() is None and time.monotonic() < end:
            time.sleep(0.05)
        assert ready.exists(), proc.stderr.read() if proc.poll() is not None else "no start"
        # the half-written trace is there, under a temporary name
        assert len([p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]) == 1
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 128 + signal.SIGTERM, err.decode()
    assert err.decode().strip() == "traceoverlap: terminated"
    assert out.read_bytes() == b'{"old": true}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ready", "run.json"]


def test_a_forked_worker_dies_of_sigterm_at_once() -> None:
    # the handler is the command's, not its pool workers': a fork gets the default back
    from traceoverlap.core._signals import sigterm_exits

    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        pytest.skip("the test runner handles SIGTERM itself")
    with sigterm_exits():
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            os._exit(0 if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL else 1)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
